// MNIST with libtorch on a sluice stream, fed by the sluice prefetcher.
//
// The C++ counterpart of examples/go/trainer: an MLP 784-H-10 (ReLU, dropout on
// the hidden layer, cross-entropy, SGD with momentum) written with libtorch, whose
// ops all run on one sluice stream through c10::cuda::getStreamFromExternal and a
// CUDAStreamGuard. Batches come from a sluice prefetcher in pull mode: producer
// threads gather shuffled images (uint8) and labels into a slot's pinned memory,
// the prefetcher copies them to the device on its own copy stream, and the
// training loop views the slot's device memory as torch tensors (torch::from_blob).
// An Op scope that reads the batch's sync objects orders torch's reads after the
// H2D copy (a device-side wait), and the batch is released right after, in stream
// order, so the slot is refilled only once torch has read it.
//
// With --blocking the prefetcher is not used: each batch is gathered on the
// training thread and copied with a synchronous H2D copy, then trained on (no
// overlap), as the Go trainer's -blocking.
//
// It reads the four gzipped idx files of the GoMNIST Go module (the same files as
// the Go trainer), from --data DIR, with zlib (or decompressed copies of them, in a
// build without zlib). It prints the loss and test accuracy per epoch
// and the steps/s of the last epoch, and at the end:
//   RESULT torch_accuracy=A epochs=E batch=B hidden=H
//   RESULT torch_steps_per_s_prefetch=R
// (torch_accuracy_blocking and torch_steps_per_s_blocking with --blocking).
//
//   torch_trainer --data DIR [--epochs 5] [--batch 256] [--hidden 512] [--lr 0.1]
//                 [--momentum 0.9] [--dropout 0.1] [--seed 1] [--depth 4]
//                 [--producers 2] [--limit N] [--blocking]
#include <sluice/sluice.hpp>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/cuda.h>
#include <torch/torch.h>

// Built with zlib (CMake sets this where it finds zlib), the gzipped files are read
// directly; without it, only decompressed copies (the names without .gz).
#ifndef SLUICE_TRAINER_ZLIB
#define SLUICE_TRAINER_ZLIB 0
#endif
#if SLUICE_TRAINER_ZLIB
#include <zlib.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kInputs = 28 * 28;
constexpr std::int64_t kClasses = 10;
// MNIST's pixel mean and standard deviation (of x / 255), the usual normalisation.
constexpr double kMean = 0.1307;
constexpr double kStd = 0.3081;

struct Options {
  std::string data;
  int epochs = 5;
  std::int64_t batch = 256;
  std::int64_t hidden = 512;
  double lr = 0.1;
  double momentum = 0.9;
  double dropout = 0.1;
  std::uint64_t seed = 1;
  std::uint32_t depth = 4;
  std::uint32_t producers = 2;
  std::int64_t limit = 0;  // first N training images; 0: all
  bool blocking = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "torch_trainer: %s\n"
               "usage: torch_trainer --data DIR [--epochs N] [--batch N] [--hidden N] [--lr X]\n"
               "       [--momentum X] [--dropout X] [--seed N] [--depth N] [--producers N]\n"
               "       [--limit N] [--blocking]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--blocking") {
      o.blocking = true;
      continue;
    }
    if (a == "-h" || a == "--help") usage("help");
    if (i + 1 >= argc) usage("missing value after " + a);
    const std::string v = argv[++i];
    try {
      if (a == "--data") o.data = v;
      else if (a == "--epochs") o.epochs = std::stoi(v);
      else if (a == "--batch") o.batch = std::stoll(v);
      else if (a == "--hidden") o.hidden = std::stoll(v);
      else if (a == "--lr") o.lr = std::stod(v);
      else if (a == "--momentum") o.momentum = std::stod(v);
      else if (a == "--dropout") o.dropout = std::stod(v);
      else if (a == "--seed") o.seed = std::stoull(v);
      else if (a == "--depth") o.depth = static_cast<std::uint32_t>(std::stoul(v));
      else if (a == "--producers") o.producers = static_cast<std::uint32_t>(std::stoul(v));
      else if (a == "--limit") o.limit = std::stoll(v);
      else usage("unknown option " + a);
    } catch (const std::logic_error&) {
      usage("bad value for " + a + ": " + v);
    }
  }
  if (o.data.empty()) usage("--data DIR is required (the directory of the four MNIST .gz files)");
  if (o.epochs < 1 || o.batch < 1 || o.hidden < 1 || o.depth < 1 || o.producers < 1 ||
      o.limit < 0 || o.dropout < 0 || o.dropout >= 1) {
    usage("epochs, batch, hidden, depth and producers must be >= 1, limit >= 0, 0 <= dropout < 1");
  }
  return o;
}

// ---- MNIST: the idx files, gzipped ----------------------------------------------

bool exists(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  std::fclose(f);
  return true;
}

#if SLUICE_TRAINER_ZLIB
// The whole file through zlib (which also reads an uncompressed file as it is).
std::vector<std::uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> buf(1 << 20);
  for (;;) {
    const int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw std::runtime_error("reading " + path + ": " + msg);
    }
    if (n == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + n);
  }
  if (gzclose(f) != Z_OK) throw std::runtime_error("reading " + path + ": gzclose failed");
  return out;
}
#endif

std::vector<std::uint8_t> read_plain(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> buf(1 << 20);
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.insert(out.end(), buf.begin(), buf.begin() + n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw std::runtime_error("reading " + path + " failed");
  return out;
}

// The idx file `name` of `dir`: name.gz through zlib, else name as it is.
std::vector<std::uint8_t> read_idx(const std::string& dir, const std::string& name) {
  const std::string gz = dir + "/" + name + ".gz", plain = dir + "/" + name;
#if SLUICE_TRAINER_ZLIB
  if (exists(gz)) return read_gz(gz);
#endif
  if (exists(plain)) return read_plain(plain);
  throw std::runtime_error("MNIST file not found: " + plain +
                           (SLUICE_TRAINER_ZLIB ? " (nor " + gz + ")"
                                                : " (built without zlib: " + gz +
                                                      " must be decompressed first)"));
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// One MNIST set: n images of 784 bytes, and n labels 0-9.
struct Set {
  std::vector<std::uint8_t> x, y;
  std::int64_t n = 0;
};

Set load_set(const std::string& dir, const std::string& images, const std::string& labels,
             std::int64_t limit) {
  const std::string ip = dir + "/" + images, lp = dir + "/" + labels;
  std::vector<std::uint8_t> im = read_idx(dir, images), lb = read_idx(dir, labels);
  if (im.size() < 16 || be32(im.data()) != 0x803) throw std::runtime_error(ip + ": not an idx3 file");
  if (lb.size() < 8 || be32(lb.data()) != 0x801) throw std::runtime_error(lp + ": not an idx1 file");
  const std::int64_t n = be32(im.data() + 4);
  if (be32(im.data() + 8) != 28 || be32(im.data() + 12) != 28) {
    throw std::runtime_error(ip + ": images are not 28x28");
  }
  if (static_cast<std::int64_t>(im.size()) != 16 + n * kInputs ||
      static_cast<std::int64_t>(be32(lb.data() + 4)) != n ||
      static_cast<std::int64_t>(lb.size()) != 8 + n) {
    throw std::runtime_error(ip + ", " + lp + ": sizes do not match their headers");
  }
  Set s;
  s.n = limit > 0 ? std::min(limit, n) : n;
  s.x.assign(im.begin() + 16, im.begin() + 16 + s.n * kInputs);
  s.y.assign(lb.begin() + 8, lb.begin() + 8 + s.n);
  for (std::uint8_t l : s.y) {
    if (l >= kClasses) throw std::runtime_error(lp + ": a label over 9");
  }
  return s;
}

// Global batch g is batch g % nb of epoch g / nb; each epoch is a permutation of
// the training set from a generator seeded by (seed, epoch), cut into batches
// (the last partial batch dropped). Read-only after construction, so producer
// threads may fill any batch at once.
struct Sampler {
  const Set& train;
  std::int64_t batch, nb;
  std::vector<std::vector<std::uint32_t>> perms;

  Sampler(const Set& t, std::int64_t b, int epochs, std::uint64_t seed)
      : train(t), batch(b), nb(t.n / b) {
    perms.resize(static_cast<std::size_t>(epochs));
    for (int e = 0; e < epochs; ++e) {
      std::vector<std::uint32_t>& p = perms[static_cast<std::size_t>(e)];
      p.resize(static_cast<std::size_t>(train.n));
      std::iota(p.begin(), p.end(), 0u);
      std::seed_seq ss{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                       static_cast<std::uint32_t>(e)};
      std::mt19937_64 rng(ss);
      std::shuffle(p.begin(), p.end(), rng);
    }
  }

  void fill(std::uint8_t* x, std::uint8_t* y, std::int64_t g) const {
    const std::vector<std::uint32_t>& p = perms[static_cast<std::size_t>(g / nb)];
    const std::int64_t first = (g % nb) * batch;
    for (std::int64_t k = 0; k < batch; ++k) {
      const std::uint32_t i = p[static_cast<std::size_t>(first + k)];
      std::memcpy(x + k * kInputs, train.x.data() + std::size_t{i} * kInputs, kInputs);
      y[k] = train.y[i];
    }
  }
};

// ---- the model ------------------------------------------------------------------

struct MLPImpl : torch::nn::Module {
  MLPImpl(std::int64_t hidden, double dropout) : p(dropout) {
    fc1 = register_module("fc1", torch::nn::Linear(kInputs, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, kClasses));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, p, is_training());
    return fc2->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  double p;
};
TORCH_MODULE(MLP);

// uint8 pixels -> normalised floats, uint8 labels -> int64 class indices: new
// tensors, so these two ops are the only reads of the batch's memory.
torch::Tensor to_input(const torch::Tensor& x_u8) {
  return x_u8.to(torch::kFloat).div_(255.0).sub_(kMean).div_(kStd);
}

// One SGD step on (x, y); the loss is summed on the device (no host sync).
void train_step(MLP& model, torch::optim::SGD& opt, const torch::Tensor& x, const torch::Tensor& y,
                torch::Tensor& loss_sum) {
  opt.zero_grad();
  torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
  loss.backward();
  opt.step();
  loss_sum.add_(loss.detach());
}

double test_accuracy(MLP& model, const torch::Tensor& x, const torch::Tensor& y) {
  torch::NoGradGuard no_grad;
  model->eval();
  const std::int64_t correct = model->forward(x).argmax(1).eq(y).sum().item<std::int64_t>();
  model->train();
  return static_cast<double>(correct) / static_cast<double>(y.size(0));
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
  }
}

int train(const Options& o, sluice::Device& dev, sluice::Stream& stream) {
  const c10::DeviceIndex device = 0;
  // torch's view of the sluice stream (same CUstream; torch does not own it), made
  // torch's current stream for every op below.
  c10::cuda::CUDAStream ts =
      c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream.native_handle()), device);
  c10::cuda::CUDAStreamGuard guard(ts);

  const auto t_load = std::chrono::steady_clock::now();
  const Set train_set =
      load_set(o.data, "train-images-idx3-ubyte", "train-labels-idx1-ubyte", o.limit);
  const Set test_set = load_set(o.data, "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 0);
  const Sampler smp(train_set, o.batch, o.epochs, o.seed);
  if (smp.nb < 1) throw std::runtime_error("fewer training images than one batch");
  std::printf("MNIST from %s: %lld training images (%lld batches of %lld per epoch), %lld test "
              "images; loaded in %.2f s\n",
              o.data.c_str(), static_cast<long long>(train_set.n), static_cast<long long>(smp.nb),
              static_cast<long long>(o.batch), static_cast<long long>(test_set.n),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());

  const auto cuda = torch::TensorOptions().device(torch::kCUDA, device);
  // The test set on the device, once (an ordinary copy on the current stream).
  const torch::Tensor test_x =
      to_input(torch::from_blob(const_cast<std::uint8_t*>(test_set.x.data()), {test_set.n, kInputs},
                                torch::kUInt8)
                   .to(cuda.dtype(torch::kUInt8)));
  const torch::Tensor test_y =
      torch::from_blob(const_cast<std::uint8_t*>(test_set.y.data()), {test_set.n}, torch::kUInt8)
          .to(cuda.dtype(torch::kLong));

  torch::manual_seed(o.seed);  // weight init (on the CPU, then moved) and dropout
  MLP model(o.hidden, o.dropout);
  model->to(torch::Device(torch::kCUDA, device));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(o.momentum));
  std::printf("model %lld-%lld-%lld, dropout %.2f, SGD lr %g momentum %g; batches from %s\n",
              static_cast<long long>(kInputs), static_cast<long long>(o.hidden),
              static_cast<long long>(kClasses), o.dropout, o.lr, o.momentum,
              o.blocking ? "blocking copies" : "the sluice prefetcher");

  const std::int64_t total = static_cast<std::int64_t>(o.epochs) * smp.nb;
  const std::size_t x_bytes = static_cast<std::size_t>(o.batch * kInputs);
  const std::size_t y_bytes = static_cast<std::size_t>(o.batch);

  // Prefetcher mode: producer threads fill slots with the batches in order of
  // their sequence numbers (batch seq = global batch seq), and end the input after
  // the last one.
  sluice::Prefetcher pf;
  if (!o.blocking) {
    pf = sluice::Prefetcher::create(
        dev, sluice::PrefetcherConfig(
                 o.depth, {x_bytes, y_bytes},
                 [&smp, total, x_bytes, y_bytes](sluice::Fill& f) {
                   const auto g = static_cast<std::int64_t>(f.seq());
                   if (g >= total) return sluice::FillResult::end;
                   smp.fill(reinterpret_cast<std::uint8_t*>(f.segment(0).data()),
                            reinterpret_cast<std::uint8_t*>(f.segment(1).data()), g);
                   f.set_len(0, x_bytes);
                   f.set_len(1, y_bytes);
                   return sluice::FillResult::ready;
                 },
                 o.producers));
  }
  // Blocking mode: host staging (pageable, as a user's plain vector) and device
  // tensors that the synchronous copies fill.
  std::vector<std::uint8_t> host_x(o.blocking ? x_bytes : 0), host_y(o.blocking ? y_bytes : 0);
  torch::Tensor dev_x, dev_y;
  if (o.blocking) {
    dev_x = torch::empty({o.batch, kInputs}, cuda.dtype(torch::kUInt8));
    dev_y = torch::empty({o.batch}, cuda.dtype(torch::kUInt8));
  }
  const auto u8 = cuda.dtype(torch::kUInt8);

  double acc = 0, last_rate = 0;
  std::int64_t g = 0;  // global batch number
  for (int e = 0; e < o.epochs; ++e) {
    torch::Tensor loss_sum = torch::zeros({}, cuda.dtype(torch::kFloat));
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < smp.nb; ++i, ++g) {
      torch::Tensor x, y;
      if (o.blocking) {
        smp.fill(host_x.data(), host_y.data(), g);
        // copy_ from pageable memory with non_blocking=false: the host waits for
        // the copy, and so for the previous step (same stream).
        dev_x.copy_(torch::from_blob(host_x.data(), {o.batch, kInputs}, torch::kUInt8));
        dev_y.copy_(torch::from_blob(host_y.data(), {o.batch}, torch::kUInt8));
        x = to_input(dev_x);
        y = dev_y.to(torch::kLong);
      } else {
        std::optional<sluice::Batch> b = pf.next(stream);
        if (!b) throw std::runtime_error("the prefetcher ended early, at batch " + std::to_string(g));
        if (b->seq() != static_cast<std::uint64_t>(g) || b->len(0) != x_bytes ||
            b->len(1) != y_bytes) {
          throw std::runtime_error("batch " + std::to_string(b->seq()) + " (" +
                                   std::to_string(b->len(0)) + ", " + std::to_string(b->len(1)) +
                                   " bytes) where batch " + std::to_string(g) + " was expected");
        }
        {
          // Reads of the slot's memory: the stream waits (on the device) for the
          // batch's H2D copy; op_end publishes these reads.
          sluice::Op op(stream, b->syncs(), sluice::SyncList{});
          const torch::Tensor bx = torch::from_blob(
              reinterpret_cast<void*>(static_cast<std::uintptr_t>(b->device_ptr(0))),
              {o.batch, kInputs}, u8);
          const torch::Tensor by = torch::from_blob(
              reinterpret_cast<void*>(static_cast<std::uintptr_t>(b->device_ptr(1))), {o.batch},
              u8);
          x = to_input(bx);
          y = by.to(torch::kLong);
          op.end();
        }
        // Gives the slot back in stream order: it is refilled once the two
        // conversions above have run; the host does not wait.
        b->close();
      }
      train_step(model, opt, x, y, loss_sum);
    }
    const double mean_loss = loss_sum.item<double>() / static_cast<double>(smp.nb);  // syncs
    check_cuda(cudaStreamSynchronize(ts.stream()), "cudaStreamSynchronize");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_rate = static_cast<double>(smp.nb) / secs;
    acc = test_accuracy(model, test_x, test_y);
    std::printf("epoch %d: loss %.4f, test accuracy %.4f, %lld steps in %.3f s (%.0f steps/s)\n",
                e + 1, mean_loss, acc, static_cast<long long>(smp.nb), secs, last_rate);
  }

  if (!o.blocking) {
    // Every batch was taken: the next call reports the end of data.
    if (pf.next(stream)) throw std::runtime_error("the prefetcher has batches past the last epoch");
    const sluice::PrefetcherStats st = pf.stats();
    std::printf("prefetcher: %llu batches, %.1f MB copied, consumer waited %.1f ms, producers "
                "%.1f ms, copy %.1f GB/s\n",
                static_cast<unsigned long long>(st.batches), static_cast<double>(st.bytes) / 1e6,
                static_cast<double>(st.consumer_wait_ns) / 1e6,
                static_cast<double>(st.producer_wait_ns) / 1e6, st.copy_gbps);
    pf.close();
  }
  check_cuda(cudaStreamSynchronize(ts.stream()), "cudaStreamSynchronize");
  std::printf("RESULT torch_accuracy%s=%.4f epochs=%d batch=%lld hidden=%lld\n",
              o.blocking ? "_blocking" : "", acc, o.epochs, static_cast<long long>(o.batch),
              static_cast<long long>(o.hidden));
  std::printf("RESULT torch_steps_per_s_%s=%.1f\n", o.blocking ? "blocking" : "prefetch", last_rate);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line, also into a pipe
  const Options o = parse(argc, argv);
  try {
    if (!torch::cuda::is_available()) {
      std::printf("FAIL: torch sees no CUDA device\n");
      return 1;
    }
    sluice::Device dev = sluice::Device::open(sluice::Backend::cuda, 0);
    std::printf("sluice %s on %s\n", sluice::version(), dev.props().name.c_str());
    sluice::Stream stream = sluice::Stream::create(dev, sluice::StreamFlags::non_blocking);
    // Every torch object lives inside train(), so it is gone before the stream.
    const int rc = train(o, dev, stream);
    stream.synchronize();
    return rc;
  } catch (const sluice::Error& e) {
    std::printf("FAIL: sluice error %s: %s\n", e.code_name(), e.what());
  } catch (const c10::Error& e) {
    std::printf("FAIL: torch error: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
  }
  return 1;
}

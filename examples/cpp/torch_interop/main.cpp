// libtorch on two sluice streams, ordered by sluice sync objects, no host sync.
//
// A producer on stream A updates tensor x in place; a consumer on stream B reads x
// and accumulates into y. Each round runs both, so the engine has to order
//   - B's read of x after A's write (read after write), and
//   - A's next write of x after B's read (write after read),
// with device-side waits only. x and y are libtorch tensors: sluice does not own
// their memory, so a standalone SyncObject stands for each. The torch ops run on
// the sluice streams through c10::cuda::getStreamFromExternal + CUDAStreamGuard.
// The result is compared exactly (integer math) with a serial run on one stream.
//
//   torch_interop            ordered run: prints PASS or FAIL (exit 1)
//   torch_interop --wrap     the same, on streams sluice did not create: A is a
//                            stream from torch's pool and B a raw cudaStreamCreate
//                            stream, both adopted with Stream::wrap_external
//   torch_interop --no-deps  the same without Op scopes: shows the race the
//                            engine prevents (informational, exit 0)
#include <sluice/sluice.hpp>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>

namespace {

constexpr std::int64_t kModulus = 1000003;
constexpr std::int64_t kElements = std::int64_t{1} << 24;  // 128 MiB of int64
constexpr int kRounds = 6;
constexpr int kInner = 20;  // producer steps per round: makes A slow, B fast

// Producer (writes x): x = (3x + r + i) mod M, kInner times, in place.
void produce(torch::Tensor& x, int round) {
  for (int i = 0; i < kInner; ++i) x.mul_(3).add_(round * kInner + i).remainder_(kModulus);
}

// Consumer (reads x, writes y): y += x mod 7.
void consume(const torch::Tensor& x, torch::Tensor& y) { y.add_(x.remainder(7)); }

// A torch view of a sluice stream: same CUstream, torch does not own it.
c10::cuda::CUDAStream torch_view(const sluice::Stream& s, c10::DeviceIndex device) {
  return c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(s.native_handle()), device);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const bool ordered = !(argc > 1 && std::strcmp(argv[1], "--no-deps") == 0);
  const bool wrap = argc > 1 && std::strcmp(argv[1], "--wrap") == 0;
  try {
    if (!torch::cuda::is_available()) {
      std::printf("FAIL: torch sees no CUDA device\n");
      return 1;
    }
    torch::NoGradGuard no_grad;
    const c10::DeviceIndex device = 0;

    sluice::Device dev = sluice::Device::open(sluice::Backend::cuda, 0);
    std::printf("sluice %s on %s\n", sluice::version(), dev.props().name.c_str());
    cudaStream_t raw_b = nullptr;
    if (wrap && cudaStreamCreateWithFlags(&raw_b, cudaStreamNonBlocking) != cudaSuccess) {
      std::printf("FAIL: cudaStreamCreateWithFlags\n");
      return 1;
    }
    c10::cuda::CUDAStream torch_a = c10::cuda::getStreamFromPool(false, device);
    sluice::Stream sa = wrap ? sluice::Stream::wrap_external(dev, torch_a.stream())
                             : sluice::Stream::create(dev, sluice::StreamFlags::non_blocking);
    sluice::Stream sb = wrap ? sluice::Stream::wrap_external(dev, raw_b)
                             : sluice::Stream::create(dev, sluice::StreamFlags::non_blocking);
    if (wrap) std::printf("streams: A is torch's pool stream, B a raw cudaStreamCreate stream\n");
    c10::cuda::CUDAStream ta = torch_view(sa, device);
    c10::cuda::CUDAStream tb = torch_view(sb, device);

    // Inputs, made on torch's current (default) stream and finished before use.
    auto opts = torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA, device);
    torch::Tensor x = torch::arange(kElements, opts).remainder_(kModulus);
    torch::Tensor y = torch::zeros({kElements}, opts);
    torch::Tensor x_ref = x.clone();
    torch::Tensor y_ref = y.clone();
    torch::cuda::synchronize();
    // x and y are used on A and B: tell torch's caching allocator.
    x.record_stream(ta);
    x.record_stream(tb);
    y.record_stream(tb);

    // Sync objects standing for the two tensors.
    sluice::SyncObject xs = sluice::SyncObject::create();
    sluice::SyncObject ys = sluice::SyncObject::create();
    const sluice::StreamStats a0 = sa.stats(), b0 = sb.stats();

    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kRounds; ++r) {
      {  // producer on A: writes x
        std::optional<sluice::Op> op;
        if (ordered) op.emplace(sa, sluice::SyncList{}, sluice::SyncList{xs});
        c10::cuda::CUDAStreamGuard guard(ta);
        produce(x, r);
      }  // op_end: one event on A, published as x's writer
      {  // consumer on B: reads x, writes y
        std::optional<sluice::Op> op;
        if (ordered) op.emplace(sb, sluice::SyncList{xs}, sluice::SyncList{ys});
        c10::cuda::CUDAStreamGuard guard(tb);
        consume(x, y);
      }
    }
    const double enqueue_ms = ms_since(t0);
    const bool busy_after_enqueue = !sa.query() || !sb.query();

    if (ordered) {
      ys.wait_read();   // the host waits for y's last writer ...
      xs.wait_write();  // ... and for every use of x
    } else {
      sa.synchronize();
      sb.synchronize();
    }
    const double total_ms = ms_since(t0);

    // The same math, serially, on torch's default stream.
    for (int r = 0; r < kRounds; ++r) {
      produce(x_ref, r);
      consume(x_ref, y_ref);
    }
    const bool same = torch::equal(y.cpu(), y_ref.cpu()) && torch::equal(x.cpu(), x_ref.cpu());

    const sluice::StreamStats a1 = sa.stats(), b1 = sb.stats();
    const auto a_waits = a1.waits - a0.waits, b_waits = b1.waits - b0.waits;
    std::printf("enqueue %.2f ms, total %.2f ms, streams busy after enqueue: %s\n", enqueue_ms,
                total_ms, busy_after_enqueue ? "yes" : "no");
    std::printf("device waits inserted: A %llu, B %llu; host syncs by the engine: %llu\n",
                static_cast<unsigned long long>(a_waits), static_cast<unsigned long long>(b_waits),
                static_cast<unsigned long long>((a1.engine_syncs - a0.engine_syncs) +
                                                (b1.engine_syncs - b0.engine_syncs)));

    if (!ordered) {
      std::printf("no-deps run: results %s the serial run%s\n", same ? "match" : "differ from",
                  same ? " (the race did not show this time)" : " (the race the engine prevents)");
      return 0;
    }

    // Every round B waits for A's write, and every round after the first A waits
    // for B's read.
    const bool waits_ok = b_waits >= static_cast<std::uint64_t>(kRounds) &&
                          a_waits >= static_cast<std::uint64_t>(kRounds - 1);
    const bool no_host_sync = a1.engine_syncs == a0.engine_syncs && b1.engine_syncs == b0.engine_syncs;
    if (same && waits_ok && no_host_sync) {
      std::printf("PASS: torch on two %s streams matches the serial run exactly\n",
                  wrap ? "adopted (torch pool, raw CUDA)" : "sluice");
      return 0;
    }
    std::printf("FAIL: results %s, waits %s, host syncs %s\n", same ? "match" : "DIFFER",
                waits_ok ? "ok" : "MISSING", no_host_sync ? "none" : "PRESENT");
    return 1;
  } catch (const sluice::Error& e) {
    std::printf("FAIL: sluice error %s: %s\n", e.code_name(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}

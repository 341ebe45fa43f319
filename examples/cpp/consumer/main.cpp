// A minimal sluice C++ consumer: default device, a stream, a device buffer, and a
// host -> device -> host round trip checked element by element.
#include <sluice/sluice.hpp>

// The RNG's device header comes from the same include directory, so a CUDA
// translation unit (nvcc) of this project can #include <sluice/rng.cuh> for its
// own kernels; it is CUDA C++, so here we only check that it is there.
#if defined(__has_include)
#if !__has_include(<sluice/rng.cuh>)
#error "sluice/rng.cuh is not on the include path next to sluice/sluice.hpp"
#endif
#endif

#include <cstdint>
#include <cstdio>
#include <numeric>
#include <vector>

int main() {
  try {
    sluice::Device dev = sluice::Device::open_default();  // SLUICE_BACKEND=auto|cuda|host
    sluice::Stream stream = sluice::Stream::create(dev);
    std::vector<std::uint32_t> in(1 << 16);
    std::iota(in.begin(), in.end(), 7u);
    sluice::Buffer buf = sluice::Buffer::alloc(stream, in.size() * sizeof(in[0]));
    sluice::copy_from_host(stream, buf, 0, in);
    std::vector<std::uint32_t> out = sluice::read_vector<std::uint32_t>(stream, buf, 0, in.size());
    bool ok = out == in;
    std::printf("sluice %s on %s: round trip %s\n", sluice::version(), dev.props().name.c_str(),
                ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
  } catch (const sluice::Error& e) {
    std::fprintf(stderr, "sluice error %s: %s\n", e.code_name(), e.what());
    return 1;
  }
}

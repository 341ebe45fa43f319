// A minimal sluice C++ consumer: default device, a stream, a device buffer, and a
// host -> device -> host round trip checked element by element.
#include <sluice/sluice.hpp>

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

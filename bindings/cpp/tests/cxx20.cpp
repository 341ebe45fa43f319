// C++20: sluice::span is std::span, and std::span works with the copy helpers.
#include <sluice/sluice.hpp>

#include <cstdio>
#include <span>
#include <type_traits>
#include <vector>

static_assert(SLUICE_CPP_STD_SPAN == 1, "C++20 uses std::span");
static_assert(std::is_same_v<sluice::span<int>, std::span<int>>);
static_assert(std::is_same_v<sluice::ByteView, std::span<const std::byte>>);

int main() {
  sluice::Device dev = sluice::Device::open(sluice::Backend::host, 0);
  sluice::Stream s = sluice::Stream::create(dev);
  std::vector<float> in{1.0f, 2.0f, 3.0f, 4.0f};
  sluice::Buffer b = sluice::Buffer::alloc(s, sizeof(float) * in.size());
  sluice::copy_from_host(s, b, 0, std::span<const float>(in));
  sluice::copy_from_host(s, b, 0, std::as_bytes(std::span<const float>(in)));
  std::vector<float> out(4);
  sluice::copy_to_host(s, std::span<float>(out), b, 0);
  bool ok = out == in;
  std::printf("c++20 span: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

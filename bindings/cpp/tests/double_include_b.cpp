// Double-include test, TU B.
#include <sluice/sluice.hpp>

#include <cstdio>
#include <vector>

int double_include_a();

int main() {
  int a = double_include_a();
  if (a != 0) {
    std::printf("TU A failed: %d\n", a);
    return 1;
  }
  sluice::Device dev = sluice::Device::open(sluice::Backend::host, 0);
  sluice::Stream s = sluice::Stream::create(dev);
  sluice::Buffer b = sluice::Buffer::alloc(s, 16);
  std::vector<char> v(16, 'x');
  sluice::copy_from_host(s, b, 0, v);
  bool ok = sluice::read_vector<char>(s, b, 0, 16) == v;
  std::printf("double include: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

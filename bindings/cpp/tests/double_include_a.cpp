// Double-include test, TU A: anything defined in a header without `inline`
// would be defined here and in TU B, and the link would fail.
#include <sluice/sluice.hpp>
#include <sluice/sluice.hpp>  // and twice in one TU: the include guards hold

int double_include_a();

int double_include_a() {
  sluice::Result<sluice::Device> d = sluice::Device::open(std::nothrow, sluice::Backend::host, 0);
  if (!d) return 1;
  sluice::Result<sluice::Stream> s = sluice::Stream::create(std::nothrow, *d);
  if (!s) return 2;
  return sluice::abi_compatible() ? 0 : 3;
}

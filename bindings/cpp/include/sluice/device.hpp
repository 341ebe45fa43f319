// sluice::Device (owning) and sluice::DeviceRef (non-owning view).
#ifndef SLUICE_CPP_DEVICE_HPP
#define SLUICE_CPP_DEVICE_HPP

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/result.hpp"

namespace sluice {

/// A backend (`SLUICE_BACKEND_*`).
enum class Backend : std::uint32_t {
  host = SLUICE_BACKEND_HOST,
  cuda = SLUICE_BACKEND_CUDA,
};

/// Static properties of a device.
struct DeviceProps {
  std::string name;
  std::uint64_t total_memory = 0;
  int compute_capability_major = 0;  ///< 0 on host
  int compute_capability_minor = 0;  ///< 0 on host
  int multiprocessor_count = 0;      ///< CPU threads on host
  Backend backend = Backend::host;
  std::uint32_t ordinal = 0;
};

/// The stream priority range; `greatest` is the highest priority (numerically
/// lowest on CUDA).
struct PriorityRange {
  int least = 0;
  int greatest = 0;
};

/// Statistics of a device's pinned host-memory pool.
using PinnedStats = sluice_pinned_stats_t;

namespace detail {

/// The operations of a device, shared by Device and DeviceRef.
template <class Self>
class DeviceApi {
 public:
  Result<DeviceProps> props(std::nothrow_t) const {
    sluice_device_props_t p{};
    if (sluice_error_t* e = sluice_device_props(h(), &p)) return Error::adopt(e);
    DeviceProps out;
    std::size_t len = 0;  // NUL-terminated by contract; never read past the array
    while (len < sizeof(p.name) && p.name[len] != '\0') ++len;
    out.name.assign(p.name, len);
    out.total_memory = p.total_memory;
    out.compute_capability_major = p.compute_capability_major;
    out.compute_capability_minor = p.compute_capability_minor;
    out.multiprocessor_count = p.multiprocessor_count;
    out.backend = static_cast<Backend>(p.backend);
    out.ordinal = p.ordinal;
    return out;
  }

  Result<PriorityRange> priority_range(std::nothrow_t) const {
    std::int32_t least = 0, greatest = 0;
    if (sluice_error_t* e = sluice_device_priority_range(h(), &least, &greatest)) {
      return Error::adopt(e);
    }
    return PriorityRange{least, greatest};
  }

  /// Blocks until every stream of the device is drained; reports the first
  /// deferred error.
  Result<void> wait_all(std::nothrow_t) const { return check(sluice_device_wait_all(h())); }

  Result<PinnedStats> pinned_stats(std::nothrow_t) const {
    PinnedStats s{};
    return detail::check(sluice_device_pinned_stats(h(), &s), s);
  }

  /// Releases every cached pinned block.
  Result<void> pinned_trim(std::nothrow_t) const { return check(sluice_device_pinned_trim(h())); }

  /// Bounds the cached pinned bytes and trims down to the bound.
  Result<void> set_pinned_limit(std::nothrow_t, std::uint64_t bytes) const {
    return check(sluice_device_pinned_set_limit(h(), bytes));
  }

#if SLUICE_CPP_EXCEPTIONS
  DeviceProps props() const { return props(std::nothrow).value(); }
  PriorityRange priority_range() const { return priority_range(std::nothrow).value(); }
  void wait_all() const { wait_all(std::nothrow).value(); }
  PinnedStats pinned_stats() const { return pinned_stats(std::nothrow).value(); }
  void pinned_trim() const { pinned_trim(std::nothrow).value(); }
  void set_pinned_limit(std::uint64_t bytes) const { set_pinned_limit(std::nothrow, bytes).value(); }
#endif

 private:
  sluice_device_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of a device handle. Trivially copyable; it does not keep the
/// device open. Pass devices to functions as DeviceRef.
class DeviceRef : public detail::DeviceApi<DeviceRef>, public detail::View<sluice_device_t> {
 public:
  using View::View;
};

/// An open device handle (closed by the destructor). Move-only. Objects created
/// on the device stay valid after it is closed.
/// Thread safety: may be used from any thread at once.
class Device : public detail::DeviceApi<Device>,
               public detail::Owner<Device, sluice_device_t, sluice_device_close, DeviceRef> {
 public:
  /// Number of devices of `backend` (NO_DRIVER for cuda without a usable driver).
  static Result<std::uint32_t> count(std::nothrow_t, Backend backend) {
    std::uint32_t n = 0;
    if (sluice_error_t* e = sluice_device_count(static_cast<std::uint32_t>(backend), &n)) {
      return Error::adopt(e);
    }
    return n;
  }

  /// Opens device `ordinal` of `backend`. The returned Device owns the handle and
  /// closes it when it goes out of scope.
  static Result<Device> open(std::nothrow_t, Backend backend, std::uint32_t ordinal = 0) {
    sluice_device_t h{};
    if (sluice_error_t* e = sluice_device_open(static_cast<std::uint32_t>(backend), ordinal, &h)) {
      return Error::adopt(e);
    }
    return adopt(h);
  }

  /// Opens the default device: SLUICE_BACKEND=auto|cuda|host (auto: cuda:0 where
  /// a usable driver and GPU exist, else host:0). The returned Device owns the
  /// handle and closes it when it goes out of scope.
  static Result<Device> open_default(std::nothrow_t) {
    sluice_device_t h{};
    if (sluice_error_t* e = sluice_device_open_default(&h)) return Error::adopt(e);
    return adopt(h);
  }

#if SLUICE_CPP_EXCEPTIONS
  static std::uint32_t count(Backend backend) { return count(std::nothrow, backend).value(); }
  static Device open(Backend backend, std::uint32_t ordinal = 0) {
    return open(std::nothrow, backend, ordinal).value();
  }
  static Device open_default() { return open_default(std::nothrow).value(); }
#endif
};

}  // namespace sluice

#endif  // SLUICE_CPP_DEVICE_HPP

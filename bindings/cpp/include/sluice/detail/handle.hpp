// detail::UniqueHandle: move-only ownership of one C handle value.
//
// Every owning wrapper (Device, Stream, Event, Buffer, SyncObject, Op, Module,
// Function, Graph, GraphExec, GraphCache, Capture) holds exactly one of these and
// defaults its own move operations, so no class writes a move constructor by hand.
// A moved-from owner holds the zero handle (which the C API never hands out);
// destroying it does nothing, and calling a C function with it gives
// SLUICE_ERROR_INVALID_HANDLE.
#ifndef SLUICE_CPP_DETAIL_HANDLE_HPP
#define SLUICE_CPP_DETAIL_HANDLE_HPP

#include <cstdint>
#include <type_traits>

#include "sluice/config.hpp"
#include "sluice/result.hpp"

namespace sluice {
namespace detail {

/// `Traits` provides `using handle = sluice_x_t;` and
/// `static sluice_error_t* destroy(handle) noexcept;`.
template <class Traits>
class UniqueHandle {
 public:
  using handle_type = typename Traits::handle;
  static_assert(std::is_trivially_copyable<handle_type>::value, "handles are plain values");
  static_assert(sizeof(handle_type) == sizeof(std::uint64_t), "handles are 64 bits");

  UniqueHandle() noexcept = default;
  explicit UniqueHandle(handle_type h) noexcept : h_(h) {}

  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  UniqueHandle(UniqueHandle&& other) noexcept : h_(other.release()) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    reset(other.release());  // self-move: release() empties, reset() re-adopts
    return *this;
  }

  ~UniqueHandle() { reset(); }

  handle_type get() const noexcept { return h_; }
  bool empty() const noexcept { return h_.bits == 0; }

  /// Gives up ownership and returns the handle; this object becomes empty.
  handle_type release() noexcept {
    handle_type h = h_;
    h_ = handle_type{};
    return h;
  }

  /// Destroys the owned handle (ignoring any error) and adopts `h`.
  void reset(handle_type h = handle_type{}) noexcept {
    handle_type old = h_;
    h_ = h;
    if (old.bits != 0) sluice_error_free(Traits::destroy(old));
  }

  /// Destroys the owned handle and reports the C API's verdict. Empty afterwards,
  /// also on error (a destroy never leaves the handle half-alive).
  Result<void> close() {
    handle_type old = release();
    if (old.bits == 0) return {};
    return check(Traits::destroy(old));
  }

 private:
  handle_type h_{};
};

}  // namespace detail
}  // namespace sluice

#endif  // SLUICE_CPP_DETAIL_HANDLE_HPP

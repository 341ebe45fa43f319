// The ownership machinery every wrapper class shares:
//
//   detail::UniqueHandle<Handle, Destroy>  move-only ownership of one C handle value
//   detail::Owner<Derived, Handle, Destroy[, View]>
//                                          the public owner API built on it: adopt(),
//                                          close(), raw(), release(), bool and, with
//                                          a View, ref() and the conversion to View
//   detail::View<Handle>                   the state of a non-owning view (raw(), bool)
//
// An owning class derives from Owner (and from its operations' CRTP base) and
// writes only what is specific to it; its copy, move and default operations are
// the implicit ones. A moved-from owner holds the zero handle (which the C API
// never hands out); destroying it does nothing, and calling a C function with it
// gives SLUICE_ERROR_INVALID_HANDLE.
#ifndef SLUICE_CPP_DETAIL_HANDLE_HPP
#define SLUICE_CPP_DETAIL_HANDLE_HPP

#include <cstdint>
#include <new>
#include <type_traits>

#include "sluice/config.hpp"
#include "sluice/result.hpp"

namespace sluice {
namespace detail {

/// The C function that destroys a `Handle` (sluice_stream_destroy, ...).
template <class Handle>
using destroy_fn = sluice_error_t* (*)(Handle);

/// Move-only ownership of one C handle: destroys it (ignoring errors) in the
/// destructor and when replaced.
template <class Handle, destroy_fn<Handle> Destroy>
class UniqueHandle {
 public:
  static_assert(std::is_trivially_copyable<Handle>::value, "handles are plain values");
  static_assert(sizeof(Handle) == sizeof(std::uint64_t), "handles are 64 bits");

  UniqueHandle() noexcept = default;
  /// Takes ownership of `h`.
  explicit UniqueHandle(Handle h) noexcept : h_(h) {}

  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  UniqueHandle(UniqueHandle&& other) noexcept : h_(other.release()) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    reset(other.release());  // self-move: release() empties, reset() re-adopts
    return *this;
  }

  ~UniqueHandle() { reset(); }

  Handle get() const noexcept { return h_; }
  bool empty() const noexcept { return h_.bits == 0; }

  /// Gives up ownership and returns the handle; this object becomes empty.
  Handle release() noexcept {
    Handle h = h_;
    h_ = Handle{};
    return h;
  }

  /// Destroys the owned handle (ignoring any error) and takes ownership of `h`.
  void reset(Handle h = Handle{}) noexcept {
    Handle old = h_;
    h_ = h;
    if (old.bits != 0) sluice_error_free(Destroy(old));
  }

  /// Destroys the owned handle and reports the C API's verdict. Empty afterwards,
  /// also on error (a destroy never leaves the handle half-alive).
  Result<void> close() {
    Handle old = release();
    if (old.bits == 0) return {};
    return check(Destroy(old));
  }

 private:
  Handle h_{};
};

/// The state of a non-owning view class (DeviceRef, StreamRef, ...), which derives
/// from it and inherits its constructors. Trivially copyable.
template <class Handle>
class View {
 public:
  View() noexcept = default;
  /// Views `h` without taking ownership; the view does not keep it alive.
  explicit View(Handle h) noexcept : h_(h) {}

  Handle raw() const noexcept { return h_; }
  explicit operator bool() const noexcept { return h_.bits != 0; }

 private:
  Handle h_{};
};

/// ref() and the implicit conversion of an owner to its view type `Ref`.
template <class Derived, class Ref>
class ViewOf {
 public:
  /// A view of the handle; it stays owned by this object (and valid while it lives).
  Ref ref() const noexcept { return Ref(static_cast<const Derived&>(*this).raw()); }
  operator Ref() const noexcept { return ref(); }
};

/// Owners without a view type (Module, Function) get neither.
template <class Derived>
class ViewOf<Derived, void> {};

/// The owner API of the wrapper class `Derived` of a `Handle` that `Destroy`
/// destroys; with a `Ref`, also ref() and the conversion to `Ref`. Move-only.
template <class Derived, class Handle, destroy_fn<Handle> Destroy, class Ref = void>
class Owner : public ViewOf<Derived, Ref> {
 public:
  /// Takes ownership of a C handle: the returned object destroys it when it goes
  /// out of scope (or on close()).
  static Derived adopt(Handle h) noexcept {
    Derived owner;
    static_cast<Owner&>(owner).h_.reset(h);
    return owner;
  }

  /// Destroys the handle now and reports the result; the object becomes empty.
  Result<void> close(std::nothrow_t) { return h_.close(); }
#if SLUICE_CPP_EXCEPTIONS
  void close() { close(std::nothrow).value(); }
#endif

  /// The C handle, still owned by this object.
  Handle raw() const noexcept { return h_.get(); }
  /// Gives ownership of the C handle to the caller, who must destroy it; this
  /// object becomes empty.
  Handle release() noexcept { return h_.release(); }
  explicit operator bool() const noexcept { return !h_.empty(); }

 private:
  UniqueHandle<Handle, Destroy> h_;
};

}  // namespace detail
}  // namespace sluice

#endif  // SLUICE_CPP_DETAIL_HANDLE_HPP

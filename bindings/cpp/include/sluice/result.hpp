// sluice::Result<T>: a value or a sluice::Error, for code without exceptions.
//
// The API has one scheme throughout: every fallible operation exists as an
// overload whose first parameter is `std::nothrow` and which returns
// `[[nodiscard]] sluice::Result<T>`, and (while SLUICE_CPP_EXCEPTIONS is 1) as a
// throwing overload with the same name and the remaining parameters:
//
//   sluice::Stream s = sluice::Stream::create(dev);                 // throws sluice::Error
//   sluice::Result<sluice::Stream> r = sluice::Stream::create(std::nothrow, dev);
//   if (!r) std::fprintf(stderr, "%s\n", r.error().message());
//
// The tag comes first so that trailing parameters can keep their defaults.
#ifndef SLUICE_CPP_RESULT_HPP
#define SLUICE_CPP_RESULT_HPP

#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "sluice/config.hpp"
#include "sluice/error.hpp"

namespace sluice {

namespace detail {

/// Reports an error the caller did not handle: throws it, or (without exceptions)
/// prints it and aborts.
[[noreturn]] inline void fail(const Error& e) {
#if SLUICE_CPP_EXCEPTIONS
  throw e;
#else
  std::fprintf(stderr, "sluice: unhandled error %s: %s\n", e.code_name(), e.what());
  std::fflush(stderr);
  std::abort();
#endif
}

[[noreturn]] inline void bad_error_access() noexcept {
  std::fprintf(stderr, "sluice: Result::error() called on a successful result\n");
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail

/// Either a T or a sluice::Error. Ignoring a Result is a warning ([[nodiscard]]).
template <class T>
class [[nodiscard]] Result {
  static_assert(!std::is_reference<T>::value, "Result<T&> is not supported");
  static_assert(!std::is_same<typename std::decay<T>::type, Error>::value,
                "Result<Error> is ambiguous");

 public:
  using value_type = T;

  Result(const T& value) : v_(std::in_place_index<0>, value) {}
  Result(T&& value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  /// True when the result holds a value.
  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  /// The value; on an error, throws it (or prints it and aborts without exceptions).
  T& value() & {
    check();
    return *std::get_if<0>(&v_);
  }
  const T& value() const& {
    check();
    return *std::get_if<0>(&v_);
  }
  T value() && {
    check();
    return std::move(*std::get_if<0>(&v_));
  }

  /// The value, or `fallback` on an error.
  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? *std::get_if<0>(&v_) : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U>
  T value_or(U&& fallback) && {
    return ok() ? std::move(*std::get_if<0>(&v_)) : static_cast<T>(std::forward<U>(fallback));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  /// The error. Precondition: !ok() (aborts otherwise).
  const Error& error() const& noexcept {
    if (const Error* e = std::get_if<1>(&v_)) return *e;
    detail::bad_error_access();
  }

  /// The error code, or ErrorCode::ok for a value.
  ErrorCode code() const noexcept {
    const Error* e = std::get_if<1>(&v_);
    return e ? e->code() : ErrorCode::ok;
  }

 private:
  void check() const {
    if (const Error* e = std::get_if<1>(&v_)) detail::fail(*e);
  }

  std::variant<T, Error> v_;
};

/// Success or a sluice::Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  using value_type = void;

  Result() noexcept = default;
  Result(Error error) : err_(std::move(error)) {}

  bool ok() const noexcept { return !err_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }

  /// Throws the error (or prints it and aborts without exceptions).
  void value() const {
    if (err_) detail::fail(*err_);
  }

  const Error& error() const& noexcept {
    if (err_) return *err_;
    detail::bad_error_access();
  }

  ErrorCode code() const noexcept { return err_ ? err_->code() : ErrorCode::ok; }

 private:
  std::optional<Error> err_;
};

namespace detail {

/// NULL -> success; otherwise adopts and frees the C error.
inline Result<void> check(sluice_error_t* err) {
  if (err) return Error::adopt(err);
  return {};
}

/// NULL -> `value`; otherwise the adopted error.
template <class T>
Result<typename std::decay<T>::type> check(sluice_error_t* err, T&& value) {
  if (err) return Error::adopt(err);
  return Result<typename std::decay<T>::type>(std::forward<T>(value));
}

}  // namespace detail

}  // namespace sluice

#endif  // SLUICE_CPP_RESULT_HPP

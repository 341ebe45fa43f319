// sluice::span<T>: std::span under C++20, a minimal stand-in under C++17.
//
// Only what the bindings use is provided by the fallback: construction from a
// pointer and a count, a C array, std::array, and any contiguous container with
// data() and size() (std::vector, std::string, another span); data(), size(),
// size_bytes(), empty(), begin(), end(), operator[], subspan(). Dynamic extent only.
#ifndef SLUICE_CPP_SPAN_HPP
#define SLUICE_CPP_SPAN_HPP

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>

#include "sluice/config.hpp"

#if defined(__has_include)
#if __has_include(<version>)
#include <version>
#endif
#endif

#if defined(__cpp_lib_span) && __cpp_lib_span >= 202002L
#include <span>
#define SLUICE_CPP_STD_SPAN 1
#else
#define SLUICE_CPP_STD_SPAN 0
#endif

namespace sluice {

#if SLUICE_CPP_STD_SPAN

template <class T>
using span = std::span<T>;

#else

template <class T>
class span {
  template <class C>
  using data_t = decltype(std::declval<C&>().data());

  template <class C, class = void>
  struct is_container : std::false_type {};
  template <class C>
  struct is_container<C, std::void_t<data_t<C>, decltype(std::declval<C&>().size())>>
      : std::is_convertible<typename std::remove_pointer<data_t<C>>::type (*)[], T (*)[]> {};

 public:
  using element_type = T;
  using value_type = typename std::remove_cv<T>::type;
  using size_type = std::size_t;
  using pointer = T*;
  using reference = T&;
  using iterator = T*;

  constexpr span() noexcept = default;
  constexpr span(T* data, std::size_t count) noexcept : data_(data), size_(count) {}
  template <std::size_t N>
  constexpr span(T (&array)[N]) noexcept : data_(array), size_(N) {}
  // C may be const-qualified: span<const int> views a const std::vector<int>.
  template <class C, class = typename std::enable_if<
                         is_container<C>::value && !std::is_same<typename std::decay<C>::type,
                                                                 span>::value>::type>
  constexpr span(C& container) noexcept(noexcept(container.data()))
      : data_(container.data()), size_(static_cast<std::size_t>(container.size())) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr T& operator[](std::size_t i) const noexcept { return data_[i]; }
  constexpr span subspan(std::size_t offset, std::size_t count) const noexcept {
    return span(data_ + offset, count);
  }
  constexpr span subspan(std::size_t offset) const noexcept {
    return span(data_ + offset, size_ - offset);
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

#endif

namespace detail {

// The element type of a contiguous container: anything std::data and std::size
// accept (std::vector, std::array, std::string, a span, a C array).
template <class C, class = void>
struct contiguous_elem {};
template <class C>
struct contiguous_elem<C, std::void_t<decltype(std::data(std::declval<C&>())),
                                      decltype(std::size(std::declval<C&>()))>> {
  using type = typename std::remove_pointer<decltype(std::data(std::declval<C&>()))>::type;
};

template <class C>
using contiguous_elem_t = typename contiguous_elem<C>::type;

/// Enables a template for contiguous containers of trivially copyable elements.
template <class C>
using if_contiguous =
    typename std::enable_if<std::is_trivially_copyable<contiguous_elem_t<C>>::value>::type;

/// Same, and the elements are writable.
template <class C>
using if_mutable_contiguous =
    typename std::enable_if<std::is_trivially_copyable<contiguous_elem_t<C>>::value &&
                            !std::is_const<contiguous_elem_t<C>>::value>::type;

}  // namespace detail

/// A read-only byte range (the source of a copy).
using ByteView = span<const std::byte>;
/// A writable byte range (the destination of a copy).
using MutableByteView = span<std::byte>;

/// Views the bytes of `s`.
template <class T>
ByteView as_bytes(span<T> s) noexcept {
  return ByteView(reinterpret_cast<const std::byte*>(s.data()), s.size_bytes());
}

/// Views the bytes of a contiguous container of trivially copyable elements
/// (std::vector, std::array, std::string, a C array): `pf.push({as_bytes(v)})`.
template <class C, class = detail::if_contiguous<const C>>
ByteView as_bytes(const C& c) noexcept {
  return ByteView(reinterpret_cast<const std::byte*>(std::data(c)),
                  std::size(c) * sizeof(*std::data(c)));
}

/// Views the bytes of `s` writably.
template <class T, class = typename std::enable_if<!std::is_const<T>::value>::type>
MutableByteView as_writable_bytes(span<T> s) noexcept {
  return MutableByteView(reinterpret_cast<std::byte*>(s.data()), s.size_bytes());
}

}  // namespace sluice

#endif  // SLUICE_CPP_SPAN_HPP

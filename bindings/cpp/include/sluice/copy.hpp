// Copies and memset, each on an explicit stream. Offsets and lengths are in bytes.
// A copy out of range fails with ErrorCode::out_of_range and changes nothing.
//
//   std::vector<float> host(1024, 1.0f);
//   sluice::copy_from_host(stream, buf, 0, host);            // whole vector
//   auto back = sluice::read_vector<float>(stream, buf, 0, host.size());
#ifndef SLUICE_CPP_COPY_HPP
#define SLUICE_CPP_COPY_HPP

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <type_traits>
#include <vector>

#include "sluice/buffer.hpp"
#include "sluice/config.hpp"
#include "sluice/result.hpp"
#include "sluice/span.hpp"
#include "sluice/stream.hpp"

namespace sluice {

/// Copies `len` bytes from `src` at `src_offset` to `dst` at `dst_offset` on
/// `stream`, in any direction between device, pinned and registered buffers.
inline Result<void> copy(std::nothrow_t, StreamRef stream, BufferRef dst, std::size_t dst_offset,
                         BufferRef src, std::size_t src_offset, std::size_t len) {
  return detail::check(
      sluice_stream_copy(stream.raw(), dst.raw(), dst_offset, src.raw(), src_offset, len));
}

/// Copies `len` bytes of pageable host memory into `dst` at `dst_offset`. Returns
/// once `src` may be reused; the device write is ordered on `stream`.
inline Result<void> copy_from_host(std::nothrow_t, StreamRef stream, BufferRef dst,
                                   std::size_t dst_offset, const void* src, std::size_t len) {
  return detail::check(sluice_stream_copy_from_host(stream.raw(), dst.raw(), dst_offset, src, len));
}

/// Copies all of `src` (a std::vector, std::array, std::string, span ... of
/// trivially copyable elements) into `dst` at byte offset `dst_offset`.
template <class C, class = detail::if_contiguous<const C>>
Result<void> copy_from_host(std::nothrow_t, StreamRef stream, BufferRef dst,
                            std::size_t dst_offset, const C& src) {
  return copy_from_host(std::nothrow, stream, dst, dst_offset,
                        static_cast<const void*>(std::data(src)),
                        std::size(src) * sizeof(*std::data(src)));
}

/// Copies `len` bytes of `src` at `src_offset` into pageable host memory. Blocks
/// until the bytes have arrived.
inline Result<void> copy_to_host(std::nothrow_t, StreamRef stream, void* dst, BufferRef src,
                                 std::size_t src_offset, std::size_t len) {
  return detail::check(sluice_stream_copy_to_host(stream.raw(), dst, src.raw(), src_offset, len));
}

/// Fills all of `dst` (a contiguous container of trivially copyable elements, or a
/// span over one) from `src` at byte offset `src_offset`. Blocks until the bytes
/// have arrived.
template <class C, class = detail::if_mutable_contiguous<typename std::remove_reference<C>::type>>
Result<void> copy_to_host(std::nothrow_t, StreamRef stream, C&& dst, BufferRef src,
                          std::size_t src_offset) {
  return copy_to_host(std::nothrow, stream, static_cast<void*>(std::data(dst)), src, src_offset,
                      std::size(dst) * sizeof(*std::data(dst)));
}

/// Reads `count` elements of type T from `src` at byte offset `src_offset`.
template <class T>
Result<std::vector<T>> read_vector(std::nothrow_t, StreamRef stream, BufferRef src,
                                   std::size_t src_offset, std::size_t count) {
  static_assert(std::is_trivially_copyable<T>::value, "read_vector needs trivially copyable T");
  std::vector<T> out(count);
  Result<void> r = copy_to_host(std::nothrow, stream, out, src, src_offset);
  if (!r) return r.error();
  return out;
}

/// Sets `len` bytes of `buffer` at `offset` to `value`, in order on `stream`.
inline Result<void> memset(std::nothrow_t, StreamRef stream, BufferRef buffer, std::size_t offset,
                           std::uint8_t value, std::size_t len) {
  return detail::check(sluice_stream_memset(stream.raw(), buffer.raw(), offset, value, len));
}

#if SLUICE_CPP_EXCEPTIONS
inline void copy(StreamRef stream, BufferRef dst, std::size_t dst_offset, BufferRef src,
                 std::size_t src_offset, std::size_t len) {
  copy(std::nothrow, stream, dst, dst_offset, src, src_offset, len).value();
}
inline void copy_from_host(StreamRef stream, BufferRef dst, std::size_t dst_offset,
                           const void* src, std::size_t len) {
  copy_from_host(std::nothrow, stream, dst, dst_offset, src, len).value();
}
template <class C, class = detail::if_contiguous<const C>>
void copy_from_host(StreamRef stream, BufferRef dst, std::size_t dst_offset, const C& src) {
  copy_from_host(std::nothrow, stream, dst, dst_offset, src).value();
}
inline void copy_to_host(StreamRef stream, void* dst, BufferRef src, std::size_t src_offset,
                         std::size_t len) {
  copy_to_host(std::nothrow, stream, dst, src, src_offset, len).value();
}
template <class C, class = detail::if_mutable_contiguous<typename std::remove_reference<C>::type>>
void copy_to_host(StreamRef stream, C&& dst, BufferRef src, std::size_t src_offset) {
  copy_to_host(std::nothrow, stream, dst, src, src_offset).value();
}
template <class T>
std::vector<T> read_vector(StreamRef stream, BufferRef src, std::size_t src_offset,
                           std::size_t count) {
  return read_vector<T>(std::nothrow, stream, src, src_offset, count).value();
}
inline void memset(StreamRef stream, BufferRef buffer, std::size_t offset, std::uint8_t value,
                   std::size_t len) {
  memset(std::nothrow, stream, buffer, offset, value, len).value();
}
#endif

}  // namespace sluice

#endif  // SLUICE_CPP_COPY_HPP

// sluice::SyncObject (owning), sluice::SyncRef (view) and sluice::SyncList.
//
// A sync object is the dependency record of one buffer (Buffer::sync()) or of
// memory sluice does not own, such as a libtorch tensor (SyncObject::create()).
// Ops name the objects they read and write (sluice::Op, Stream::host_callback,
// sluice::launch); the engine then orders them across streams on the device.
#ifndef SLUICE_CPP_SYNC_HPP
#define SLUICE_CPP_SYNC_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/result.hpp"

namespace sluice {

/// The dependency state of a sync object.
struct SyncInfo {
  std::uint64_t id = 0;            ///< process-unique id
  std::uint32_t reader_count = 0;  ///< reader entries, at most one per stream
  bool has_writer = false;
};

namespace detail {

/// The operations of a sync object, shared by SyncObject and SyncRef.
template <class Self>
class SyncApi {
 public:
  /// Blocks the host until the last writer's work has completed.
  Result<void> wait_read(std::nothrow_t) const { return check(sluice_sync_wait_read(h())); }
  /// Blocks the host until the last writer's and every reader's work has completed.
  Result<void> wait_write(std::nothrow_t) const { return check(sluice_sync_wait_write(h())); }

  Result<SyncInfo> info(std::nothrow_t) const {
    sluice_sync_info_t i{};
    if (sluice_error_t* e = sluice_sync_info(h(), &i)) return Error::adopt(e);
    SyncInfo out;
    out.id = i.id;
    out.reader_count = i.reader_count;
    out.has_writer = i.has_writer != 0;
    return out;
  }

#if SLUICE_CPP_EXCEPTIONS
  void wait_read() const { wait_read(std::nothrow).value(); }
  void wait_write() const { wait_write(std::nothrow).value(); }
  SyncInfo info() const { return info(std::nothrow).value(); }
#endif

 private:
  sluice_sync_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of a sync handle.
class SyncRef : public detail::SyncApi<SyncRef>, public detail::View<sluice_sync_t> {
 public:
  using View::View;
};

/// A sync handle (destroyed by the destructor; enqueued work is unaffected).
/// Move-only.
class SyncObject : public detail::SyncApi<SyncObject>,
                   public detail::Owner<SyncObject, sluice_sync_t, sluice_sync_destroy, SyncRef> {
 public:
  /// A standalone sync object, standing for memory sluice does not own. The
  /// returned SyncObject owns the handle and destroys it when it goes out of scope.
  static Result<SyncObject> create(std::nothrow_t) {
    sluice_sync_t h{};
    if (sluice_error_t* e = sluice_sync_create(&h)) return Error::adopt(e);
    return adopt(h);
  }

#if SLUICE_CPP_EXCEPTIONS
  static SyncObject create() { return create(std::nothrow).value(); }
#endif
};

/// A read or write set: the C array of sync handles an op names. Build it from a
/// braced list (`{a, b}`, elements SyncObject or SyncRef), from any range of
/// things convertible to SyncRef, or leave it empty (`{}`). It copies the handles,
/// so it never dangles. Up to 8 handles are stored inline.
class SyncList {
  template <class R>
  using elem_t = decltype(*std::begin(std::declval<const R&>()));

  template <class R, class = void>
  struct is_range : std::false_type {};
  template <class R>
  struct is_range<R, std::void_t<elem_t<R>, decltype(std::end(std::declval<const R&>()))>>
      : std::is_convertible<elem_t<R>, SyncRef> {};

 public:
  SyncList() noexcept = default;
  SyncList(std::initializer_list<SyncRef> list) { assign(list.begin(), list.end()); }
  template <class R, class = typename std::enable_if<
                         is_range<R>::value &&
                         !std::is_same<typename std::decay<R>::type, SyncList>::value>::type>
  SyncList(const R& range) {
    assign(std::begin(range), std::end(range));
  }

  SyncList(const SyncList& other) { assign_raw(other.data(), other.size()); }
  SyncList& operator=(const SyncList& other) {
    if (this != &other) {
      SyncList copy(other);
      swap(copy);
    }
    return *this;
  }
  SyncList(SyncList&& other) noexcept { swap(other); }
  SyncList& operator=(SyncList&& other) noexcept {
    swap(other);
    return *this;
  }
  ~SyncList() = default;

  /// NULL when empty, as the C API expects.
  const sluice_sync_t* data() const noexcept {
    if (size_ == 0) return nullptr;
    return heap_.empty() ? inline_ : heap_.data();
  }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

 private:
  static constexpr std::size_t kInline = 8;

  void swap(SyncList& other) noexcept {
    for (std::size_t i = 0; i < kInline; ++i) std::swap(inline_[i], other.inline_[i]);
    heap_.swap(other.heap_);
    std::swap(size_, other.size_);
  }

  template <class It>
  void assign(It first, It last) {
    std::size_t n = 0;
    for (It it = first; it != last; ++it) {
      SyncRef r = *it;
      push(r.raw(), n++);
    }
    size_ = n;
  }

  void assign_raw(const sluice_sync_t* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) push(p[i], i);
    size_ = n;
  }

  void push(sluice_sync_t h, std::size_t i) {
    if (i < kInline) {
      inline_[i] = h;
      return;
    }
    if (i == kInline) heap_.assign(inline_, inline_ + kInline);
    heap_.push_back(h);
  }

  sluice_sync_t inline_[kInline] = {};
  std::vector<sluice_sync_t> heap_;
  std::size_t size_ = 0;
};

}  // namespace sluice

#endif  // SLUICE_CPP_SYNC_HPP

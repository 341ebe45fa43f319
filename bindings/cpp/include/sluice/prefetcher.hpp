// sluice::Prefetcher: batches copied host-to-device ahead of the consumer, so the
// next batch's copy overlaps the current batch's compute.
//
// A prefetcher owns `depth` slots, each with pinned host memory and device memory
// for every segment of a batch (fixed capacities, all allocated at create), and
// its own copy streams (one per producer thread, up to 4). Producers fill free
// slots, and each filled slot's H2D copy is enqueued at once:
//
//   - push(): copies host ranges into a slot (one range per segment);
//   - acquire(): hands out a slot's pinned memory to fill in place (zero copy), as
//     a Fill that is submit()ted, cancel()led, or cancelled by its destructor;
//     Fill::gather_rows() gathers a batch's rows from a dataset into it;
//   - pull mode: a fill callable given at create runs on the prefetcher's own
//     producer threads.
//
// Consumers take the batches in sequence order (the order in which producers took
// their slots):
//
//   - next(stream): leases the slot's device memory to `stream` as a Batch; kernels
//     naming batch.sync(i) (or batch.syncs()) and copies from batch.buffer(i) are
//     ordered after the H2D copy, and the slot is refilled only after the work
//     enqueued on `stream` up to the Batch's release (its destructor, or close())
//     has completed on the device.
//   - next_into(stream, dst): copies the batch into the consumer's own buffers (a
//     tracked device-to-device copy on `stream`) and releases the slot at once, so a
//     graph captured over `dst` can be replayed for every batch.
//
//   sluice::Prefetcher pf = sluice::Prefetcher::create(dev, {/*depth=*/4, {x_bytes, y_bytes}});
//   std::thread producer([in = pf.ref()] {                 // views for other threads
//     for (const Sample& s : samples) in.push({sluice::as_bytes(s.x), sluice::as_bytes(s.y)});
//     in.close_input();
//   });
//   while (std::optional<sluice::Batch> b = pf.next(stream)) {   // empty: end of data
//     sluice::launch(stream, fn, dims, /*reads=*/b->syncs(), /*writes=*/{out_sync},
//                    b->device_ptr(0), b->device_ptr(1), b->len(0));
//   }                                   // each Batch is released in stream order here
//   producer.join();
//
// End of data: once the input is closed (close_input(), or a pull-mode fill
// returning FillResult::end) and every batch was taken, next() and next_into()
// return an empty std::optional, again on every later call. Every other failure is
// an error (thrown, or in the returned Result). A producer's failure (a fill that
// returned FillResult::failed or threw, or a submit with a length over the
// capacity) is reported by next() / next_into() in the failed batch's place, in
// sequence order; pass `failed_seq` to learn that batch's number. The consumer may
// go on calling next() after it.
//
// Timeouts: the blocking calls (push, acquire, next, next_into) take a
// std::chrono::milliseconds timeout, kWaitForever by default; when it passes they
// fail with ErrorCode::timeout (and change nothing). A timeout of 0 only tries.
//
// Thread safety: the prefetcher's functions may be called from any threads at
// once. As for every owner, the Prefetcher object itself is not synchronised:
// give other threads a PrefetcherRef (ref()). Destroying the Prefetcher while
// other threads are blocked in it is allowed: push, acquire, next and next_into
// then fail with ErrorCode::invalid_handle (and Batches still leased are ended).
#ifndef SLUICE_CPP_PREFETCHER_HPP
#define SLUICE_CPP_PREFETCHER_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice/buffer.hpp"
#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/device.hpp"
#include "sluice/error.hpp"
#include "sluice/result.hpp"
#include "sluice/span.hpp"
#include "sluice/stream.hpp"
#include "sluice/sync.hpp"

namespace sluice {

/// The most segments a batch may have (`SLUICE_PREFETCH_MAX_SEGMENTS`).
constexpr std::size_t kPrefetchMaxSegments = SLUICE_PREFETCH_MAX_SEGMENTS;

/// How long a blocking prefetcher call may wait. Negative counts as 0 (only try);
/// kWaitForever, or anything from 2^32 - 1 ms up, waits as long as it takes.
using Timeout = std::chrono::milliseconds;

/// Wait as long as it takes (`SLUICE_WAIT_FOREVER`); the default timeout.
constexpr Timeout kWaitForever = Timeout::max();

/// What a pull-mode fill callable returns.
///
/// Any other value (`static_cast<FillResult>(code)`) is a failure too; the
/// consumer's error message names the value.
enum class FillResult : std::int32_t {
  /// The lengths are set (Fill::set_len; 0 where not set): the batch is ready.
  ready = 0,
  /// The input has ended: this call filled nothing (its seq is skipped) and the
  /// input is closed. Calls already under way on other producer threads finish,
  /// and their batches are still delivered; no new call starts.
  end = SLUICE_PREFETCH_END,
  /// The producer failed: the consumer receives ErrorCode::callback_failed in
  /// this batch's place, and the producers go on with the next batch.
  failed = 2,
};

/// A prefetcher's counters: `batches` handed to consumers, `bytes` copied
/// host-to-device, `producer_wait_ns` and `consumer_wait_ns` spent blocked,
/// `pinned_bytes` of staging memory held, and `copy_gbps` (over the copies timed
/// so far: batch 0, then one batch in 8 once 8 MiB were copied untimed; 0
/// before the first).
using PrefetcherStats = sluice_prefetcher_stats_t;

class Fill;
class Batch;

namespace detail {

/// A Timeout as the C API's milliseconds (`SLUICE_WAIT_FOREVER` for "no limit").
inline std::uint32_t timeout_ms(Timeout timeout) noexcept {
  const Timeout::rep ms = timeout.count();
  if (ms <= 0) return 0;
  if (ms >= static_cast<Timeout::rep>(SLUICE_WAIT_FOREVER)) return SLUICE_WAIT_FOREVER;
  return static_cast<std::uint32_t>(ms);
}

/// A segment count for the C API (which rejects anything over the maximum).
inline std::uint32_t count_u32(std::size_t n) noexcept {
  return n > 0xffffffffu ? 0xffffffffu : static_cast<std::uint32_t>(n);
}

/// A view the C API leaves untouched unless a producer's error names a batch.
inline sluice_batch_view_t unset_view() noexcept {
  sluice_batch_view_t v{};
  v.seq = ~std::uint64_t{0};
  return v;
}

template <class Self>
class PrefetcherApi;
struct FillFnBox;

/// A pull-mode fill's tie to its call: the C record the library reads when the
/// fill callable returns, and the Fill that holds the fill now (moves hand it on,
/// destroying or releasing that Fill lets go of it). It lives on the trampoline's
/// stack, for the call.
struct PullLink {
  sluice_prefetch_fill_t* rec;
  Fill* holder;
};

}  // namespace detail

/// Copies rows `rows` (of `row_bytes` bytes each) of `src` into `dst`, one after
/// another: a batch gathered from a dataset by index (sluice_gather_rows). It writes
/// rows.size() * row_bytes bytes. On x86-64 the stores are non-temporal, so a
/// prefetcher slot's lines, read by its last H2D copy, are not read again before
/// they are written, as a plain copy reads them (a lone producer whose slots stay
/// cached may gather faster with plain copies). Every index is checked first: an
/// index outside `src`, or rows that do not fit in `dst`, give
/// ErrorCode::out_of_range, `row_bytes` 0 or `dst` overlapping `src`
/// ErrorCode::invalid_argument, and nothing is written.
inline Result<void> gather_rows(std::nothrow_t, MutableByteView dst, ByteView src,
                                std::size_t row_bytes, span<const std::int64_t> rows) {
  return detail::check(sluice_gather_rows(dst.data(), dst.size(), src.data(), src.size(),
                                          row_bytes, rows.data(), rows.size()));
}

#if SLUICE_CPP_EXCEPTIONS
/// gather_rows(std::nothrow, ...); throws on error.
inline void gather_rows(MutableByteView dst, ByteView src, std::size_t row_bytes,
                        span<const std::int64_t> rows) {
  gather_rows(std::nothrow, dst, src, row_bytes, rows).value();
}
#endif

/// A slot being filled in place: from PrefetcherApi::acquire() (zero-copy push),
/// or handed to a pull-mode fill callable. Write up to capacity(i) bytes into
/// segment(i), set_len(i, n), then submit() (acquire only) to enqueue the batch's
/// H2D copy. Move-only.
///
/// An acquired Fill that is neither submitted nor cancelled is cancelled by its
/// destructor (its sequence number is skipped). Its pinned memory belongs to the
/// prefetcher: do not touch it after submit()/cancel(), and do not let the Fill
/// outlive the Prefetcher (destroying the prefetcher frees the memory). A Fill
/// given to a fill callable is valid only during that call; the callable's return
/// value takes the place of submit()/cancel(). The callable may move it (into
/// another Fill, a lambda, an object that outlives the call): the lengths are those
/// set on whichever Fill holds the batch, and once the call returns that Fill is
/// inactive and its set_len no longer reaches the batch.
class Fill {
 public:
  /// An empty fill (inactive; submit() and cancel() report errors).
  Fill() noexcept = default;
  Fill(const Fill&) = delete;
  Fill& operator=(const Fill&) = delete;
  /// Takes over `other`'s open fill; `other` becomes inactive.
  Fill(Fill&& other) noexcept : pf_(other.pf_), f_(other.f_), state_(other.state_) {
    take_link(other);
    other.pf_ = sluice_prefetcher_t{};
    other.state_ = State::done;
  }
  /// Cancels this object's open fill (if any), then takes over `other`'s.
  Fill& operator=(Fill&& other) noexcept {
    if (this != &other) {
      abandon();
      pf_ = other.pf_;
      f_ = other.f_;
      state_ = other.state_;
      take_link(other);
      other.pf_ = sluice_prefetcher_t{};
      other.state_ = State::done;
    }
    return *this;
  }
  /// Cancels an acquired fill that was neither submitted nor cancelled (ignoring
  /// errors: after the prefetcher was destroyed there is nothing to give back).
  ~Fill() { abandon(); }

  /// The batch's sequence number.
  std::uint64_t seq() const noexcept { return f_.seq; }
  /// Segments per batch.
  std::size_t segments() const noexcept { return f_.segments; }
  /// The pinned memory of segment `i`, all capacity(i) bytes of it; empty for an
  /// index past segments().
  MutableByteView segment(std::size_t i) const noexcept {
    if (i >= segments()) return MutableByteView();
    return MutableByteView(static_cast<std::byte*>(f_.host[i]), f_.capacity[i]);
  }
  /// The capacity in bytes of segment `i` (0 past segments()).
  std::size_t capacity(std::size_t i) const noexcept {
    return i < segments() ? f_.capacity[i] : 0;
  }
  /// The length set for segment `i` so far (0 until set_len, and past segments()).
  std::size_t len(std::size_t i) const noexcept { return i < segments() ? f_.len[i] : 0; }

  /// Sets how many bytes of segment `i` the batch carries (0 is allowed). An index
  /// past segments() or a length over capacity(i) gives ErrorCode::out_of_range
  /// and changes nothing.
  Result<void> set_len(std::nothrow_t, std::size_t i, std::size_t n) {
    if (i >= segments()) return segment_error("set_len", i);
    if (n > f_.capacity[i]) {
      return Error(ErrorCode::out_of_range, 0,
                   "Fill::set_len: batch " + std::to_string(f_.seq) + ", segment " +
                       std::to_string(i) + ": " + std::to_string(n) +
                       " bytes, over its capacity " + std::to_string(f_.capacity[i]));
    }
    store_len(i, n);
    return {};
  }

  /// Gathers rows `rows` of `src` into segment `i` with sluice::gather_rows and sets
  /// len(i) to rows.size() * row_bytes. An index past segments() gives
  /// ErrorCode::out_of_range; on any error nothing is written and len(i) is kept.
  Result<void> gather_rows(std::nothrow_t, std::size_t i, ByteView src, std::size_t row_bytes,
                           span<const std::int64_t> rows) {
    if (i >= segments()) return segment_error("gather_rows", i);
    Result<void> r = sluice::gather_rows(std::nothrow, segment(i), src, row_bytes, rows);
    if (r) store_len(i, rows.size() * row_bytes);
    return r;
  }

  /// Submits an acquired fill: enqueues the H2D copy of each segment's first len(i)
  /// bytes. The fill is over (inactive) afterwards, also on error; a second submit
  /// is reported by the C API (ErrorCode::invalid_argument: not an open fill). A
  /// pull-mode fill gives ErrorCode::invalid_state: return FillResult::ready instead.
  Result<void> submit(std::nothrow_t) {
    if (state_ == State::pulled) return pulled_error("submit");
    state_ = State::done;
    return detail::check(sluice_prefetcher_submit(pf_, &f_));
  }

  /// Gives an acquired fill back unused: its sequence number is skipped. The fill
  /// is over (inactive) afterwards, also on error. A pull-mode fill gives
  /// ErrorCode::invalid_state: return FillResult::end or failed instead.
  Result<void> cancel(std::nothrow_t) {
    if (state_ == State::pulled) return pulled_error("cancel");
    state_ = State::done;
    return detail::check(sluice_prefetcher_cancel(pf_, &f_));
  }

#if SLUICE_CPP_EXCEPTIONS
  /// set_len(std::nothrow, i, n); throws on error.
  void set_len(std::size_t i, std::size_t n) { set_len(std::nothrow, i, n).value(); }
  /// gather_rows(std::nothrow, i, src, row_bytes, rows); throws on error.
  void gather_rows(std::size_t i, ByteView src, std::size_t row_bytes,
                   span<const std::int64_t> rows) {
    gather_rows(std::nothrow, i, src, row_bytes, rows).value();
  }
  /// submit(std::nothrow); throws on error.
  void submit() { submit(std::nothrow).value(); }
  /// cancel(std::nothrow); throws on error.
  void cancel() { cancel(std::nothrow).value(); }
#endif

  /// True while the fill is open: acquired and not yet submitted or cancelled, or
  /// handed to a fill callable that has not returned.
  bool active() const noexcept { return state_ != State::done; }
  /// Same as active().
  explicit operator bool() const noexcept { return active(); }

  /// The C fill record (its `len` as set so far).
  const sluice_prefetch_fill_t& raw() const noexcept { return f_; }

  /// Gives up an acquired fill without submitting or cancelling it: the caller
  /// must pass the returned record to sluice_prefetcher_submit or
  /// sluice_prefetcher_cancel. This object becomes inactive.
  [[nodiscard]] sluice_prefetch_fill_t release() noexcept {
    unlink();
    state_ = State::done;
    return f_;
  }

 private:
  template <class Self>
  friend class detail::PrefetcherApi;
  friend struct detail::FillFnBox;

  enum class State : unsigned char { done, acquired, pulled };

  Fill(sluice_prefetcher_t pf, const sluice_prefetch_fill_t& f, State state) noexcept
      : pf_(pf), f_(f), state_(state) {}

  void abandon() noexcept {
    if (state_ == State::acquired) sluice_error_free(sluice_prefetcher_cancel(pf_, &f_));
    unlink();
    state_ = State::done;
  }

  /// Sets len(i); a pull-mode fill also sets it in the C record its call returns.
  void store_len(std::size_t i, std::size_t n) noexcept {
    f_.len[i] = n;
    if (link_ != nullptr) link_->rec->len[i] = n;
  }

  /// Takes over `other`'s pull-mode link (if any): the batch now follows this object.
  void take_link(Fill& other) noexcept {
    link_ = other.link_;
    other.link_ = nullptr;
    if (link_ != nullptr) link_->holder = this;
  }

  /// Lets go of a pull-mode fill: later lengths no longer reach the batch.
  void unlink() noexcept {
    if (link_ != nullptr) link_->holder = nullptr;
    link_ = nullptr;
  }

  Result<void> segment_error(const char* what, std::size_t i) const {
    return Error(ErrorCode::out_of_range, 0,
                 std::string("Fill::") + what + ": segment " + std::to_string(i) +
                     " of a batch of " + std::to_string(segments()) + " segments");
  }

  static Result<void> pulled_error(const char* what) {
    return Error(ErrorCode::invalid_state, 0,
                 std::string("Fill::") + what +
                     ": a pull-mode fill is ended by the fill callable's return value");
  }

  sluice_prefetcher_t pf_{};  ///< not owned; zero for a pull-mode fill
  sluice_prefetch_fill_t f_{};
  State state_ = State::done;
  detail::PullLink* link_ = nullptr;  ///< a pull-mode fill's, while its call runs
};

/// A pull-mode producer: fills `fill` (Fill::segment, Fill::set_len) and says how
/// it went. It runs on the prefetcher's producer threads, possibly on several at
/// once, so it must be safe to call concurrently; with several threads, derive the
/// content from fill.seq() (batches are delivered in seq order, which is not the
/// order in which concurrent calls happen to run). It may block. An exception it
/// throws is caught and counts as a failure (the consumer's message names
/// kCallbackException). It must not destroy its own prefetcher.
using FillFn = std::function<FillResult(Fill&)>;

/// How to create a prefetcher.
struct PrefetcherConfig {
  /// Slots, i.e. batches in flight: 1 to 64, or 0 for the default of 2.
  std::uint32_t depth = 0;
  /// The capacity in bytes of each segment of a batch: 1 to kPrefetchMaxSegments
  /// entries, each > 0.
  std::vector<std::size_t> capacities;
  /// Pull mode: the producer, started at create; empty for push mode.
  FillFn fill;
  /// Pull mode: the number of producer threads running `fill` (0 means 1).
  std::uint32_t producer_threads = 1;

  /// An empty configuration (no segments: create() would refuse it).
  PrefetcherConfig() = default;
  /// Push mode: `slots` slots of segments of `segment_capacities` bytes.
  PrefetcherConfig(std::uint32_t slots, std::vector<std::size_t> segment_capacities)
      : depth(slots), capacities(std::move(segment_capacities)) {}
  /// Pull mode: as above, filled by `fill_fn` on `threads` producer threads.
  PrefetcherConfig(std::uint32_t slots, std::vector<std::size_t> segment_capacities,
                   FillFn fill_fn, std::uint32_t threads = 1)
      : depth(slots),
        capacities(std::move(segment_capacities)),
        fill(std::move(fill_fn)),
        producer_threads(threads) {}
};

namespace detail {

/// The heap home of a pull-mode fill callable: owned by its Prefetcher, passed to
/// the C API as user_data, and freed only after the C prefetcher is destroyed
/// (which joins the producer threads).
struct FillFnBox {
  explicit FillFnBox(FillFn f) : fn(std::move(f)) {}

  FillFn fn;

  /// sluice_prefetch_fill_fn: runs the callable on a producer thread. The lengths
  /// reach `c` as they are set, through whichever Fill holds the batch (the
  /// callable may move `fill`); when it returns, that Fill is ended.
  static std::int32_t trampoline(void* user_data, sluice_prefetch_fill_t* c) noexcept {
    auto* box = static_cast<FillFnBox*>(user_data);
    Fill fill(sluice_prefetcher_t{}, *c, Fill::State::pulled);
    PullLink link{c, &fill};
    fill.link_ = &link;
    std::int32_t rc = 0;
#if SLUICE_CPP_EXCEPTIONS
    try {
      rc = static_cast<std::int32_t>(box->fn(fill));
    } catch (...) {
      rc = kCallbackException;
    }
#else
    rc = static_cast<std::int32_t>(box->fn(fill));
#endif
    if (Fill* holder = link.holder) {
      holder->unlink();
      holder->state_ = Fill::State::done;
    }
    return rc;
  }
};

}  // namespace detail

/// What next_into() reports about the batch it copied: its sequence number and the
/// length of each segment (the bytes written at the start of each destination).
class BatchInfo {
 public:
  /// An empty description (seq 0, no segments).
  BatchInfo() noexcept = default;
  /// Describes the batch of a C view.
  explicit BatchInfo(const sluice_batch_view_t& v) noexcept : v_(v) {}

  /// The batch's sequence number.
  std::uint64_t seq() const noexcept { return v_.seq; }
  /// Segments per batch.
  std::size_t segments() const noexcept { return v_.segments; }
  /// The bytes segment `i` carries (0 past segments()).
  std::size_t len(std::size_t i) const noexcept { return i < segments() ? v_.len[i] : 0; }
  /// The C view. Its device pointers and handles are the slot's, already
  /// released: read the destination buffers instead.
  const sluice_batch_view_t& raw() const noexcept { return v_; }

 private:
  sluice_batch_view_t v_{};
};

/// A batch leased by next(): the slot's device memory, for work on the stream given
/// to next(). Releasing it (the destructor, or close()) gives the slot back in
/// stream order: it is refilled only after the work enqueued on that stream so far
/// has completed on the device; the host does not wait. Move-only.
///
/// Its memory and sync objects belong to the prefetcher: use them only while the
/// Batch is leased and the prefetcher lives. After the prefetcher was destroyed,
/// releasing gives ErrorCode::invalid_handle (the destructor ignores it).
class Batch : public detail::Owner<Batch, sluice_batch_t, sluice_batch_release> {
  using Base = detail::Owner<Batch, sluice_batch_t, sluice_batch_release>;

 public:
  /// Takes ownership of a C batch handle; the Batch describes nothing (use the
  /// two-argument form to keep the C view).
  using Base::adopt;

  /// Takes ownership of a C batch handle and keeps its view: the returned Batch
  /// releases the lease when it goes out of scope.
  static Batch adopt(sluice_batch_t batch, const sluice_batch_view_t& v) noexcept {
    Batch b = Base::adopt(batch);
    b.v_ = v;
    return b;
  }

  /// The batch's sequence number.
  std::uint64_t seq() const noexcept { return v_.seq; }
  /// Segments per batch.
  std::size_t segments() const noexcept { return v_.segments; }
  /// The bytes segment `i` carries (0 past segments()).
  std::size_t len(std::size_t i) const noexcept { return i < segments() ? v_.len[i] : 0; }
  /// The device address (CUdeviceptr) of segment `i`, capacity bytes long; 0 past
  /// segments(). On the host backend it is a host address.
  std::uint64_t device_ptr(std::size_t i) const noexcept {
    return i < segments() ? v_.device_ptr[i] : 0;
  }
  /// The sync object of segment `i`'s device memory, for the reads of tracked
  /// launches, copies, host callbacks and Op scopes on the batch's stream; an empty
  /// view past segments(). The prefetcher owns it: never destroy it.
  SyncRef sync(std::size_t i) const noexcept {
    return i < segments() ? SyncRef(v_.sync[i]) : SyncRef();
  }
  /// The device buffer of segment `i` (capacity bytes; the first len(i) are the
  /// batch), for tracked copies on the batch's stream, e.g.
  /// `copy(stream, mine, 0, b.buffer(i), 0, b.len(i))`; an empty view past
  /// segments(). The prefetcher owns it: never free it.
  BufferRef buffer(std::size_t i) const noexcept {
    return i < segments() ? BufferRef(v_.buffer[i]) : BufferRef();
  }
  /// The sync objects of every segment, as a read set: `launch(..., b.syncs(), ...)`.
  SyncList syncs() const {
    SyncRef refs[kPrefetchMaxSegments];
    const std::size_t n = segments() < kPrefetchMaxSegments ? segments() : kPrefetchMaxSegments;
    for (std::size_t i = 0; i < n; ++i) refs[i] = SyncRef(v_.sync[i]);
    return SyncList(span<const SyncRef>(refs, n));
  }
  /// The sequence number and lengths, as next_into() reports them.
  BatchInfo info() const noexcept { return BatchInfo(v_); }
  /// The C view.
  const sluice_batch_view_t& view() const noexcept { return v_; }

  /// Releases the lease now, in stream order, and reports the result; the Batch
  /// becomes empty (also on error). Its accessors still describe the batch.
  Result<void> close(std::nothrow_t) { return Base::close(std::nothrow); }
#if SLUICE_CPP_EXCEPTIONS
  /// close(std::nothrow); throws on error.
  void close() { Base::close(); }
#endif

  /// Gives ownership of the C batch handle to the caller, who must pass it to
  /// sluice_batch_release; the lease is NOT released here (use close() for that).
  [[nodiscard]] sluice_batch_t release() noexcept { return Base::release(); }

 private:
  sluice_batch_view_t v_{};
};

namespace detail {

/// The operations of a prefetcher, shared by Prefetcher and PrefetcherRef.
template <class Self>
class PrefetcherApi {
 public:
  /// Copies one host range per segment (each at most the segment's capacity) into
  /// a free slot and enqueues the batch's H2D copy; returns its sequence number.
  /// Blocks while every slot is busy, up to `timeout` (then ErrorCode::timeout;
  /// the timeout bounds the wait for a free slot, not the host wait for that
  /// slot's previous H2D copy, which follows it).
  /// A range over its capacity, or the wrong number of ranges, is an error and
  /// queues nothing; after close_input() it gives ErrorCode::invalid_state. The
  /// ranges are only read during the call. On x86-64 the copy uses non-temporal
  /// stores, which win when the slot is out of the CPU's caches (several
  /// producers); a lone producer whose slots stay cached copies faster itself,
  /// into acquire()'s slot.
  Result<std::uint64_t> push(std::nothrow_t, span<const ByteView> segments,
                             Timeout timeout = kWaitForever) const {
    sluice_prefetch_segment_t inline_segs[kPrefetchMaxSegments] = {};
    std::vector<sluice_prefetch_segment_t> heap_segs;
    sluice_prefetch_segment_t* segs = inline_segs;
    if (segments.size() > kPrefetchMaxSegments) {  // the C API refuses it; let it say so
      heap_segs.resize(segments.size());
      segs = heap_segs.data();
    }
    for (std::size_t i = 0; i < segments.size(); ++i) {
      segs[i].ptr = segments[i].data();
      segs[i].len = segments[i].size();
    }
    std::uint64_t seq = 0;
    if (sluice_error_t* e = sluice_prefetcher_push(h(), segs, count_u32(segments.size()),
                                                   timeout_ms(timeout), &seq)) {
      return Error::adopt(e);
    }
    return seq;
  }

  /// push() with a braced list of ranges: `pf.push({as_bytes(x), as_bytes(y)})`.
  Result<std::uint64_t> push(std::nothrow_t, std::initializer_list<ByteView> segments,
                             Timeout timeout = kWaitForever) const {
    return push(std::nothrow, span<const ByteView>(segments.begin(), segments.size()), timeout);
  }

  /// Takes a free slot for the caller to fill in place (zero-copy push): write into
  /// fill.segment(i), fill.set_len(i, n), then fill.submit(). Blocks like push().
  /// The returned Fill owns the open slot and cancels it if it goes out of scope
  /// unsubmitted.
  Result<Fill> acquire(std::nothrow_t, Timeout timeout = kWaitForever) const {
    sluice_prefetch_fill_t f{};
    if (sluice_error_t* e = sluice_prefetcher_acquire(h(), timeout_ms(timeout), &f)) {
      return Error::adopt(e);
    }
    return Fill(h(), f, Fill::State::acquired);
  }

  /// Ends the input: next() returns the batches in flight, then end of data (an
  /// empty optional). Producers waiting for a slot, and later pushes and acquires,
  /// get ErrorCode::invalid_state. Calling it again does nothing.
  Result<void> close_input(std::nothrow_t) const {
    return detail::check(sluice_prefetcher_close_input(h()));
  }

  /// Leases the oldest batch to work on `stream`, waiting up to `timeout` on the
  /// host for its producer to submit it (never for its copy: `stream` waits for
  /// that on the device). The returned Batch owns the lease and releases it when it
  /// goes out of scope. At end of data: an empty optional. A producer's error for
  /// this batch is returned as the error, with the batch's sequence number written
  /// to `*failed_seq` when `failed_seq` is not null (other errors leave it alone).
  ///
  /// Hold fewer than `depth` Batches at once when producers need a free slot to
  /// make the next batch.
  Result<std::optional<Batch>> next(std::nothrow_t, StreamRef stream,
                                    Timeout timeout = kWaitForever,
                                    std::uint64_t* failed_seq = nullptr) const {
    sluice_batch_t b{};
    sluice_batch_view_t v = unset_view();
    if (sluice_error_t* e =
            sluice_prefetcher_next(h(), stream.raw(), timeout_ms(timeout), &b, &v)) {
      return next_failed<Batch>(e, v, failed_seq);
    }
    return std::optional<Batch>(Batch::adopt(b, v));
  }

  /// Graph mode: copies the oldest batch into `dst` (one buffer per segment, each
  /// at least the segment's capacity) as a tracked device-to-device copy on
  /// `stream`, and releases its slot at once in stream order. Waits, end of data
  /// and errors as next(). The returned BatchInfo says which batch it was and how
  /// many bytes of each destination it wrote.
  Result<std::optional<BatchInfo>> next_into(std::nothrow_t, StreamRef stream,
                                             span<const BufferRef> dst,
                                             Timeout timeout = kWaitForever,
                                             std::uint64_t* failed_seq = nullptr) const {
    sluice_buffer_t inline_dst[kPrefetchMaxSegments] = {};
    std::vector<sluice_buffer_t> heap_dst;
    sluice_buffer_t* d = inline_dst;
    if (dst.size() > kPrefetchMaxSegments) {  // the C API refuses it; let it say so
      heap_dst.resize(dst.size());
      d = heap_dst.data();
    }
    for (std::size_t i = 0; i < dst.size(); ++i) d[i] = dst[i].raw();
    sluice_batch_view_t v = unset_view();
    if (sluice_error_t* e = sluice_prefetcher_next_into(
            h(), stream.raw(), d, count_u32(dst.size()), timeout_ms(timeout), &v)) {
      return next_failed<BatchInfo>(e, v, failed_seq);
    }
    return std::optional<BatchInfo>(BatchInfo(v));
  }

  /// next_into() with a braced list of buffers: `pf.next_into(stream, {x, y})`.
  Result<std::optional<BatchInfo>> next_into(std::nothrow_t, StreamRef stream,
                                             std::initializer_list<BufferRef> dst,
                                             Timeout timeout = kWaitForever,
                                             std::uint64_t* failed_seq = nullptr) const {
    return next_into(std::nothrow, stream, span<const BufferRef>(dst.begin(), dst.size()),
                     timeout, failed_seq);
  }

  /// The prefetcher's counters.
  Result<PrefetcherStats> stats(std::nothrow_t) const {
    PrefetcherStats s{};
    return detail::check(sluice_prefetcher_stats(h(), &s), s);
  }

#if SLUICE_CPP_EXCEPTIONS
  /// push(std::nothrow, segments, timeout); throws on error.
  std::uint64_t push(span<const ByteView> segments, Timeout timeout = kWaitForever) const {
    return push(std::nothrow, segments, timeout).value();
  }
  /// push(std::nothrow, {ranges...}, timeout); throws on error.
  std::uint64_t push(std::initializer_list<ByteView> segments,
                     Timeout timeout = kWaitForever) const {
    return push(std::nothrow, segments, timeout).value();
  }
  /// acquire(std::nothrow, timeout); throws on error.
  Fill acquire(Timeout timeout = kWaitForever) const {
    return acquire(std::nothrow, timeout).value();
  }
  /// close_input(std::nothrow); throws on error.
  void close_input() const { close_input(std::nothrow).value(); }
  /// next(std::nothrow, ...): the batch, or an empty optional at end of data;
  /// throws sluice::Error on any other failure (a producer's included).
  std::optional<Batch> next(StreamRef stream, Timeout timeout = kWaitForever,
                            std::uint64_t* failed_seq = nullptr) const {
    return next(std::nothrow, stream, timeout, failed_seq).value();
  }
  /// next_into(std::nothrow, ...): the batch's description, or an empty optional
  /// at end of data; throws sluice::Error on any other failure.
  std::optional<BatchInfo> next_into(StreamRef stream, span<const BufferRef> dst,
                                     Timeout timeout = kWaitForever,
                                     std::uint64_t* failed_seq = nullptr) const {
    return next_into(std::nothrow, stream, dst, timeout, failed_seq).value();
  }
  /// next_into() with a braced list of buffers; throws on error.
  std::optional<BatchInfo> next_into(StreamRef stream, std::initializer_list<BufferRef> dst,
                                     Timeout timeout = kWaitForever,
                                     std::uint64_t* failed_seq = nullptr) const {
    return next_into(std::nothrow, stream, dst, timeout, failed_seq).value();
  }
  /// stats(std::nothrow); throws on error.
  PrefetcherStats stats() const { return stats(std::nothrow).value(); }
#endif

 private:
  sluice_prefetcher_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }

  /// END_OF_DATA -> an empty optional; any other error -> the error, and the failed
  /// batch's number where the C API wrote one.
  template <class T>
  static Result<std::optional<T>> next_failed(sluice_error_t* e, const sluice_batch_view_t& v,
                                         std::uint64_t* failed_seq) {
    if (sluice_error_code(e) == SLUICE_ERROR_END_OF_DATA) {
      sluice_error_free(e);
      return std::optional<T>();
    }
    if (failed_seq != nullptr && v.seq != unset_view().seq) *failed_seq = v.seq;
    return Error::adopt(e);
  }
};

}  // namespace detail

/// A non-owning view of a prefetcher handle: what producer and consumer threads
/// should hold. Trivially copyable; it does not keep the prefetcher alive (once it
/// is destroyed, calls through the view give ErrorCode::invalid_handle).
class PrefetcherRef : public detail::PrefetcherApi<PrefetcherRef>,
                      public detail::View<sluice_prefetcher_t> {
 public:
  using View::View;
};

/// A prefetcher (destroyed by the destructor). Move-only.
///
/// Destroying it wakes every thread blocked in it (their calls fail with
/// ErrorCode::invalid_handle), waits for running fill calls to return and joins the
/// producer threads, ends the leased Batches, and frees the memory once the device
/// work using it has completed; then the fill callable is destroyed.
class Prefetcher : public detail::PrefetcherApi<Prefetcher>,
                   public detail::ViewOf<Prefetcher, PrefetcherRef> {
 public:
  /// An empty prefetcher (calls give ErrorCode::invalid_handle).
  Prefetcher() noexcept = default;
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  /// Takes over `other`'s prefetcher (and fill callable); `other` becomes empty.
  Prefetcher(Prefetcher&& other) noexcept
      : h_(std::move(other.h_)), fill_(std::move(other.fill_)) {}
  /// Destroys this prefetcher (as the destructor does), then takes over `other`'s.
  Prefetcher& operator=(Prefetcher&& other) noexcept {
    if (this != &other) {
      reset();
      h_ = std::move(other.h_);
      fill_ = std::move(other.fill_);
    }
    return *this;
  }
  /// Destroys the prefetcher (ignoring errors), then its fill callable.
  ~Prefetcher() { reset(); }

  /// Creates a prefetcher on `device`: its copy streams and every slot's pinned and
  /// device memory are allocated now and never grow. With `config.fill` set, the
  /// producer threads start at once (pull mode); otherwise batches come from push()
  /// and acquire(). A bad configuration (depth over 64, no segments or more than
  /// kPrefetchMaxSegments, a zero capacity) gives ErrorCode::invalid_argument. The
  /// returned Prefetcher owns the handle and the fill callable, and destroys both
  /// when it goes out of scope.
  static Result<Prefetcher> create(std::nothrow_t, DeviceRef device, PrefetcherConfig config) {
    sluice_prefetcher_config_t c{};
    c.depth = config.depth;
    c.segments = detail::count_u32(config.capacities.size());
    for (std::size_t i = 0; i < config.capacities.size() && i < kPrefetchMaxSegments; ++i) {
      c.capacity[i] = config.capacities[i];
    }
    std::unique_ptr<detail::FillFnBox> box;
    if (config.fill) {
      box.reset(new detail::FillFnBox(std::move(config.fill)));
      c.fill = &detail::FillFnBox::trampoline;
      c.user_data = box.get();
      c.producer_threads = config.producer_threads;
    }
    sluice_prefetcher_t h{};
    // On failure the C API has joined any producer thread it started: `box` may go.
    if (sluice_error_t* e = sluice_prefetcher_create(device.raw(), &c, &h)) {
      return Error::adopt(e);
    }
    Prefetcher pf = adopt(h);
    pf.fill_ = std::move(box);
    return pf;
  }

#if SLUICE_CPP_EXCEPTIONS
  /// create(std::nothrow, device, config); throws on error.
  static Prefetcher create(DeviceRef device, PrefetcherConfig config) {
    return create(std::nothrow, device, std::move(config)).value();
  }
#endif

  /// Takes ownership of a C prefetcher handle (push mode, or a pull mode whose fill
  /// state the caller keeps alive until the handle is destroyed): the returned
  /// object destroys it when it goes out of scope (or on close()).
  static Prefetcher adopt(sluice_prefetcher_t h) noexcept {
    Prefetcher pf;
    pf.h_.reset(h);
    return pf;
  }

  /// Destroys the prefetcher now, then its fill callable, and reports the result;
  /// the object becomes empty.
  Result<void> close(std::nothrow_t) {
    Result<void> r = h_.close();
    fill_.reset();
    return r;
  }
#if SLUICE_CPP_EXCEPTIONS
  /// close(std::nothrow); throws on error.
  void close() { close(std::nothrow).value(); }
#endif

  /// The C handle, still owned by this object.
  sluice_prefetcher_t raw() const noexcept { return h_.get(); }
  /// Gives ownership of the C handle to the caller, who must destroy it with
  /// sluice_prefetcher_destroy; this object becomes empty. A pull-mode fill
  /// callable is then leaked on purpose, since it must outlive the handle.
  sluice_prefetcher_t release() noexcept {
    (void)fill_.release();
    return h_.release();
  }
  /// True while the object owns a prefetcher.
  explicit operator bool() const noexcept { return !h_.empty(); }

 private:
  /// The handle first (which joins the producer threads), then the callable.
  void reset() noexcept {
    h_.reset();
    fill_.reset();
  }

  detail::UniqueHandle<sluice_prefetcher_t, sluice_prefetcher_destroy> h_;
  std::unique_ptr<detail::FillFnBox> fill_;
};

}  // namespace sluice

#endif  // SLUICE_CPP_PREFETCHER_HPP

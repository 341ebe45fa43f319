// sluice::Event (owning) and sluice::EventRef (non-owning view).
//
// Events are recorded by a stream: `Event e = stream.record_event();` (stream.hpp).
// A stream waits on one with `stream.wait(e)`.
#ifndef SLUICE_CPP_EVENT_HPP
#define SLUICE_CPP_EVENT_HPP

#include <cstdint>
#include <new>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/result.hpp"

namespace sluice {

/// Flags of a recording (`SLUICE_EVENT_*`).
enum class EventFlags : std::uint32_t {
  none = 0,
  timing = SLUICE_EVENT_TIMING,  ///< usable with elapsed_ms
};

constexpr EventFlags operator|(EventFlags a, EventFlags b) noexcept {
  return static_cast<EventFlags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}

/// Where a recording sits: its stream's id and its per-stream sequence number.
struct EventSequence {
  std::uint64_t stream_id = 0;
  std::uint64_t seq = 0;
};

namespace detail {

/// The operations of an event, shared by Event and EventRef.
template <class Self>
class EventApi {
 public:
  /// True when the work before the event has completed.
  Result<bool> query(std::nothrow_t) const {
    bool done = false;
    return detail::check(sluice_event_query(h(), &done), done);
  }

  /// Blocks until the work before the event has completed.
  Result<void> synchronize(std::nothrow_t) const { return check(sluice_event_synchronize(h())); }

  Result<EventSequence> sequence(std::nothrow_t) const {
    EventSequence s;
    if (sluice_error_t* e = sluice_event_sequence(h(), &s.stream_id, &s.seq)) {
      return Error::adopt(e);
    }
    return s;
  }

#if SLUICE_CPP_EXCEPTIONS
  bool query() const { return query(std::nothrow).value(); }
  void synchronize() const { synchronize(std::nothrow).value(); }
  EventSequence sequence() const { return sequence(std::nothrow).value(); }
#endif

 private:
  sluice_event_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of an event handle.
class EventRef : public detail::EventApi<EventRef>, public detail::View<sluice_event_t> {
 public:
  using View::View;
};

/// One recording of a pooled event (destroyed by the destructor; the pooled event
/// is recycled once nothing references the recording). Move-only. Made by
/// Stream::record_event(), or by adopt() from a C handle.
class Event : public detail::EventApi<Event>,
              public detail::Owner<Event, sluice_event_t, sluice_event_destroy, EventRef> {};

/// Milliseconds between two completed recordings made with EventFlags::timing.
inline Result<float> elapsed_ms(std::nothrow_t, EventRef start, EventRef end) {
  float ms = 0.0f;
  if (sluice_error_t* e = sluice_event_elapsed_ms(start.raw(), end.raw(), &ms)) {
    return Error::adopt(e);
  }
  return ms;
}

#if SLUICE_CPP_EXCEPTIONS
inline float elapsed_ms(EventRef start, EventRef end) {
  return elapsed_ms(std::nothrow, start, end).value();
}
#endif

}  // namespace sluice

#endif  // SLUICE_CPP_EVENT_HPP

// sluice::Op: an RAII scope around one foreign op (sluice_op_begin .. sluice_op_end).
//
// Construction makes the stream wait, on the device, for every conflicting
// earlier op on other streams (the host never blocks). Enqueue the foreign work
// on `stream.native_handle()` inside the scope. Destruction (or end()) records one
// event on the stream and publishes it to every object of the op.
//
//   {
//     sluice::Op op(stream_b, /*reads=*/{x_sync}, /*writes=*/{y_sync});
//     run_torch_kernel_on(stream_b.native_handle());
//   }  // op_end
//
// The destructor cannot report an error; call end() to see it.
#ifndef SLUICE_CPP_OP_HPP
#define SLUICE_CPP_OP_HPP

#include <new>
#include <utility>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/result.hpp"
#include "sluice/stream.hpp"
#include "sluice/sync.hpp"

namespace sluice {

/// An open foreign op. Move-only; ends in the destructor unless end() ran.
class Op {
 public:
  Op() noexcept = default;

  /// Begins an op on `stream` that reads `reads` and writes `writes` (an object in
  /// both counts as a write). The returned Op owns the open op and ends it when it
  /// goes out of scope; release() hands it to the caller. It does not own `stream`.
  static Result<Op> begin(std::nothrow_t, StreamRef stream, const SyncList& reads,
                          const SyncList& writes) {
    sluice_op_t h{};
    if (sluice_error_t* e = sluice_op_begin(stream.raw(), reads.data(), reads.size(),
                                            writes.data(), writes.size(), &h)) {
      return Error::adopt(e);
    }
    return Op(h, stream);
  }

#if SLUICE_CPP_EXCEPTIONS
  /// Begins the op; throws sluice::Error when it cannot begin. The Op owns the
  /// open op, as for begin().
  Op(StreamRef stream, const SyncList& reads, const SyncList& writes)
      : Op(begin(std::nothrow, stream, reads, writes).value()) {}

  /// Ends the op now; throws on error. The op is ended (and empty) either way.
  void end() { end(std::nothrow).value(); }
#endif

  /// Ends the op now and reports the result. The op is consumed also on error; a
  /// second end() reports ErrorCode::invalid_handle.
  Result<void> end(std::nothrow_t) {
    if (h_.empty()) {
      return check_empty();
    }
    return h_.close();
  }

  /// True between begin and end.
  bool active() const noexcept { return !h_.empty(); }
  explicit operator bool() const noexcept { return active(); }

  /// The stream the op runs on (valid while that stream's handle lives); an empty
  /// view once the op has ended or was moved from.
  StreamRef stream() const noexcept { return active() ? stream_ : StreamRef(); }

  sluice_op_t raw() const noexcept { return h_.get(); }
  /// Gives up ownership: the caller must sluice_op_end the handle.
  sluice_op_t release() noexcept { return h_.release(); }

 private:
  Op(sluice_op_t h, StreamRef stream) noexcept : h_(h), stream_(stream) {}

  // Ask the C API, so the message is its own ("op handle is null (0)").
  static Result<void> check_empty() { return detail::check(sluice_op_end(sluice_op_t{})); }

  detail::UniqueHandle<sluice_op_t, sluice_op_end> h_;
  StreamRef stream_;
};

}  // namespace sluice

#endif  // SLUICE_CPP_OP_HPP

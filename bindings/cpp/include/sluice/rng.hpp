// sluice::Rng and sluice::RngCheckpoint (owning), sluice::RngRef and
// sluice::RngCheckpointRef (non-owning views): the checkpointable on-device RNG
// (issue 13).
//
// A generator is n per-sample Philox4x32-10 states in device memory. State i starts
// as cuRAND's curand_init(seed, i, 0, &s), and every draw equals cuRAND's (raw
// words, curand_uniform, curand_normal with its pairing; normals within 1e-5 on the
// host backend). Drawing is a tracked op on an explicit stream that advances the
// states on the device, so a captured draw replays as a new draw each time.
//
//   sluice::Rng rng = sluice::Rng::create(stream, /*seed=*/42, /*n_states=*/n);
//   sluice::Buffer out = sluice::Buffer::alloc(stream, n * count * 4);
//   rng.generate(stream, sluice::RngDistribution::normal, sluice::RngLayout::sample_major,
//                out, 0, count);                     // out[j * n + i]: draw j of state i
//   sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(stream, rng);
//   rng.save(stream, ckpt);                          // stream-ordered D2D, no host sync
//   std::vector<std::uint8_t> bytes = ckpt.serialize();   // one bulk D2H, waits for the save
//   ...
//   sluice::RngCheckpoint back = sluice::RngCheckpoint::deserialize(dev, bytes);
//   rng.restore(stream, back);                       // corrupt bytes: ErrorCode::corrupt_data
//
// Your own kernels draw from rng.states() (a device buffer of n sluice_rng_state,
// include/sluice/rng.cuh, installed as <sluice/rng.cuh>); list that buffer's sync
// object as written by the launch.
//
// Thread safety: generators and checkpoints may be used from any thread at once
// (give other threads an RngRef / RngCheckpointRef); the draws are ordered by the
// streams, as for any buffer.
#ifndef SLUICE_CPP_RNG_HPP
#define SLUICE_CPP_RNG_HPP

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <vector>

#include "sluice/buffer.hpp"
#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/device.hpp"
#include "sluice/result.hpp"
#include "sluice/span.hpp"
#include "sluice/stream.hpp"

namespace sluice {

/// What Rng::generate draws (`SLUICE_RNG_*`); every value is one 32-bit word.
enum class RngDistribution : std::uint32_t {
  u32 = SLUICE_RNG_U32,          ///< raw 32-bit outputs, `curand`
  uniform = SLUICE_RNG_UNIFORM,  ///< floats in (0, 1], `curand_uniform`
  normal = SLUICE_RNG_NORMAL,    ///< standard normal floats, `curand_normal` (drawn in pairs)
};

/// Where Rng::generate puts draw `j` of state `i`, in words from the offset
/// (`SLUICE_RNG_LAYOUT_*`).
enum class RngLayout : std::uint32_t {
  sample_major = SLUICE_RNG_LAYOUT_SAMPLE_MAJOR,  ///< `j * n_states + i` (coalesced)
  state_major = SLUICE_RNG_LAYOUT_STATE_MAJOR,    ///< `i * count + j`
};

/// The size of one state in device memory: cuRAND's `curandStatePhilox4_32_10_t`,
/// `sluice_rng_state` of <sluice/rng.cuh>.
constexpr std::size_t kRngStateBytes = 64;

/// The number of states and the seed of a generator (of creation, or of the
/// checkpoint it restored last) or of a checkpoint.
struct RngInfo {
  std::size_t n_states = 0;
  std::uint64_t seed = 0;
};

class RngCheckpointRef;

namespace detail {

/// The operations of a generator, shared by Rng and RngRef.
template <class Self>
class RngApi {
 public:
  Result<RngInfo> info(std::nothrow_t) const {
    RngInfo i;
    if (sluice_error_t* e = sluice_rng_info(h(), &i.n_states, &i.seed)) return Error::adopt(e);
    return i;
  }

  /// Draws `count` values from every state into `buffer` (device memory) at byte
  /// `offset`, a multiple of 4: `n_states * count` words placed by `layout`. One
  /// tracked op on `stream` that writes the states and the buffer. Errors:
  /// out_of_range when the words do not fit; invalid_argument for an unknown
  /// distribution or layout, a misaligned offset, or a buffer that is not device
  /// memory. A refused call draws nothing.
  Result<void> generate(std::nothrow_t, StreamRef stream, RngDistribution dist, RngLayout layout,
                        BufferRef buffer, std::size_t offset, std::size_t count) const {
    return check(sluice_rng_generate(stream.raw(), h(), static_cast<std::uint32_t>(dist),
                                     static_cast<std::uint32_t>(layout), buffer.raw(), offset,
                                     count));
  }

  /// A new handle to the device buffer of the states (`n_states * kRngStateBytes`
  /// bytes), for your own kernels: list its sync object as written by a launch that
  /// draws. The returned Buffer owns only that handle; the generator keeps its
  /// states (which outlive the generator while the Buffer lives).
  Result<Buffer> states(std::nothrow_t) const {
    sluice_buffer_t b{};
    if (sluice_error_t* e = sluice_rng_states(h(), &b)) return Error::adopt(e);
    return Buffer::adopt(b);
  }

  /// Copies the states into `checkpoint`, in order on `stream` after every earlier
  /// draw (a device-to-device copy; the host does not wait). Allowed during a
  /// capture: each replay of the graph refreshes the checkpoint. invalid_argument
  /// when the state counts differ.
  Result<void> save(std::nothrow_t, StreamRef stream, RngCheckpointRef checkpoint) const;

  /// Copies the states of `checkpoint` into the generator, in order on `stream`,
  /// and takes its seed. invalid_argument when the state counts differ.
  Result<void> restore(std::nothrow_t, StreamRef stream, RngCheckpointRef checkpoint) const;

#if SLUICE_CPP_EXCEPTIONS
  RngInfo info() const { return info(std::nothrow).value(); }
  std::size_t n_states() const { return info().n_states; }
  std::uint64_t seed() const { return info().seed; }
  void generate(StreamRef stream, RngDistribution dist, RngLayout layout, BufferRef buffer,
                std::size_t offset, std::size_t count) const {
    generate(std::nothrow, stream, dist, layout, buffer, offset, count).value();
  }
  Buffer states() const { return states(std::nothrow).value(); }
  void save(StreamRef stream, RngCheckpointRef checkpoint) const;
  void restore(StreamRef stream, RngCheckpointRef checkpoint) const;
#endif

 private:
  sluice_rng_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

/// The operations of a checkpoint, shared by RngCheckpoint and RngCheckpointRef.
template <class Self>
class RngCheckpointApi {
 public:
  Result<RngInfo> info(std::nothrow_t) const {
    RngInfo i;
    if (sluice_error_t* e = sluice_rng_checkpoint_info(h(), &i.n_states, &i.seed)) {
      return Error::adopt(e);
    }
    return i;
  }

  /// The size in bytes of serialize()'s output.
  Result<std::size_t> serialized_size(std::nothrow_t) const {
    std::size_t n = 0;
    return detail::check(sluice_rng_checkpoint_serialize(h(), nullptr, 0, &n), n);
  }

  /// Writes the serialized checkpoint into `[out, out + capacity)` and returns its
  /// size; out_of_range (nothing written) when `capacity` is smaller than that.
  /// One bulk device-to-host copy that waits for the last save into the checkpoint,
  /// not for later work on the save's stream; blocks until the bytes are written.
  Result<std::size_t> serialize_into(std::nothrow_t, void* out, std::size_t capacity) const {
    std::size_t n = 0;
    // A non-null pointer even for capacity 0, so that the C call checks the
    // capacity instead of only reporting the size; NULL holds no bytes.
    std::uint8_t none = 0;
    std::uint8_t* p = out ? static_cast<std::uint8_t*>(out) : &none;
    std::size_t cap = out ? capacity : 0;
    return detail::check(sluice_rng_checkpoint_serialize(h(), p, cap, &n), n);
  }

  /// serialize_into() over a writable contiguous container of trivially copyable
  /// elements (std::vector<std::uint8_t>, std::array, a span).
  template <class C, class = detail::if_mutable_contiguous<C>>
  Result<std::size_t> serialize_into(std::nothrow_t, C& out) const {
    return serialize_into(std::nothrow, static_cast<void*>(std::data(out)),
                          std::size(out) * sizeof(*std::data(out)));
  }

  /// The checkpoint as a versioned byte string: magic `SLRNGCK\0`, format version,
  /// algorithm, n_states, seed, the states and a CRC32C (the size query, then the
  /// copy).
  Result<std::vector<std::uint8_t>> serialize(std::nothrow_t) const {
    Result<std::size_t> n = serialized_size(std::nothrow);
    if (!n) return n.error();
    std::vector<std::uint8_t> out(*n);
    Result<std::size_t> w = serialize_into(std::nothrow, out);
    if (!w) return w.error();
    out.resize(*w);
    return out;
  }

#if SLUICE_CPP_EXCEPTIONS
  RngInfo info() const { return info(std::nothrow).value(); }
  std::size_t n_states() const { return info().n_states; }
  std::uint64_t seed() const { return info().seed; }
  std::size_t serialized_size() const { return serialized_size(std::nothrow).value(); }
  std::size_t serialize_into(void* out, std::size_t capacity) const {
    return serialize_into(std::nothrow, out, capacity).value();
  }
  template <class C, class = detail::if_mutable_contiguous<C>>
  std::size_t serialize_into(C& out) const {
    return serialize_into(std::nothrow, out).value();
  }
  std::vector<std::uint8_t> serialize() const { return serialize(std::nothrow).value(); }
#endif

 private:
  sluice_rng_checkpoint_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of a generator handle.
class RngRef : public detail::RngApi<RngRef>, public detail::View<sluice_rng_t> {
 public:
  using View::View;
};

/// A non-owning view of a checkpoint handle.
class RngCheckpointRef : public detail::RngCheckpointApi<RngCheckpointRef>,
                         public detail::View<sluice_rng_checkpoint_t> {
 public:
  using View::View;
};

/// A generator handle (destroyed by the destructor; the states are freed in stream
/// order after every draw, save and restore that uses them). Move-only.
class Rng : public detail::RngApi<Rng>,
            public detail::Owner<Rng, sluice_rng_t, sluice_rng_destroy, RngRef> {
 public:
  /// `n_states` states with `seed` on the device of `stream`, allocated and
  /// initialised in order on `stream` (no host sync). invalid_argument for 0
  /// states, out_of_range when they do not fit, capture_unsupported during a
  /// capture (which then fails): make generators before capturing. The returned Rng
  /// owns the new handle.
  static Result<Rng> create(std::nothrow_t, StreamRef stream, std::uint64_t seed,
                            std::size_t n_states) {
    sluice_rng_t r{};
    if (sluice_error_t* e = sluice_rng_create(stream.raw(), seed, n_states, &r)) {
      return Error::adopt(e);
    }
    return adopt(r);
  }

#if SLUICE_CPP_EXCEPTIONS
  static Rng create(StreamRef stream, std::uint64_t seed, std::size_t n_states) {
    return create(std::nothrow, stream, seed, n_states).value();
  }
#endif
};

/// A checkpoint handle: a copy of a generator's states on the device (destroyed by
/// the destructor; its memory is freed after the copies that use it). Move-only.
class RngCheckpoint
    : public detail::RngCheckpointApi<RngCheckpoint>,
      public detail::Owner<RngCheckpoint, sluice_rng_checkpoint_t, sluice_rng_checkpoint_destroy,
                           RngCheckpointRef> {
 public:
  /// A checkpoint of `rng`'s states, allocated in order on `stream` and holding
  /// them as of this point on it (a first Rng::save). Not allowed during a capture (capture_unsupported, and
  /// the capture fails): make checkpoints first, then save into them in the capture.
  static Result<RngCheckpoint> create(std::nothrow_t, StreamRef stream, RngRef rng) {
    sluice_rng_checkpoint_t c{};
    if (sluice_error_t* e = sluice_rng_checkpoint_create(stream.raw(), rng.raw(), &c)) {
      return Error::adopt(e);
    }
    return adopt(c);
  }

  /// Reads bytes made by serialize() (in this process or another) onto `device`.
  /// Every field and the CRC32C are checked: a changed byte, a truncation, another
  /// format version or another algorithm gives ErrorCode::corrupt_data with a
  /// message, and no checkpoint. The bytes are only read during the call.
  static Result<RngCheckpoint> deserialize(std::nothrow_t, DeviceRef device, const void* data,
                                           std::size_t len) {
    sluice_rng_checkpoint_t c{};
    if (sluice_error_t* e = sluice_rng_checkpoint_deserialize(
            device.raw(), static_cast<const std::uint8_t*>(data), len, &c)) {
      return Error::adopt(e);
    }
    return adopt(c);
  }

  /// deserialize() from a contiguous container of trivially copyable elements
  /// (std::vector<std::uint8_t>, std::string, a span).
  template <class C, class = detail::if_contiguous<const C>>
  static Result<RngCheckpoint> deserialize(std::nothrow_t, DeviceRef device, const C& bytes) {
    return deserialize(std::nothrow, device, static_cast<const void*>(std::data(bytes)),
                       std::size(bytes) * sizeof(*std::data(bytes)));
  }

#if SLUICE_CPP_EXCEPTIONS
  static RngCheckpoint create(StreamRef stream, RngRef rng) {
    return create(std::nothrow, stream, rng).value();
  }
  static RngCheckpoint deserialize(DeviceRef device, const void* data, std::size_t len) {
    return deserialize(std::nothrow, device, data, len).value();
  }
  template <class C, class = detail::if_contiguous<const C>>
  static RngCheckpoint deserialize(DeviceRef device, const C& bytes) {
    return deserialize(std::nothrow, device, bytes).value();
  }
#endif
};

namespace detail {

template <class Self>
Result<void> RngApi<Self>::save(std::nothrow_t, StreamRef stream,
                                RngCheckpointRef checkpoint) const {
  return check(sluice_rng_save(stream.raw(), h(), checkpoint.raw()));
}

template <class Self>
Result<void> RngApi<Self>::restore(std::nothrow_t, StreamRef stream,
                                   RngCheckpointRef checkpoint) const {
  return check(sluice_rng_restore(stream.raw(), h(), checkpoint.raw()));
}

#if SLUICE_CPP_EXCEPTIONS
template <class Self>
void RngApi<Self>::save(StreamRef stream, RngCheckpointRef checkpoint) const {
  save(std::nothrow, stream, checkpoint).value();
}

template <class Self>
void RngApi<Self>::restore(StreamRef stream, RngCheckpointRef checkpoint) const {
  restore(std::nothrow, stream, checkpoint).value();
}
#endif

}  // namespace detail

}  // namespace sluice

#endif  // SLUICE_CPP_RNG_HPP

//! The checkpointable RNG: generators, draws, saves, restores and checkpoints.

use super::*;
use crate::rng::{Distribution, Layout, Rng, RngCheckpoint};

/// A generator: `n` per-sample Philox4x32-10 states in device memory. State `i`
/// starts as cuRAND's `curand_init(seed, i, 0, &s)`, and every draw equals
/// cuRAND's. Each state is a `curandStatePhilox4_32_10_t` (64 bytes), so a user
/// kernel may draw from them with `include/sluice/rng.cuh` or cuRAND's device API
/// (`sluice_rng_states`). Thread safety: may be used from any thread at once; the
/// draws themselves are ordered by the streams, as for any buffer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_rng_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// A copy of a generator's states, on the device; filled by `sluice_rng_save` or
/// `sluice_rng_checkpoint_deserialize`. Thread safety: may be used from any thread.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_rng_checkpoint_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// Makes a generator of `n_states` states with `seed` on the device of `stream`:
/// the states' memory is allocated and initialised in order on `stream` (no host
/// sync). Errors: `SLUICE_ERROR_INVALID_ARGUMENT` for 0 states;
/// `SLUICE_ERROR_OUT_OF_RANGE` when the states do not fit; during a capture, the
/// allocation is refused (`SLUICE_ERROR_CAPTURE_UNSUPPORTED`) and the capture fails:
/// make generators and checkpoints before capturing.
/// Ownership: the caller destroys the new handle with `sluice_rng_destroy`.
#[no_mangle]
pub extern "C" fn sluice_rng_create(
    stream: sluice_stream_t,
    seed: u64,
    n_states: usize,
    rng_out: *mut sluice_rng_t,
) -> *mut sluice_error_t {
    boundary("sluice_rng_create", || {
        out_new(rng_out, "rng_out", || {
            Rng::create(&get(stream)?, seed, n_states)
        })
    })
}

/// Destroys a generator handle. Its states are freed in stream order after every
/// draw, save and restore that uses them.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `rng`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_rng_destroy(rng: sluice_rng_t) -> *mut sluice_error_t {
    boundary("sluice_rng_destroy", || remove(rng).map(drop))
}

/// Writes the number of states and the seed (of creation, or of the checkpoint
/// restored last). Either pointer may be NULL.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `rng`).
#[no_mangle]
pub extern "C" fn sluice_rng_info(
    rng: sluice_rng_t,
    n_states_out: *mut usize,
    seed_out: *mut u64,
) -> *mut sluice_error_t {
    boundary("sluice_rng_info", || {
        let r = get(rng)?;
        if !n_states_out.is_null() {
            write_out(n_states_out, r.n_states());
        }
        if !seed_out.is_null() {
            write_out(seed_out, r.seed());
        }
        Ok(())
    })
}

/// Draws `count` values from every state into `buffer` at `offset` (a device
/// buffer; the offset a multiple of 4): `n_states * count` 32-bit words, draw `j`
/// of state `i` at `SLUICE_RNG_LAYOUT_SAMPLE_MAJOR`: `j * n_states + i`, or
/// `SLUICE_RNG_LAYOUT_STATE_MAJOR`: `i * count + j`. `distribution` is
/// `SLUICE_RNG_U32` (`curand`), `SLUICE_RNG_UNIFORM` (`curand_uniform`, floats) or
/// `SLUICE_RNG_NORMAL` (`curand_normal`, floats). One tracked op on `stream` that
/// writes the states and the buffer; it advances the states on the device, so a
/// captured draw replays as a new draw each time. Errors: `SLUICE_ERROR_OUT_OF_RANGE`
/// when the output does not fit; `SLUICE_ERROR_INVALID_ARGUMENT` for an unknown
/// distribution or layout, a misaligned offset, a buffer that is not device memory
/// (its own or foreign, `sluice_buffer_wrap_device` or DLPack), or an output range
/// that overlaps the generator's states.
#[no_mangle]
pub extern "C" fn sluice_rng_generate(
    stream: sluice_stream_t,
    rng: sluice_rng_t,
    distribution: u32,
    layout: u32,
    buffer: sluice_buffer_t,
    offset: usize,
    count: usize,
) -> *mut sluice_error_t {
    boundary("sluice_rng_generate", || {
        let dist = Distribution::from_u32(distribution).ok_or_else(|| {
            Error::invalid_argument(format!(
                "distribution {distribution} is not one of SLUICE_RNG_U32, _UNIFORM, _NORMAL"
            ))
        })?;
        let layout = Layout::from_u32(layout).ok_or_else(|| {
            Error::invalid_argument(format!(
                "layout {layout} is not one of SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, _STATE_MAJOR"
            ))
        })?;
        let pin = crate::epoch::pin();
        let s = pinned(&pin, stream)?;
        let r = pinned(&pin, rng)?;
        let b = pinned(&pin, buffer)?;
        r.generate(s, dist, b, offset, count, layout)
    })
}

/// Writes a new handle to the buffer of the states (`n_states * 64` bytes, one
/// `sluice_rng_state` of `include/sluice/rng.cuh` each), for user kernels. A kernel
/// that draws must list the buffer's sync object (`sluice_buffer_sync`) as written.
/// Ownership: the caller frees the new handle with `sluice_buffer_free`; the
/// generator keeps its states.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`buffer_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `rng`).
#[no_mangle]
pub extern "C" fn sluice_rng_states(
    rng: sluice_rng_t,
    buffer_out: *mut sluice_buffer_t,
) -> *mut sluice_error_t {
    boundary("sluice_rng_states", || {
        out_new(buffer_out, "buffer_out", || Ok(get(rng)?.states().clone()))
    })
}

/// Makes a checkpoint of `rng`'s states, allocated in order on `stream` and holding
/// the states as of this point on it (a first `sluice_rng_save`): never uninitialised.
/// Not allowed during capture (`SLUICE_ERROR_CAPTURE_UNSUPPORTED`, and the capture
/// fails): make checkpoints first, then save into them.
/// Ownership: the caller destroys it with `sluice_rng_checkpoint_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`checkpoint_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`, `rng`).
#[no_mangle]
pub extern "C" fn sluice_rng_checkpoint_create(
    stream: sluice_stream_t,
    rng: sluice_rng_t,
    checkpoint_out: *mut sluice_rng_checkpoint_t,
) -> *mut sluice_error_t {
    boundary("sluice_rng_checkpoint_create", || {
        out_new(checkpoint_out, "checkpoint_out", || {
            RngCheckpoint::create(&get(stream)?, &*get(rng)?)
        })
    })
}

/// Destroys a checkpoint handle; its memory is freed after the copies that use it.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `checkpoint`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_rng_checkpoint_destroy(
    checkpoint: sluice_rng_checkpoint_t,
) -> *mut sluice_error_t {
    boundary("sluice_rng_checkpoint_destroy", || {
        remove(checkpoint).map(drop)
    })
}

/// Writes the number of states and the seed of a checkpoint: the seed of the
/// generator saved last (by call order), made the states' own key by
/// `sluice_rng_checkpoint_serialize` (a save replayed in a graph may have written
/// another generator's states since). Either pointer may be NULL.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `checkpoint`).
#[no_mangle]
pub extern "C" fn sluice_rng_checkpoint_info(
    checkpoint: sluice_rng_checkpoint_t,
    n_states_out: *mut usize,
    seed_out: *mut u64,
) -> *mut sluice_error_t {
    boundary("sluice_rng_checkpoint_info", || {
        let c = get(checkpoint)?;
        if !n_states_out.is_null() {
            write_out(n_states_out, c.n_states());
        }
        if !seed_out.is_null() {
            write_out(seed_out, c.seed());
        }
        Ok(())
    })
}

/// Saves the generator's states into `checkpoint`: a device-to-device copy in order
/// on `stream`, after every earlier draw. It does not sync the host. Allowed during
/// capture: each replay of the graph refreshes the checkpoint. Errors:
/// `SLUICE_ERROR_INVALID_ARGUMENT` when the state counts differ.
#[no_mangle]
pub extern "C" fn sluice_rng_save(
    stream: sluice_stream_t,
    rng: sluice_rng_t,
    checkpoint: sluice_rng_checkpoint_t,
) -> *mut sluice_error_t {
    boundary("sluice_rng_save", || {
        let pin = crate::epoch::pin();
        let s = pinned(&pin, stream)?;
        pinned(&pin, rng)?.save(s, pinned(&pin, checkpoint)?)
    })
}

/// Restores the generator's states from `checkpoint`, in order on `stream`. Errors:
/// `SLUICE_ERROR_INVALID_ARGUMENT` when the state counts differ (the algorithm and
/// format were checked when the checkpoint was made or read).
#[no_mangle]
pub extern "C" fn sluice_rng_restore(
    stream: sluice_stream_t,
    rng: sluice_rng_t,
    checkpoint: sluice_rng_checkpoint_t,
) -> *mut sluice_error_t {
    boundary("sluice_rng_restore", || {
        let pin = crate::epoch::pin();
        let s = pinned(&pin, stream)?;
        pinned(&pin, rng)?.restore(s, pinned(&pin, checkpoint)?)
    })
}

/// Serializes a checkpoint into `out`, C style: `*len_out` is always set to the
/// size it needs; with `out` NULL that is all it does. Otherwise `capacity` must
/// be at least that size (else `SLUICE_ERROR_OUT_OF_RANGE`, nothing written).
/// The bytes: magic `SLRNGCK\0`, format version, algorithm, n_states, seed, the
/// states, and a CRC32C (`src/rng/checkpoint.rs`). The copies run on streams of the
/// library's own and wait for the last save into this checkpoint, not for later
/// work on the save's stream. Blocks until the bytes are written.
///
/// Pass page-locked memory for a direct copy: where `out` is pinned
/// (`cudaMallocHost`, `cuMemHostAlloc`, `sluice_buffer_alloc_pinned`) or registered
/// (`cudaHostRegister`, `sluice_buffer_register_host`), the states are copied straight
/// into it: on CUDA in one bulk copy, with the CRC32C computed by a kernel beside it
/// (within a few percent of one raw pinned copy). Pageable memory works too, but the
/// states come in pieces through pinned slots of the library's (cached per device,
/// 16 MiB at most), with one more host copy, checksummed on host threads.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`len_out` NULL); `SLUICE_ERROR_INVALID_HANDLE`
/// (a stale `checkpoint`); `SLUICE_ERROR_OUT_OF_RANGE` (`capacity` below the serialized
/// length).
#[no_mangle]
pub extern "C" fn sluice_rng_checkpoint_serialize(
    checkpoint: sluice_rng_checkpoint_t,
    out: *mut u8,
    capacity: usize,
    len_out: *mut usize,
) -> *mut sluice_error_t {
    boundary("sluice_rng_checkpoint_serialize", || {
        let len_out = out_ptr(len_out, "len_out")?;
        let c = get(checkpoint)?;
        let need = c.serialized_len();
        write_out(len_out, need);
        if out.is_null() {
            return Ok(());
        }
        if capacity < need {
            return Err(Error::out_of_range(format!(
                "the checkpoint serializes to {need} bytes; capacity is {capacity}"
            )));
        }
        c.serialize_into(slice_out(out, need, "out")?)
    })
}

/// Reads a serialized checkpoint onto `device` (uploaded on a stream of the
/// library's own). Every field and the CRC32C are checked: a changed byte, a
/// truncation, another format version or another algorithm gives
/// `SLUICE_ERROR_CORRUPT_DATA` with a message, and no checkpoint.
/// Ownership: the caller destroys it with `sluice_rng_checkpoint_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`bytes` NULL with `len` over 0, or
/// `checkpoint_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`); `SLUICE_ERROR_CORRUPT_DATA` (bytes
/// that fail the checks: magic, version, length, CRC).
#[no_mangle]
pub extern "C" fn sluice_rng_checkpoint_deserialize(
    device: sluice_device_t,
    bytes: *const u8,
    len: usize,
    checkpoint_out: *mut sluice_rng_checkpoint_t,
) -> *mut sluice_error_t {
    boundary("sluice_rng_checkpoint_deserialize", || {
        out_new(checkpoint_out, "checkpoint_out", || {
            let d = get(device)?;
            RngCheckpoint::deserialize(&d, slice_in(bytes, len, "bytes")?)
        })
    })
}

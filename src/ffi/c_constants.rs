//! The constants of the enums C sees. Generated from their `c_enum!` lists by
//! `scripts/gen-header.sh` (examples/c_constants.rs); do not edit.

/// The host backend: CPU worker threads with CUDA stream semantics.
pub const SLUICE_BACKEND_HOST: u32 = 1;

/// The CUDA backend (driver API).
pub const SLUICE_BACKEND_CUDA: u32 = 2;

/// Capture mode: relaxed (the default). Safe when goroutines or other threads move
/// between OS threads, since it ties nothing to the capturing thread.
pub const SLUICE_CAPTURE_RELAXED: u32 = 0;

/// Capture mode: thread-local (CUDA's `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`).
/// The capture ends only on the thread that began it, and that thread's
/// unsafe calls (a synchronize, an allocation) fail while it lasts.
pub const SLUICE_CAPTURE_THREAD_LOCAL: u32 = 1;

/// Capture mode: global (CUDA's `CU_STREAM_CAPTURE_MODE_GLOBAL`). As
/// thread-local, and while it lasts every thread's unsafe calls fail
/// (`SLUICE_ERROR_CAPTURE_FAILED`), which may also invalidate the capture.
pub const SLUICE_CAPTURE_GLOBAL: u32 = 2;

/// A Rust panic was caught at the ABI boundary (a bug in sluice).
pub const SLUICE_ERROR_PANIC: u32 = 1;

/// A required pointer argument was NULL.
pub const SLUICE_ERROR_NULL_ARGUMENT: u32 = 2;

/// An argument had an invalid value (bad flag, zero size, unknown code).
pub const SLUICE_ERROR_INVALID_ARGUMENT: u32 = 3;

/// A handle was stale, forged, of the wrong type, or already destroyed.
pub const SLUICE_ERROR_INVALID_HANDLE: u32 = 4;

/// An offset or length fell outside a buffer, or arithmetic overflowed.
pub const SLUICE_ERROR_OUT_OF_RANGE: u32 = 5;

/// The operation is not supported by this backend.
pub const SLUICE_ERROR_UNSUPPORTED: u32 = 6;

/// No usable CUDA driver was found.
pub const SLUICE_ERROR_NO_DRIVER: u32 = 7;

/// The requested device does not exist.
pub const SLUICE_ERROR_NO_DEVICE: u32 = 8;

/// The CUDA driver returned an error; see `sluice_error_driver_code`.
pub const SLUICE_ERROR_DRIVER: u32 = 9;

/// An allocation failed.
pub const SLUICE_ERROR_OUT_OF_MEMORY: u32 = 10;

/// The operation may not run while its stream captures a graph.
pub const SLUICE_ERROR_CAPTURE_UNSUPPORTED: u32 = 11;

/// A graph capture failed or was invalidated.
pub const SLUICE_ERROR_CAPTURE_FAILED: u32 = 12;

/// Work on the stream failed asynchronously (a device fault).
pub const SLUICE_ERROR_DEVICE_FAULT: u32 = 13;

/// A host callback reported a failure or panicked.
pub const SLUICE_ERROR_CALLBACK_FAILED: u32 = 14;

/// Loading a module failed; the message holds the JIT log.
pub const SLUICE_ERROR_MODULE_LOAD: u32 = 15;

/// A named item (for example a kernel) was not found.
pub const SLUICE_ERROR_NOT_FOUND: u32 = 16;

/// Objects of different devices were mixed in one call.
pub const SLUICE_ERROR_WRONG_DEVICE: u32 = 17;

/// The object is in a state that does not allow this call.
pub const SLUICE_ERROR_INVALID_STATE: u32 = 18;

/// The input has ended and every batch was consumed (the prefetcher's `next`).
pub const SLUICE_ERROR_END_OF_DATA: u32 = 19;

/// A blocking call gave up after its timeout.
pub const SLUICE_ERROR_TIMEOUT: u32 = 20;

/// Serialized data failed its checks (magic, version, size, CRC).
pub const SLUICE_ERROR_CORRUPT_DATA: u32 = 21;

/// Compiling kernel source failed (`sluice_module_compile`); the message holds
/// the compiler's log.
pub const SLUICE_ERROR_COMPILE: u32 = 22;

/// Buffer kind: device memory from the driver's stream-ordered pool.
pub const SLUICE_BUFFER_DEVICE: u32 = 1;

/// Buffer kind: pinned host memory from the device's caching pool.
pub const SLUICE_BUFFER_PINNED: u32 = 2;

/// Buffer kind: caller-owned host memory registered with the device.
pub const SLUICE_BUFFER_REGISTERED: u32 = 3;

/// Buffer kind: device memory owned by someone else (`sluice_buffer_wrap_device`,
/// or a DLPack import), released by its owner's function after its last use.
pub const SLUICE_BUFFER_FOREIGN: u32 = 4;

/// Engine mode: ops only enqueue work (the default).
pub const SLUICE_ENGINE_ASYNC: u32 = 0;

/// Engine mode: the host synchronises the stream after every tracked op (debugging).
pub const SLUICE_ENGINE_SYNC: u32 = 1;

/// `sluice_graph_exec_update` updated the executable graph in place.
pub const SLUICE_GRAPH_UPDATE_IN_PLACE: u32 = 0;

/// `sluice_graph_exec_update` re-instantiated because the update was refused.
pub const SLUICE_GRAPH_UPDATE_REINSTANTIATED: u32 = 1;

/// Log level: nothing is logged (the default).
pub const SLUICE_LOG_OFF: u32 = 0;

/// Log level: errors only.
pub const SLUICE_LOG_ERROR: u32 = 1;

/// Log level: errors and warnings (a capture aborted by an operation).
pub const SLUICE_LOG_WARN: u32 = 2;

/// Log level: also notable events (graph update fallbacks, cache evictions, traces).
pub const SLUICE_LOG_INFO: u32 = 3;

/// Log level: everything (stale handles, blocks the caches gave back).
pub const SLUICE_LOG_DEBUG: u32 = 4;

/// RNG distribution: raw 32-bit outputs, `curand`.
pub const SLUICE_RNG_U32: u32 = 1;

/// RNG distribution: floats in (0, 1], `curand_uniform`.
pub const SLUICE_RNG_UNIFORM: u32 = 2;

/// RNG distribution: standard normal floats, `curand_normal` (drawn in pairs).
pub const SLUICE_RNG_NORMAL: u32 = 3;

/// RNG layout: `out[j * n + i]`, each draw of every state together (coalesced).
pub const SLUICE_RNG_LAYOUT_SAMPLE_MAJOR: u32 = 1;

/// RNG layout: `out[i * count + j]`, each state's draws together.
pub const SLUICE_RNG_LAYOUT_STATE_MAJOR: u32 = 2;

/// DLPack format: `DLManagedTensorVersioned` (DLPack 1.x; what `__dlpack__`
/// gives as a "dltensor_versioned" capsule).
pub const SLUICE_DLPACK_VERSIONED: u32 = 1;

/// DLPack format: `DLManagedTensor` (DLPack 0.x; a "dltensor" capsule), for
/// consumers and producers that predate 1.0.
pub const SLUICE_DLPACK_UNVERSIONED: u32 = 2;

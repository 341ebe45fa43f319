//! DLPack import and export.

use super::*;
use crate::dlpack::{DLDataType, DlpackFormat, TensorDesc};
use crate::error::{Error, ErrorCode};
use std::ffi::c_void;

/// A tensor's element type and row-major shape, as DLPack describes it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_tensor_desc_t {
    /// `DLDataTypeCode`: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool, ...
    pub dtype_code: u8,
    /// Bits per lane; with `dtype_lanes`, a whole number of bytes.
    pub dtype_bits: u8,
    /// Lanes per element (1 for scalars).
    pub dtype_lanes: u16,
    /// Number of dimensions (0 for a scalar).
    pub ndim: i32,
    /// `ndim` sizes, outermost first. As an output: valid while the buffer handle lives.
    pub shape: *const i64,
    /// 1 when the producer marked the tensor read-only (sluice does not enforce it).
    pub read_only: u32,
}

fn format(v: u32) -> Result<bool> {
    match DlpackFormat::from_u32(v) {
        Some(DlpackFormat::Versioned) => Ok(true),
        Some(DlpackFormat::Unversioned) => Ok(false),
        None => Err(Error::invalid_argument(format!(
            "format {v} is not a SLUICE_DLPACK_* value"
        ))),
    }
}

/// Imports a DLPack managed tensor as a buffer (a foreign buffer: `SLUICE_BUFFER_FOREIGN`).
/// `tensor` points to a `DLManagedTensorVersioned` (`SLUICE_DLPACK_VERSIONED`, 1.x)
/// or a `DLManagedTensor` (`SLUICE_DLPACK_UNVERSIONED`, 0.x). It must be compact
/// and row-major (NULL strides, or strides that say so), of whole-byte elements, not
/// empty, and on this device: `kDLCUDA` (or `kDLCUDAManaged`) with the device's
/// ordinal on cuda, `kDLCPU` on host. Its shape and dtype are read back with
/// `sluice_buffer_tensor`.
///
/// Streams (the DLPack exchange): pass as `ready_on` the stream you named to the
/// producer (`__dlpack__(stream=...)`); the producer made it wait for its work, and
/// the buffer's first use on any other stream waits for `ready_on` on the device,
/// and so do host waits on its sync object and its deleter.
/// `{0}` when the data is ready already. The buffer has a sync object of its own:
/// uses of the same memory through another buffer (the one a round trip of
/// `sluice_buffer_to_dlpack` started from, say) are not ordered against it; order
/// them yourself (a foreign op on both objects, or an event).
///
/// Ownership: on success the buffer owns the tensor and calls its deleter once,
/// after the buffer is freed and its last use completed on the device (as for
/// `sluice_buffer_wrap_device`'s `release_fn`); the caller owns the new handle and
/// frees it with `sluice_buffer_free`. On error the caller still owns the tensor.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`tensor`, `buffer_out`, its data, or its
/// shape with `ndim` > 0, NULL); `SLUICE_ERROR_INVALID_ARGUMENT` (an unknown
/// `format`, a negative `ndim` or dimension, a strided layout, a sub-byte dtype, an
/// empty tensor, or on cuda memory the driver does not know);
/// `SLUICE_ERROR_UNSUPPORTED` (a major version other than 1);
/// `SLUICE_ERROR_WRONG_DEVICE` (another device type, ordinal, or a `ready_on` of
/// another device); `SLUICE_ERROR_OUT_OF_RANGE` (a size that overflows);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale device or stream);
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (`ready_on` is capturing a graph).
#[no_mangle]
pub extern "C" fn sluice_buffer_from_dlpack(
    device: sluice_device_t,
    tensor: *mut c_void,
    format: u32,
    ready_on: sluice_stream_t,
    buffer_out: *mut sluice_buffer_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_from_dlpack", || {
        out_new(buffer_out, "buffer_out", || {
            let versioned = self::format(format)?;
            let d = get(device)?;
            let s = match ready_on.bits {
                0 => None,
                _ => Some(get(ready_on).map_err(|e| e.context("ready_on"))?),
            };
            // SAFETY: the caller promises a valid managed tensor of that format.
            unsafe { crate::dlpack::import(&d, tensor, versioned, s.as_ref()) }
        })
    })
}

/// Exports `buffer` as a DLPack managed tensor, written to `*tensor_out`: a
/// `DLManagedTensorVersioned*` (`SLUICE_DLPACK_VERSIONED`, version 1.1) or a
/// `DLManagedTensor*` (`SLUICE_DLPACK_UNVERSIONED`). Its device is `kDLCPU` on
/// host; on cuda `kDLCUDA` for device and foreign buffers and `kDLCUDAHost` for
/// pinned and registered ones. Its dtype and shape are `desc` (NULL: the buffer's
/// own, from a DLPack import, else 1-D `uint8` of the buffer's size); `desc`'s
/// bytes must fit in the buffer, and its `shape` is copied.
///
/// Streams (the DLPack exchange): with a `consumer` stream (the one the consumer
/// named, wrapped with `sluice_stream_wrap_external` if it is not sluice's), that
/// stream waits on the device for every pending write and read of the buffer;
/// nothing blocks the host. With `{0}`, the call blocks until that work completed
/// (what a CPU consumer needs). When the consumer calls the deleter, the consumer
/// stream's end at that moment becomes a use of the buffer, so a later free waits
/// for what the consumer enqueued before deleting.
///
/// Ownership: the tensor holds a reference to the buffer (and to `consumer`) until
/// its deleter runs; the buffer handle may be freed before that. Call the deleter
/// exactly once (every DLPack consumer does).
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`tensor_out` NULL, or `desc->shape` NULL
/// with `ndim` > 0); `SLUICE_ERROR_INVALID_ARGUMENT` (an unknown `format`, a
/// negative `ndim` or dimension, a sub-byte dtype); `SLUICE_ERROR_OUT_OF_RANGE`
/// (`desc` needs more bytes than the buffer has); `SLUICE_ERROR_WRONG_DEVICE`
/// (`consumer` on another device); `SLUICE_ERROR_INVALID_HANDLE` (a stale buffer or
/// stream); `SLUICE_ERROR_CAPTURE_UNSUPPORTED` (no consumer while a capture uses
/// the buffer).
#[no_mangle]
pub extern "C" fn sluice_buffer_to_dlpack(
    buffer: sluice_buffer_t,
    consumer: sluice_stream_t,
    format: u32,
    desc: *const sluice_tensor_desc_t,
    tensor_out: *mut *mut c_void,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_to_dlpack", || {
        let out = out_ptr(tensor_out, "tensor_out")?;
        let versioned = self::format(format)?;
        let desc = if desc.is_null() {
            None
        } else {
            // SAFETY: non-NULL; the caller promises a valid struct.
            let d = unsafe { *desc };
            if d.ndim < 0 {
                return Err(Error::invalid_argument(format!("desc: ndim is {}", d.ndim)));
            }
            let shape = slice_in(d.shape, d.ndim as usize, "desc->shape")?;
            Some(TensorDesc {
                dtype: DLDataType {
                    code: d.dtype_code,
                    bits: d.dtype_bits,
                    lanes: d.dtype_lanes,
                },
                shape: shape.into(),
                read_only: d.read_only != 0,
            })
        };
        let b = get(buffer)?;
        let s = match consumer.bits {
            0 => None,
            _ => Some(get(consumer).map_err(|e| e.context("consumer"))?),
        };
        let t = crate::dlpack::export(&b, s.as_ref(), desc, versioned)?;
        write_out(out, t);
        Ok(())
    })
}

/// Writes the dtype and shape a buffer was imported with (`sluice_buffer_from_dlpack`).
/// `desc_out->shape` stays valid while the buffer handle lives.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`desc_out` NULL); `SLUICE_ERROR_NOT_FOUND`
/// (the buffer did not come from DLPack: it has no dtype or shape);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale buffer).
#[no_mangle]
pub extern "C" fn sluice_buffer_tensor(
    buffer: sluice_buffer_t,
    desc_out: *mut sluice_tensor_desc_t,
) -> *mut sluice_error_t {
    boundary("sluice_buffer_tensor", || {
        out_value(desc_out, "desc_out", || {
            with(buffer, |b| {
                let t = b.tensor().ok_or_else(|| {
                    Error::new(
                        ErrorCode::NotFound,
                        format!("{b:?} has no dtype or shape: it did not come from DLPack"),
                    )
                })?;
                Ok(sluice_tensor_desc_t {
                    dtype_code: t.dtype.code,
                    dtype_bits: t.dtype.bits,
                    dtype_lanes: t.dtype.lanes,
                    ndim: t.shape.len() as i32,
                    shape: t.shape.as_ptr(),
                    read_only: t.read_only as u32,
                })
            })
        })
    })
}

/// A PyCapsule destructor for the DLPack capsules a Python binding makes over
/// `sluice_buffer_to_dlpack`'s tensors (`PyCapsule_New(tensor, name, this)`): a
/// capsule still named `dltensor_versioned` or `dltensor` was not consumed, so its
/// managed tensor's deleter is called; a consumer renames what it takes. Native
/// code, because CPython may destroy a capsule while an exception is pending, when
/// a destructor written in Python (a ctypes callback) cannot run: the pending
/// exception is kept. It calls the CPython C API, found in the process on first
/// use; where none is loaded it does nothing. Call it only as CPython calls
/// destructors: with the GIL held, on a live capsule.
///
/// Errors: none.
#[no_mangle]
pub extern "C" fn sluice_dlpack_capsule_destructor(capsule: *mut c_void) {
    // SAFETY: the caller's contract (CPython's, for a destructor).
    boundary_or((), || unsafe {
        crate::pycapsule::destroy_dlpack_capsule(capsule)
    })
}

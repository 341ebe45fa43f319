//! DLPack: importing a tensor of another framework as a buffer, and exporting a
//! buffer as a tensor, with the stream exchange of the protocol. The structs are
//! the layout of the official `dlpack.h` (1.x, and the unversioned 0.x
//! `DLManagedTensor` that older consumers still ask for), written out here rather
//! than taken from a crate (`docs/decisions.md` says why).
//!
//! Ordering: an export names the consumer's stream, which waits on the device for
//! the buffer's writer and readers (the engine's waits); nothing blocks the host.
//! The deleter publishes the consumer stream's end as a use of the buffer, so
//! freeing it afterwards waits for what the consumer enqueued before deleting. An
//! import names the stream the producer ordered the tensor on; the first use on
//! another stream waits for it (the fresh-allocation rule).

use crate::backend::BackendKind;
use crate::c_enum::c_enum;
use crate::device::Device;
use crate::engine::{op_begin, op_end, Seen};
use crate::error::{Error, ErrorCode, Result};
use crate::memory::{Buffer, BufferKind, Release};
use crate::stream::Stream;
use crate::sync::{Access, ObjRef};
use crate::trace::OpKind;
use std::ffi::c_void;
use std::sync::Arc;

c_enum! {
    /// Which DLPack struct a pointer is, seen by C as `SLUICE_DLPACK_*`.
    pub enum DlpackFormat: "SLUICE_DLPACK_" {
        /// DLPack format: `DLManagedTensorVersioned` (DLPack 1.x; what `__dlpack__`
        /// gives as a "dltensor_versioned" capsule).
        Versioned = 1 => VERSIONED,
        /// DLPack format: `DLManagedTensor` (DLPack 0.x; a "dltensor" capsule), for
        /// consumers and producers that predate 1.0.
        Unversioned = 2 => UNVERSIONED,
    }
}

/// The DLPack version sluice writes (`DLPACK_MAJOR_VERSION`.`DLPACK_MINOR_VERSION`).
pub const DLPACK_VERSION: (u32, u32) = (1, 1);
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
pub(crate) const DLPACK_FLAG_READ_ONLY: u64 = 1;

/// `DLDeviceType` values sluice reads or writes.
pub(crate) const KDL_CPU: i32 = 1;
pub(crate) const KDL_CUDA: i32 = 2;
pub(crate) const KDL_CUDA_HOST: i32 = 3;
pub(crate) const KDL_CUDA_MANAGED: i32 = 13;

/// `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

/// `DLDevice` (`DLDeviceType` is a C enum: an `int`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

/// `DLDataType`: type code (`kDLInt` 0, `kDLUInt` 1, `kDLFloat` 2, `kDLBfloat` 4,
/// ...), bits per lane, lanes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// `DLManagedTensorVersioned` (DLPack 1.x).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

/// `DLManagedTensor` (DLPack 0.x, unversioned).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// A tensor's element type and shape, over a buffer's bytes (row-major, compact).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    pub dtype: DLDataType,
    pub shape: Box<[i64]>,
    pub read_only: bool,
}

impl TensorDesc {
    /// A 1-D tensor of `len` bytes (`uint8`): how a buffer exports by default.
    pub fn bytes(len: usize) -> TensorDesc {
        TensorDesc {
            dtype: DLDataType {
                code: 1,
                bits: 8,
                lanes: 1,
            },
            shape: Box::new([len as i64]),
            read_only: false,
        }
    }

    /// Bytes per element: whole bytes only (sub-byte types are refused).
    fn elem_bytes(&self) -> Result<u64> {
        let bits = u64::from(self.dtype.bits) * u64::from(self.dtype.lanes);
        if bits == 0 || bits % 8 != 0 {
            return Err(Error::invalid_argument(format!(
                "DLPack dtype (code {}, {} bits, {} lanes) is not a whole number of bytes",
                self.dtype.code, self.dtype.bits, self.dtype.lanes
            )));
        }
        Ok(bits / 8)
    }

    /// The number of bytes the tensor covers.
    pub fn byte_len(&self) -> Result<u64> {
        let mut n = self.elem_bytes()?;
        for &d in self.shape.iter() {
            let d = u64::try_from(d).map_err(|_| {
                Error::invalid_argument(format!("DLPack shape has a negative dimension ({d})"))
            })?;
            n = n
                .checked_mul(d)
                .ok_or_else(|| Error::out_of_range("DLPack shape overflows 64 bits"))?;
        }
        Ok(n)
    }
}

/// The DLPack device of a buffer: `kDLCPU` on the host backend; `kDLCUDA` for
/// device and foreign memory on cuda, `kDLCUDAHost` for pinned and registered
/// memory there.
pub fn device_of(buf: &Buffer) -> DLDevice {
    let dev = buf.device();
    match dev.kind() {
        BackendKind::Host => DLDevice {
            device_type: KDL_CPU,
            device_id: 0,
        },
        BackendKind::Cuda => DLDevice {
            device_type: match buf.kind {
                BufferKind::Device | BufferKind::Foreign => KDL_CUDA,
                BufferKind::Pinned | BufferKind::Registered => KDL_CUDA_HOST,
            },
            device_id: dev.ordinal() as i32,
        },
    }
}

/// A foreign pointer made sendable for its release (its owner vouches for it).
struct SendPtr<T>(*mut T);
// SAFETY: the DLPack contract lets the deleter be called from any thread.
unsafe impl<T> Send for SendPtr<T> {}

/// The release that calls a managed tensor's deleter (none without one).
fn deleter_release<T: 'static>(
    managed: *mut T,
    deleter: Option<unsafe extern "C" fn(*mut T)>,
) -> Option<Release> {
    let p = SendPtr(managed);
    deleter.map(|del| {
        Release::new(move || {
            let p = p;
            // SAFETY: the producer's deleter, called once with its own tensor.
            unsafe { del(p.0) }
        })
    })
}

/// Reads the tensor part of a managed tensor: where its bytes are and what they
/// are. Checks the device against `device`, and that the layout is compact.
///
/// # Safety
/// `t` must be a valid `DLTensor` whose `shape` and `strides` hold `ndim` entries.
unsafe fn read_tensor(device: &Device, t: &DLTensor, flags: u64) -> Result<(u64, TensorDesc)> {
    let want: &[i32] = match device.kind() {
        BackendKind::Host => &[KDL_CPU],
        BackendKind::Cuda => &[KDL_CUDA, KDL_CUDA_MANAGED],
    };
    if !want.contains(&t.device.device_type) {
        return Err(Error::new(
            ErrorCode::WrongDevice,
            format!(
                "DLPack tensor is on device type {} (id {}); a {} device takes device type {}",
                t.device.device_type,
                t.device.device_id,
                device.kind().name(),
                want.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            ),
        ));
    }
    if device.kind() == BackendKind::Cuda && t.device.device_id != device.ordinal() as i32 {
        return Err(Error::new(
            ErrorCode::WrongDevice,
            format!(
                "DLPack tensor is on CUDA device {}, not on device {}",
                t.device.device_id,
                device.ordinal()
            ),
        ));
    }
    if t.ndim < 0 {
        return Err(Error::invalid_argument(format!(
            "DLPack tensor has ndim {}",
            t.ndim
        )));
    }
    let ndim = t.ndim as usize;
    if ndim > 0 && t.shape.is_null() {
        return Err(Error::new(
            ErrorCode::NullArgument,
            "DLPack tensor's shape is NULL",
        ));
    }
    let shape: Box<[i64]> = if ndim == 0 {
        Box::new([])
    } else {
        // SAFETY: non-NULL with ndim entries (the caller's contract).
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }.into()
    };
    let desc = TensorDesc {
        dtype: t.dtype,
        shape,
        read_only: flags & DLPACK_FLAG_READ_ONLY != 0,
    };
    desc.byte_len()?;
    if !t.strides.is_null() && ndim > 0 {
        // SAFETY: as for shape.
        let strides = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        let mut expect: i64 = 1;
        for (&d, &s) in desc.shape.iter().zip(strides).rev() {
            if d != 1 && s != expect {
                return Err(Error::invalid_argument(format!(
                    "DLPack tensor is not compact and row-major (shape {:?}, strides {:?}); \
                     make it contiguous first",
                    desc.shape, strides
                )));
            }
            expect = expect.saturating_mul(d);
        }
    }
    if t.data.is_null() {
        return Err(Error::new(
            ErrorCode::NullArgument,
            "DLPack tensor's data is NULL",
        ));
    }
    let addr = (t.data as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| Error::out_of_range("DLPack data + byte_offset overflows"))?;
    Ok((addr, desc))
}

/// Imports a managed tensor as a buffer; on success the buffer owns it and calls
/// its deleter after its last use. On failure nothing is called and the caller
/// still owns the tensor.
///
/// # Safety
/// `managed` must point to a valid `DLManagedTensorVersioned` (`versioned`) or
/// `DLManagedTensor`, whose memory stays valid until its deleter is called.
pub unsafe fn import(
    device: &Arc<Device>,
    managed: *mut c_void,
    versioned: bool,
    ready_on: Option<&Arc<Stream>>,
) -> Result<Arc<Buffer>> {
    if managed.is_null() {
        return Err(Error::new(ErrorCode::NullArgument, "tensor is NULL"));
    }
    let (addr, desc, release) = if versioned {
        let m = managed.cast::<DLManagedTensorVersioned>();
        // SAFETY: the caller's contract.
        let mt = unsafe { &*m };
        if mt.version.major != 1 {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!(
                    "DLPack version {}.{} is not supported: sluice reads 1.x",
                    mt.version.major, mt.version.minor
                ),
            ));
        }
        // SAFETY: the caller's contract.
        let (addr, desc) = unsafe { read_tensor(device, &mt.dl_tensor, mt.flags)? };
        (addr, desc, deleter_release(m, mt.deleter))
    } else {
        let m = managed.cast::<DLManagedTensor>();
        // SAFETY: the caller's contract.
        let mt = unsafe { &*m };
        // SAFETY: the caller's contract.
        let (addr, desc) = unsafe { read_tensor(device, &mt.dl_tensor, 0)? };
        (addr, desc, deleter_release(m, mt.deleter))
    };
    let len = usize::try_from(desc.byte_len()?)
        .map_err(|_| Error::out_of_range("DLPack tensor is larger than the address space"))?;
    if len == 0 {
        return Err(Error::invalid_argument(format!(
            "DLPack tensor of shape {:?} is empty; a buffer needs at least one byte",
            desc.shape
        )));
    }
    Buffer::wrap_device(device, addr, len, release, ready_on, Some(desc)).map_err(|mut e| {
        // The caller keeps the tensor: make sure the release is not run.
        e.message = format!("DLPack import: {}", e.message);
        e
    })
}

/// What an exported tensor keeps alive: the buffer, and the consumer's stream.
/// `repr(C)` with the managed tensor first, so the deleter can find the rest.
#[repr(C)]
struct Exported<M> {
    managed: M,
    shape: Box<[i64]>,
    buf: Arc<Buffer>,
    consumer: Option<Arc<Stream>>,
}

/// The deleter of an exported tensor: publishes the consumer stream's end as a use
/// of the buffer, then drops the buffer's reference.
unsafe extern "C" fn deleter<M>(p: *mut M) {
    if p.is_null() {
        return;
    }
    crate::backend::enter_call();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: `p` is the first field of a boxed `Exported<M>` made by `export`,
        // deleted once (the DLPack contract).
        let ex = unsafe { Box::from_raw(p.cast::<Exported<M>>()) };
        if let Some(s) = &ex.consumer {
            let _ = consumer_use(s, &ex.buf);
        }
        drop(ex);
    }));
    crate::backend::leave_call();
}

/// A use of `buf` by foreign work on `stream`: the stream waits for the buffer's
/// writer and readers; with `publish`, its current end becomes the buffer's writer.
fn consumer_use(stream: &Stream, buf: &Buffer) -> Result<()> {
    let set = [Access::new(ObjRef::new(&buf.sync), true)];
    let mut seen = Seen::new();
    op_begin(
        stream,
        &set,
        OpKind::ForeignBegin(&"dlpack"),
        false,
        &mut seen,
    )?;
    op_end(stream, &set, &seen)
}

/// Exports `buf` as a DLPack managed tensor (`versioned`: 1.x, else 0.x). The
/// tensor is `desc` (its bytes must fit in the buffer), or the buffer's own
/// description, or 1-D `uint8`. With `consumer`, that stream waits on the device
/// for the buffer's pending work; without, the host waits for it before return.
/// The returned tensor owns a reference to the buffer until its deleter runs.
pub fn export(
    buf: &Arc<Buffer>,
    consumer: Option<&Arc<Stream>>,
    desc: Option<TensorDesc>,
    versioned: bool,
) -> Result<*mut c_void> {
    let desc = desc
        .or_else(|| buf.tensor().cloned())
        .unwrap_or_else(|| TensorDesc::bytes(buf.size));
    let len = desc.byte_len()?;
    if len > buf.size as u64 {
        return Err(Error::out_of_range(format!(
            "DLPack export: a tensor of shape {:?} needs {len} bytes, more than the {} of {:?}",
            desc.shape, buf.size, buf
        )));
    }
    let ndim = i32::try_from(desc.shape.len())
        .map_err(|_| Error::invalid_argument("DLPack export: too many dimensions"))?;
    match consumer {
        Some(s) => {
            buf.device()
                .same_device(s.device(), "DLPack consumer stream")?;
            consumer_use(s, buf)?;
        }
        None => buf.sync.wait_write()?,
    }
    let mut shape = desc.shape.clone();
    let tensor = DLTensor {
        data: buf.addr as *mut c_void,
        device: device_of(buf),
        ndim,
        dtype: desc.dtype,
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let consumer = consumer.cloned();
    let p = if versioned {
        let ex = Box::new(Exported {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion {
                    major: DLPACK_VERSION.0,
                    minor: DLPACK_VERSION.1,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(deleter::<DLManagedTensorVersioned>),
                flags: if desc.read_only {
                    DLPACK_FLAG_READ_ONLY
                } else {
                    0
                },
                dl_tensor: tensor,
            },
            shape,
            buf: buf.clone(),
            consumer,
        });
        let p = Box::into_raw(ex);
        // SAFETY: just allocated.
        unsafe { (*p).managed.manager_ctx = p.cast() };
        p.cast::<c_void>()
    } else {
        let ex = Box::new(Exported {
            managed: DLManagedTensor {
                dl_tensor: tensor,
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(deleter::<DLManagedTensor>),
            },
            shape,
            buf: buf.clone(),
            consumer,
        });
        let p = Box::into_raw(ex);
        // SAFETY: just allocated.
        unsafe { (*p).managed.manager_ctx = p.cast() };
        p.cast::<c_void>()
    };
    Ok(p)
}

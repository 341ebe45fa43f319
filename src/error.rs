//! Errors of the core. Codes are part of the C ABI: never renumber them.

use std::fmt;

/// Stable error codes. The numeric values are exported to C as `SLUICE_ERROR_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    /// A Rust panic was caught at the ABI boundary (a bug in sluice).
    Panic = 1,
    /// A required pointer argument was NULL.
    NullArgument = 2,
    /// An argument had an invalid value (bad flag, zero size, unknown code).
    InvalidArgument = 3,
    /// A handle was stale, forged, of the wrong type, or already destroyed.
    InvalidHandle = 4,
    /// An offset or length fell outside a buffer, or an arithmetic overflow.
    OutOfRange = 5,
    /// The operation is not supported by this backend.
    Unsupported = 6,
    /// No usable CUDA driver was found.
    NoDriver = 7,
    /// The requested device does not exist.
    NoDevice = 8,
    /// The CUDA driver returned an error (see the driver code).
    Driver = 9,
    /// An allocation failed.
    OutOfMemory = 10,
    /// The operation may not run while its stream is capturing a graph.
    CaptureUnsupported = 11,
    /// A graph capture failed or was invalidated.
    CaptureFailed = 12,
    /// Work on the stream failed asynchronously (a device fault).
    DeviceFault = 13,
    /// A host callback reported a failure or panicked.
    CallbackFailed = 14,
    /// Loading a module failed (the message holds the JIT log).
    ModuleLoad = 15,
    /// A named item (for example a kernel function) was not found.
    NotFound = 16,
    /// Objects from different devices were mixed in one call.
    WrongDevice = 17,
    /// The object is in a state that does not allow this call.
    InvalidState = 18,
}

impl ErrorCode {
    /// All codes, for validation and for name tables.
    pub const ALL: [ErrorCode; 18] = [
        ErrorCode::Panic,
        ErrorCode::NullArgument,
        ErrorCode::InvalidArgument,
        ErrorCode::InvalidHandle,
        ErrorCode::OutOfRange,
        ErrorCode::Unsupported,
        ErrorCode::NoDriver,
        ErrorCode::NoDevice,
        ErrorCode::Driver,
        ErrorCode::OutOfMemory,
        ErrorCode::CaptureUnsupported,
        ErrorCode::CaptureFailed,
        ErrorCode::DeviceFault,
        ErrorCode::CallbackFailed,
        ErrorCode::ModuleLoad,
        ErrorCode::NotFound,
        ErrorCode::WrongDevice,
        ErrorCode::InvalidState,
    ];

    /// Converts a raw code coming from C; unknown values give `None`.
    pub fn from_u32(v: u32) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| *c as u32 == v)
    }

    /// The NUL-terminated constant name, for example `SLUICE_ERROR_INVALID_HANDLE`.
    pub fn name_cstr(self) -> &'static std::ffi::CStr {
        match self {
            ErrorCode::Panic => c"SLUICE_ERROR_PANIC",
            ErrorCode::NullArgument => c"SLUICE_ERROR_NULL_ARGUMENT",
            ErrorCode::InvalidArgument => c"SLUICE_ERROR_INVALID_ARGUMENT",
            ErrorCode::InvalidHandle => c"SLUICE_ERROR_INVALID_HANDLE",
            ErrorCode::OutOfRange => c"SLUICE_ERROR_OUT_OF_RANGE",
            ErrorCode::Unsupported => c"SLUICE_ERROR_UNSUPPORTED",
            ErrorCode::NoDriver => c"SLUICE_ERROR_NO_DRIVER",
            ErrorCode::NoDevice => c"SLUICE_ERROR_NO_DEVICE",
            ErrorCode::Driver => c"SLUICE_ERROR_DRIVER",
            ErrorCode::OutOfMemory => c"SLUICE_ERROR_OUT_OF_MEMORY",
            ErrorCode::CaptureUnsupported => c"SLUICE_ERROR_CAPTURE_UNSUPPORTED",
            ErrorCode::CaptureFailed => c"SLUICE_ERROR_CAPTURE_FAILED",
            ErrorCode::DeviceFault => c"SLUICE_ERROR_DEVICE_FAULT",
            ErrorCode::CallbackFailed => c"SLUICE_ERROR_CALLBACK_FAILED",
            ErrorCode::ModuleLoad => c"SLUICE_ERROR_MODULE_LOAD",
            ErrorCode::NotFound => c"SLUICE_ERROR_NOT_FOUND",
            ErrorCode::WrongDevice => c"SLUICE_ERROR_WRONG_DEVICE",
            ErrorCode::InvalidState => c"SLUICE_ERROR_INVALID_STATE",
        }
    }
}

/// An error of the core: a stable code, a message, and the driver's code if any.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    /// The raw `CUresult`, when the driver produced the error.
    pub driver_code: Option<u32>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            driver_code: None,
        }
    }

    pub fn driver(code: u32, name: &str, what: impl fmt::Display) -> Error {
        let ec = match code {
            2 => ErrorCode::OutOfMemory,
            // ILLEGAL_ADDRESS, LAUNCH_FAILED, HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION,
            // MISALIGNED_ADDRESS, INVALID_ADDRESS_SPACE, INVALID_PC, ASSERT, LAUNCH_TIMEOUT
            700 | 719 | 714 | 715 | 716 | 717 | 718 | 710 | 702 => ErrorCode::DeviceFault,
            // STREAM_CAPTURE_UNSUPPORTED, _INVALIDATED, _MERGE, _UNMATCHED, _UNJOINED,
            // _ISOLATION, _IMPLICIT, CAPTURED_EVENT, _WRONG_THREAD
            900..=908 => ErrorCode::CaptureFailed,
            _ => ErrorCode::Driver,
        };
        Error {
            code: ec,
            message: format!("{what}: CUDA error {name} ({code})"),
            driver_code: Some(code),
        }
    }

    /// Prefixes the message with context, keeping code and driver code.
    pub fn context(mut self, ctx: impl fmt::Display) -> Error {
        self.message = format!("{ctx}: {}", self.message);
        self
    }

    pub fn invalid_argument(msg: impl Into<String>) -> Error {
        Error::new(ErrorCode::InvalidArgument, msg)
    }

    pub fn unsupported(op: &str, backend: &str) -> Error {
        Error::new(
            ErrorCode::Unsupported,
            format!("{op} is not supported on the {backend} backend"),
        )
    }

    pub fn out_of_range(msg: impl Into<String>) -> Error {
        Error::new(ErrorCode::OutOfRange, msg)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

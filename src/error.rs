//! Errors of the core. Codes are part of the C ABI: never renumber them.

use crate::c_enum::c_enum;
use std::fmt;

c_enum! {
    /// Stable error codes, seen by C as `SLUICE_ERROR_*`.
    pub enum ErrorCode: "SLUICE_ERROR_" {
        /// A Rust panic was caught at the ABI boundary (a bug in sluice).
        Panic = 1 => PANIC,
        /// A required pointer argument was NULL.
        NullArgument = 2 => NULL_ARGUMENT,
        /// An argument had an invalid value (bad flag, zero size, unknown code).
        InvalidArgument = 3 => INVALID_ARGUMENT,
        /// A handle was stale, forged, of the wrong type, or already destroyed.
        InvalidHandle = 4 => INVALID_HANDLE,
        /// An offset or length fell outside a buffer, or arithmetic overflowed.
        OutOfRange = 5 => OUT_OF_RANGE,
        /// The operation is not supported by this backend.
        Unsupported = 6 => UNSUPPORTED,
        /// No usable CUDA driver was found.
        NoDriver = 7 => NO_DRIVER,
        /// The requested device does not exist.
        NoDevice = 8 => NO_DEVICE,
        /// The CUDA driver returned an error; see `sluice_error_driver_code`.
        Driver = 9 => DRIVER,
        /// An allocation failed.
        OutOfMemory = 10 => OUT_OF_MEMORY,
        /// The operation may not run while its stream captures a graph.
        CaptureUnsupported = 11 => CAPTURE_UNSUPPORTED,
        /// A graph capture failed or was invalidated.
        CaptureFailed = 12 => CAPTURE_FAILED,
        /// Work on the stream failed asynchronously (a device fault).
        DeviceFault = 13 => DEVICE_FAULT,
        /// A host callback reported a failure or panicked.
        CallbackFailed = 14 => CALLBACK_FAILED,
        /// Loading a module failed; the message holds the JIT log.
        ModuleLoad = 15 => MODULE_LOAD,
        /// A named item (for example a kernel) was not found.
        NotFound = 16 => NOT_FOUND,
        /// Objects of different devices were mixed in one call.
        WrongDevice = 17 => WRONG_DEVICE,
        /// The object is in a state that does not allow this call.
        InvalidState = 18 => INVALID_STATE,
        /// The input has ended and every batch was consumed (the prefetcher's `next`).
        EndOfData = 19 => END_OF_DATA,
        /// A blocking call gave up after its timeout.
        Timeout = 20 => TIMEOUT,
        /// Serialized data failed its checks (magic, version, size, CRC).
        CorruptData = 21 => CORRUPT_DATA,
        /// Compiling kernel source failed (`sluice_module_compile`); the message holds
        /// the compiler's log.
        Compile = 22 => COMPILE,
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

//! A PyCapsule destructor for DLPack capsules, in native code for bindings that
//! make capsules through ctypes: CPython may run a capsule's destructor while an
//! exception is pending, when no Python code can run. The CPython C API is found
//! in the process at the first call; without it the destructor does nothing.

use crate::dlpack::{DLManagedTensor, DLManagedTensorVersioned};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

type IsValid = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;
type GetPointer = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type Fetch = unsafe extern "C" fn(*mut *mut c_void, *mut *mut c_void, *mut *mut c_void);
type Restore = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void);

/// The four CPython functions the destructor calls.
struct CPython {
    is_valid: IsValid,
    get_pointer: GetPointer,
    fetch: Fetch,
    restore: Restore,
}

fn cpython() -> Option<&'static CPython> {
    static API: OnceLock<Option<CPython>> = OnceLock::new();
    API.get_or_init(|| {
        let find = |name: &CStr| {
            // SAFETY: a symbol lookup in the loaded objects; NULL when absent.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        // SAFETY: CPython's own functions, with these C signatures.
        unsafe {
            Some(CPython {
                is_valid: std::mem::transmute::<*mut c_void, IsValid>(find(c"PyCapsule_IsValid")?),
                get_pointer: std::mem::transmute::<*mut c_void, GetPointer>(find(
                    c"PyCapsule_GetPointer",
                )?),
                fetch: std::mem::transmute::<*mut c_void, Fetch>(find(c"PyErr_Fetch")?),
                restore: std::mem::transmute::<*mut c_void, Restore>(find(c"PyErr_Restore")?),
            })
        }
    })
    .as_ref()
}

/// The capsule destructor: a capsule still named `dltensor_versioned` or
/// `dltensor` was not consumed, so its managed tensor's deleter is called. A
/// pending Python exception is kept across the calls.
///
/// # Safety
/// `capsule` is a live PyCapsule, and the caller holds the GIL (CPython calls
/// destructors so).
pub unsafe fn destroy_dlpack_capsule(capsule: *mut c_void) {
    let Some(py) = cpython() else { return };
    let (mut t, mut v, mut tb) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    // SAFETY: the caller's contract; each name is NUL-terminated.
    unsafe {
        (py.fetch)(&mut t, &mut v, &mut tb);
        if (py.is_valid)(capsule, c"dltensor_versioned".as_ptr()) != 0 {
            let m = (py.get_pointer)(capsule, c"dltensor_versioned".as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(del) = m.as_ref().and_then(|m| m.deleter) {
                del(m);
            }
        } else if (py.is_valid)(capsule, c"dltensor".as_ptr()) != 0 {
            let m = (py.get_pointer)(capsule, c"dltensor".as_ptr()).cast::<DLManagedTensor>();
            if let Some(del) = m.as_ref().and_then(|m| m.deleter) {
                del(m);
            }
        }
        (py.restore)(t, v, tb);
    }
}

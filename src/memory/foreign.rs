//! Foreign memory's release: the owner's function runs once, after the buffer is
//! gone and every use sluice ordered on it has completed on the device. It never
//! blocks the thread that dropped the buffer: when work is still outstanding, one
//! process-wide release thread waits for it and then calls the function.

use crate::event::RecRef;
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};

/// The owner's release function, called at most once.
pub struct Release(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Release {
    pub fn new(f: impl FnOnce() + Send + 'static) -> Release {
        Release(Mutex::new(Some(Box::new(f))))
    }

    /// A C release function and its argument.
    pub fn c_fn(
        f: unsafe extern "C" fn(*mut std::ffi::c_void),
        user_data: *mut std::ffi::c_void,
    ) -> Release {
        struct UserData(*mut std::ffi::c_void);
        // SAFETY: the caller of the C API lets its release run on any thread.
        unsafe impl Send for UserData {}
        let u = UserData(user_data);
        Release::new(move || {
            let u = u;
            // SAFETY: the caller's function, called once with its own argument.
            unsafe { f(u.0) }
        })
    }

    fn take(&self) -> Option<Box<dyn FnOnce() + Send>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl std::fmt::Debug for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Release")
    }
}

type Job = (Vec<RecRef>, Box<dyn FnOnce() + Send>);

/// The release thread's queue, started on first use.
fn queue() -> Option<&'static Sender<Job>> {
    static QUEUE: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("sluice-release".into())
                .spawn(move || {
                    for (pending, f) in rx {
                        crate::backend::enter_call();
                        run(pending, f);
                        crate::backend::leave_call();
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Waits for `pending` (ignoring device errors: the memory is released either
/// way), then calls `f`, keeping a panic inside.
fn run(pending: Vec<RecRef>, f: Box<dyn FnOnce() + Send>) {
    for r in &pending {
        let _ = r.wait_complete();
    }
    drop(pending);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    // The owner's code may have switched the thread's context.
    crate::backend::forget_binding();
}

/// Calls `release`'s function once everything in `outstanding` has completed: at
/// once, on this thread, when it already has; otherwise on the release thread.
pub(crate) fn release_after(outstanding: Vec<RecRef>, release: &Release) {
    let Some(f) = release.take() else { return };
    let pending: Vec<RecRef> = outstanding
        .into_iter()
        .filter(|r| !r.query().unwrap_or(false))
        .collect();
    if pending.is_empty() {
        run(pending, f);
        return;
    }
    match queue() {
        Some(tx) => {
            if let Err(mpsc::SendError((pending, f))) = tx.send((pending, f)) {
                run(pending, f);
            }
        }
        // No thread could be started: wait here rather than never release.
        None => run(pending, f),
    }
}

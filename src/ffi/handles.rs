//! The handle types C sees, from one list: each one's table, tag and name, and
//! the generic lookup, pin, removal and write-out every export uses (in the style
//! of rustls-ffi's `Castable`).

use super::prefetch::{Lease, PrefetcherEntry};
use super::*;
use crate::engine::ForeignOp;
use crate::epoch::Guard;
use crate::event::RecRef;
use crate::graph::{Graph, GraphExec};
use crate::graph_cache::GraphCache;
use crate::handle::{HandleTable, Shared, Stale};
use crate::memory::Buffer;
use crate::module::{Function, Module};
use crate::stream::Stream;
use crate::sync::SyncObject;
use crate::Device;
use std::sync::Arc;

/// A C handle type: a `repr(C)` struct holding one `u64`, naming an object of
/// `Target` in its own table.
pub(crate) trait Castable: Copy {
    /// What the table holds for this handle type.
    type Target: Shared + Send + Sync + 'static;
    /// The handle's name in error messages.
    const WHAT: &'static str;
    fn table() -> &'static HandleTable<Self::Target>;
    fn bits(self) -> u64;
}

/// Declares every handle type: its tag (its position in the list), its table and
/// its name. `tokens` marks a table whose entries are never looked up, only
/// inserted and removed once.
macro_rules! handles {
    ($($handle:ident => $target:ty, $what:literal $(, $tokens:ident)?;)*) => {
        #[allow(non_camel_case_types, clippy::enum_variant_names)]
        #[repr(u8)]
        enum Tag {
            _None,
            $($handle,)*
        }

        $(
            impl Castable for $handle {
                type Target = $target;
                const WHAT: &'static str = $what;
                #[inline(always)]
                fn table() -> &'static HandleTable<$target> {
                    static TABLE: HandleTable<$target> =
                        handles!(@new Tag::$handle as u8 $(, $tokens)?);
                    &TABLE
                }
                #[inline(always)]
                fn bits(self) -> u64 {
                    self.bits
                }
            }
        )*

        /// Number of live handles of every type.
        pub(crate) fn live_handles() -> usize {
            0 $(+ <$handle as Castable>::table().len())*
        }
    };
    (@new $tag:expr) => { HandleTable::new($tag) };
    (@new $tag:expr, tokens) => { HandleTable::new_tokens($tag) };
}

handles! {
    sluice_device_t => Arc<Device>, "device";
    sluice_stream_t => Arc<Stream>, "stream";
    sluice_event_t => RecRef, "event";
    sluice_sync_t => Arc<SyncObject>, "sync object";
    sluice_op_t => Box<ForeignOp>, "op", tokens;
    sluice_buffer_t => Arc<Buffer>, "buffer";
    sluice_module_t => Arc<Module>, "module";
    sluice_function_t => Arc<Function>, "function";
    sluice_graph_t => Arc<Graph>, "graph";
    sluice_graph_exec_t => Arc<GraphExec>, "graph exec";
    sluice_graph_cache_t => Arc<GraphCache>, "graph cache";
    sluice_prefetcher_t => Arc<PrefetcherEntry>, "prefetcher";
    sluice_batch_t => Arc<Lease>, "batch";
    sluice_rng_t => Arc<crate::rng::Rng>, "rng";
    sluice_rng_checkpoint_t => Arc<crate::rng::RngCheckpoint>, "rng checkpoint";
}

/// The object a handle names (a new reference).
#[inline(always)]
pub(crate) fn get<H: Castable>(h: H) -> Result<H::Target>
where
    H::Target: Clone,
{
    H::table()
        .get(h.bits())
        .map_err(|e| stale::<H>(e, h.bits()))
}

/// The object a handle names (a new reference), looked up under the caller's pin.
#[inline(always)]
pub(crate) fn get_pinned<H: Castable>(pin: &Guard, h: H) -> Result<H::Target>
where
    H::Target: Clone,
{
    H::table()
        .get_pinned_clone(pin, h.bits())
        .map_err(|e| stale::<H>(e, h.bits()))
}

/// Runs `f` on the object a handle names, borrowed (no clone). Short,
/// non-blocking calls only.
#[inline(always)]
pub(crate) fn with<H: Castable, R>(h: H, f: impl FnOnce(&H::Target) -> Result<R>) -> Result<R> {
    H::table()
        .with(h.bits(), f)
        .map_err(|e| stale::<H>(e, h.bits()))?
}

/// The object a handle names, valid while `pin` lasts (no clone, no pin of its own).
#[inline(always)]
pub(crate) fn pinned<H: Castable>(pin: &Guard, h: H) -> Result<&<H::Target as Shared>::Target> {
    H::table()
        .get_pinned(pin, h.bits())
        .map_err(|e| stale::<H>(e, h.bits()))
}

/// Removes a handle and returns the table's reference to its object.
pub(crate) fn remove<H: Castable>(h: H) -> Result<H::Target> {
    H::table()
        .remove(h.bits())
        .map_err(|e| stale::<H>(e, h.bits()))
}

/// Inserts `value` and writes its new handle to `out` (checked with `out_ptr`).
pub(crate) fn write_new<H: Castable>(out: *mut H, value: H::Target) {
    write_bits(out, H::table().insert(value));
}

/// Writes a handle's bits to `out` (checked with `out_ptr`).
#[inline(always)]
pub(crate) fn write_bits<H: Castable>(out: *mut H, bits: u64) {
    const { assert!(std::mem::size_of::<H>() == 8 && std::mem::align_of::<H>() == 8) };
    // A handle type is `repr(C)` with one u64 field, so this writes its `bits`.
    write_out(out.cast::<u64>(), bits);
}

/// The error for a handle that names nothing of type `H`.
#[cold]
pub(crate) fn stale<H: Castable>(e: Stale, bits: u64) -> Error {
    let what = H::WHAT;
    let msg = match e {
        Stale::Null => format!("{what} handle is null (0)"),
        Stale::WrongType => format!("handle 0x{bits:016x} is not a {what} handle"),
        Stale::Dead => {
            format!("{what} handle 0x{bits:016x} is stale (destroyed) or was never created")
        }
    };
    crate::log::debug(|| format!("stale handle used: {msg}"));
    Error::new(ErrorCode::InvalidHandle, msg)
}

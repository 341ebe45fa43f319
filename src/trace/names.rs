//! Span names: a thin pointer to a `'static` name, so that an op's record stays one
//! cache line. Op kinds have constant names; a kernel's name is interned once per
//! process at its function's first traced launch and kept in the function.

use super::OpKind;
use crate::counters::CopyDir;
use std::sync::{Mutex, OnceLock};

/// A span's name.
pub(crate) type SpanName = &'static &'static str;

/// A kernel's span name, interned at its first traced launch.
#[derive(Default)]
pub struct KernelName(OnceLock<SpanName>);

impl KernelName {
    #[inline(always)]
    pub(crate) fn get(&self, name: &str) -> SpanName {
        match self.0.get() {
            Some(n) => n,
            None => self.init(name),
        }
    }

    #[cold]
    fn init(&self, name: &str) -> SpanName {
        self.0.get_or_init(|| intern(name))
    }
}

/// Interned kernel names, leaked once each (bounded by [`MAX_NAMES`]).
static NAMES: Mutex<Vec<SpanName>> = Mutex::new(Vec::new());
const MAX_NAMES: usize = 4096;

/// A `'static` copy of `name`; `"kernel"` once [`MAX_NAMES`] names are interned.
fn intern(name: &str) -> SpanName {
    let mut g = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = g.iter().find(|n| ***n == name) {
        return n;
    }
    if g.len() >= MAX_NAMES {
        return &"kernel";
    }
    let n: SpanName = Box::leak(Box::new(&*Box::leak(name.into())));
    g.push(n);
    n
}

/// The name of an op kind's span.
#[inline(always)]
pub(crate) fn span_name(kind: &OpKind<'_>) -> SpanName {
    match kind {
        OpKind::Copy(CopyDir::H2D, _) => &"copy H2D",
        OpKind::Copy(CopyDir::D2H, _) => &"copy D2H",
        OpKind::Copy(CopyDir::D2D, _) => &"copy D2D",
        OpKind::Copy(CopyDir::H2H, _) => &"copy H2H",
        OpKind::Memset(_) => &"memset",
        OpKind::Launch(f) => f.span_name.get(&f.name),
        OpKind::HostFn => &"host fn",
        OpKind::GraphLaunch(_) => &"graph launch",
        OpKind::ForeignBegin(what) => what,
        OpKind::ForeignEnd => &"op end",
        OpKind::Record => &"record",
        OpKind::WaitEvent => &"wait event",
    }
}

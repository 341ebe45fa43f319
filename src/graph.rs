//! Graph capture bookkeeping for the dependency engine, and graphs.

use crate::device::next_id;
use crate::stream::Recording;
use crate::sync::{SyncObject, SyncState};
use std::sync::{Arc, Mutex};

/// State shared by every stream taking part in one capture.
pub struct Capture {
    pub id: u64,
    /// Each touched object with its state before its first captured access.
    touched: Mutex<Vec<Touched>>,
}

struct Touched {
    obj: Arc<SyncObject>,
    before: SyncState,
    written: bool,
}

impl Capture {
    pub(crate) fn new() -> Arc<Capture> {
        Arc::new(Capture {
            id: next_id(),
            touched: Mutex::new(Vec::new()),
        })
    }

    /// Notes an access made inside the capture; `state` is the object's state now.
    pub(crate) fn touch(&self, obj: &Arc<SyncObject>, state: &SyncState, write: bool) {
        let mut t = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        match t.iter_mut().find(|x| x.obj.id == obj.id) {
            Some(x) => x.written |= write,
            None => t.push(Touched {
                obj: obj.clone(),
                before: state.clone(),
                written: write,
            }),
        }
    }

    /// The union of the captured ops' read and write sets (a write wins).
    pub(crate) fn access_sets(&self) -> (Vec<Arc<SyncObject>>, Vec<Arc<SyncObject>>) {
        let t = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        let reads = t
            .iter()
            .filter(|x| !x.written)
            .map(|x| x.obj.clone())
            .collect();
        let writes = t
            .iter()
            .filter(|x| x.written)
            .map(|x| x.obj.clone())
            .collect();
        (reads, writes)
    }

    /// Removes this capture's recordings from every touched object, restoring what
    /// they replaced and keeping what non-capturing streams did meanwhile.
    pub(crate) fn rollback(&self) {
        let t = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        let mine = |r: &Arc<Recording>| r.capture_id == Some(self.id);
        for x in t.iter() {
            let mut st = x.obj.state.lock().unwrap_or_else(|p| p.into_inner());
            st.readers.retain(|r| !mine(r));
            if st.writer.as_ref().is_some_and(mine) {
                st.writer = x.before.writer.clone();
                for r in &x.before.readers {
                    match st
                        .readers
                        .iter_mut()
                        .find(|e| e.stream_id() == r.stream_id())
                    {
                        Some(e) if e.seq >= r.seq => {}
                        Some(e) => *e = r.clone(),
                        None => st.readers.push(r.clone()),
                    }
                }
            }
        }
    }
}

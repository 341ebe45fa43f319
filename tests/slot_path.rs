//! The reader-slot path of a shared object (issue 17): after a host wait, reads of
//! an object whose stream owns its reader slot stay on the slot path. Before run 81
//! every host wait sent the next read of each object to the exclusive path to prune
//! (`docs/decisions.md`, "Shared reads no longer fall into the exclusive path").
//! Debug builds count exclusive holds per thread; release builds skip.

#[path = "support/cabi.rs"]
mod cabi;

use cabi::{close, host_device, ok, pair, stream, sync_object};
use sluice::ffi::*;

fn holds() -> Option<u64> {
    sluice::sync::exclusive_holds_on_this_thread()
}

#[test]
fn reads_after_a_host_wait_stay_on_the_slot_path() {
    if holds().is_none() {
        return; // release build: no counter
    }
    let d = host_device();
    let s = stream(d);
    let objs = [sync_object(), sync_object(), sync_object()];
    // The stream's first read of each object takes its slot over (exclusively).
    pair(s, &objs, &[]);
    let before = holds().unwrap();
    pair(s, &objs, &[]);
    assert_eq!(
        holds().unwrap(),
        before,
        "a second read took the exclusive path"
    );
    for round in 0..5 {
        // A host wait marks completed recordings prunable.
        ok(sluice_stream_synchronize(s));
        for _ in 0..10 {
            pair(s, &objs, &[]);
        }
        assert_eq!(
            holds().unwrap(),
            before,
            "round {round}: a read after a host wait took the exclusive path"
        );
    }
    // A write still holds the object exclusively, and the reads after it are
    // back on the slot path once the stream has read it again.
    let mut op = sluice_op_t { bits: 0 };
    ok(sluice_op_begin(
        s,
        std::ptr::null(),
        0,
        objs.as_ptr(),
        1,
        &mut op,
    ));
    ok(sluice_op_end(op));
    let after_write = holds().unwrap();
    assert!(
        after_write > before,
        "a write did not hold its object exclusively"
    );
    pair(s, &objs, &[]);
    let settled = holds().unwrap();
    pair(s, &objs, &[]);
    assert_eq!(holds().unwrap(), settled);
    ok(sluice_stream_synchronize(s));
    for o in objs {
        ok(sluice_sync_destroy(o));
    }
    close(d, &[s]);
}

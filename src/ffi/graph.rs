//! Graph capture, executable graphs and the graph cache.

use super::*;
use crate::capture;
use crate::error::{Error, ErrorCode};
use crate::graph::GraphUpdate;
use crate::graph::UpdateOutcome;
use crate::graph_cache::{self, GraphCache};
use std::ffi::{c_char, c_void, CStr};

/// A captured graph. It keeps the memory of the buffers it uses alive (also after
/// they are freed) until it and every executable graph made from it are destroyed.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_graph_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// An instantiated graph, launchable on any stream of its device.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_graph_exec_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// A graph cache: per caller key, eager once, then captured, then replayed.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sluice_graph_cache_t {
    /// Opaque handle bits; 0 is never valid.
    pub bits: u64,
}

/// How an update was applied.
#[repr(C)]
pub struct sluice_graph_update_info_t {
    /// `SLUICE_GRAPH_UPDATE_IN_PLACE` or `SLUICE_GRAPH_UPDATE_REINSTANTIATED`.
    pub result: u32,
    /// Why the in-place update was refused (NUL-terminated; empty when in place).
    pub reason: [c_char; 256],
}

/// Counters of a graph cache.
#[repr(C)]
pub struct sluice_graph_cache_stats_t {
    /// Runs executed eagerly (warm-ups, and every run with graphs disabled).
    pub eager: u64,
    /// Runs captured and instantiated.
    pub captured: u64,
    /// Runs replayed from an instantiated graph.
    pub replayed: u64,
    /// Keys with an entry.
    pub entries: u64,
}

/// The body of a cached region. It issues sluice ops on `stream` (the stream given
/// to `sluice_graph_cache_run`) and returns 0, or non-zero to fail the run.
pub type sluice_graph_body_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, stream: sluice_stream_t) -> i32>;

/// Begins capturing `stream` with `mode` (`SLUICE_CAPTURE_*`; relaxed is the
/// default). Other streams join by waiting on an event recorded on a capturing
/// stream; they must be joined back before `sluice_graph_capture_end`: by the origin
/// waiting on an event recorded on them, or by a captured op on the origin whose
/// reads or writes conflict with their last captured op (the op then waits for it).
/// Sync objects alone do not join a stream: an op on a stream outside the capture
/// runs at once, ordered after the objects' real work, not after the captured ops. While
/// capturing, host synchronisation and queries, host waits on sync objects that the
/// capture uses, allocation, pageable copies and event queries are rejected with
/// `SLUICE_ERROR_CAPTURE_UNSUPPORTED`; the capture then ends with an error.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`);
/// `SLUICE_ERROR_INVALID_ARGUMENT` (`mode` not a `SLUICE_CAPTURE_*`);
/// `SLUICE_ERROR_INVALID_STATE` (`stream` is already capturing: beginning twice; or
/// another sluice stream handle shares its raw stream, made by
/// `sluice_stream_wrap_external`: the two track their work apart, so neither captures).
#[no_mangle]
pub extern "C" fn sluice_graph_capture_begin(
    stream: sluice_stream_t,
    mode: u32,
) -> *mut sluice_error_t {
    boundary("sluice_graph_capture_begin", || {
        capture::capture_begin(&get(stream)?, capture::capture_mode(mode)?)
    })
}

/// Ends the capture begun on `stream` and writes the graph. On failure (an unjoined
/// fork, a rejected operation, a driver error) the capture is still ended and the
/// streams are usable again (the sync objects' state was never changed by it).
/// Ownership: the caller owns the new graph handle and destroys it with
/// `sluice_graph_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`graph_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`); `SLUICE_ERROR_INVALID_STATE`
/// (`stream` is not capturing: ending a capture that was not begun; or it joined a
/// capture that another stream began); `SLUICE_ERROR_CAPTURE_FAILED` (a forked stream
/// was not joined back, or an operation was rejected during the capture; the capture is
/// ended either way).
#[no_mangle]
pub extern "C" fn sluice_graph_capture_end(
    stream: sluice_stream_t,
    graph_out: *mut sluice_graph_t,
) -> *mut sluice_error_t {
    boundary("sluice_graph_capture_end", || {
        out_new(graph_out, "graph_out", || {
            capture::capture_end(&get(stream)?)
        })
    })
}

/// Writes true when `stream` is capturing (as origin or as a joined fork).
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`capturing_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `stream`).
#[no_mangle]
pub extern "C" fn sluice_stream_is_capturing(
    stream: sluice_stream_t,
    capturing_out: *mut bool,
) -> *mut sluice_error_t {
    boundary("sluice_stream_is_capturing", || {
        out_value(capturing_out, "capturing_out", || {
            Ok(get(stream)?.is_capturing())
        })
    })
}

/// Writes the number of operation nodes in the graph.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`count_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `graph`).
#[no_mangle]
pub extern "C" fn sluice_graph_node_count(
    graph: sluice_graph_t,
    count_out: *mut usize,
) -> *mut sluice_error_t {
    boundary("sluice_graph_node_count", || {
        out_value(count_out, "count_out", || get(graph)?.node_count())
    })
}

/// Writes a Graphviz DOT file of the graph to `path`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`path` NULL); `SLUICE_ERROR_INVALID_HANDLE` (a
/// stale `graph`); `SLUICE_ERROR_INVALID_ARGUMENT` (the file cannot be written).
#[no_mangle]
pub extern "C" fn sluice_graph_debug_dot(
    graph: sluice_graph_t,
    path: *const c_char,
    verbose: bool,
) -> *mut sluice_error_t {
    boundary("sluice_graph_debug_dot", || {
        if path.is_null() {
            return Err(Error::new(ErrorCode::NullArgument, "path is NULL"));
        }
        // SAFETY: non-NULL; the caller promises a NUL-terminated string.
        get(graph)?.debug_dot(unsafe { CStr::from_ptr(path) }, verbose)
    })
}

/// Destroys a graph handle. Ownership: executable graphs made from it stay valid
/// and keep what they need.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `graph`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_graph_destroy(graph: sluice_graph_t) -> *mut sluice_error_t {
    boundary("sluice_graph_destroy", || remove(graph).map(drop))
}

/// Instantiates a graph. With `SLUICE_GRAPH_DOT_DIR` set (read once, at the
/// process's first instantiate), also writes `<dir>/graph-<device>-<id>.dot`.
/// Ownership: the caller owns the new executable graph and destroys it with
/// `sluice_graph_exec_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`exec_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `graph`).
#[no_mangle]
pub extern "C" fn sluice_graph_instantiate(
    graph: sluice_graph_t,
    exec_out: *mut sluice_graph_exec_t,
) -> *mut sluice_error_t {
    boundary("sluice_graph_instantiate", || {
        out_new(exec_out, "exec_out", || get(graph)?.instantiate())
    })
}

/// Uploads the executable graph's resources ahead of its first launch.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `exec`, `stream`);
/// `SLUICE_ERROR_WRONG_DEVICE` (a stream of another device).
#[no_mangle]
pub extern "C" fn sluice_graph_exec_upload(
    exec: sluice_graph_exec_t,
    stream: sluice_stream_t,
) -> *mut sluice_error_t {
    boundary("sluice_graph_exec_upload", || {
        get(exec)?.upload(&*get(stream)?)
    })
}

/// Launches the executable graph on `stream` as one tracked op: it waits for the
/// earlier users of every buffer the graph touches and records one event after.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `exec`, `stream`);
/// `SLUICE_ERROR_WRONG_DEVICE` (a stream of another device).
#[no_mangle]
pub extern "C" fn sluice_graph_exec_launch(
    exec: sluice_graph_exec_t,
    stream: sluice_stream_t,
) -> *mut sluice_error_t {
    boundary("sluice_graph_exec_launch", || {
        with(exec, |e| with(stream, |s| e.launch(s)))
    })
}

/// Applies `graph` to `exec` in place (`cuGraphExecUpdate`); when the driver refuses
/// (topology or node kind changed), re-instantiates instead. `info_out` (may be NULL)
/// says which happened and why.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `exec`, `graph`);
/// `SLUICE_ERROR_WRONG_DEVICE` (a graph of another device).
#[no_mangle]
pub extern "C" fn sluice_graph_exec_update(
    exec: sluice_graph_exec_t,
    graph: sluice_graph_t,
    info_out: *mut sluice_graph_update_info_t,
) -> *mut sluice_error_t {
    boundary("sluice_graph_exec_update", || {
        let outcome = get(exec)?.update(&*get(graph)?)?;
        if !info_out.is_null() {
            let mut reason = [0 as c_char; 256];
            let (result, why) = match &outcome {
                UpdateOutcome::InPlace => (GraphUpdate::InPlace as u32, ""),
                UpdateOutcome::Reinstantiated(r) => {
                    (GraphUpdate::Reinstantiated as u32, r.as_str())
                }
            };
            for (d, s) in reason.iter_mut().zip(why.bytes().take(255)) {
                *d = s as c_char;
            }
            write_out(info_out, sluice_graph_update_info_t { result, reason });
        }
        Ok(())
    })
}

/// Destroys an executable graph handle. Ownership: the handle ends now; launches
/// already enqueued complete, and the memory they use stays alive until then.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `exec`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_graph_exec_destroy(exec: sluice_graph_exec_t) -> *mut sluice_error_t {
    boundary("sluice_graph_exec_destroy", || remove(exec).map(drop))
}

/// Creates a graph cache for `device`. Ownership: the caller owns the new handle
/// and destroys it with `sluice_graph_cache_destroy`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`cache_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `device`).
#[no_mangle]
pub extern "C" fn sluice_graph_cache_create(
    device: sluice_device_t,
    cache_out: *mut sluice_graph_cache_t,
) -> *mut sluice_error_t {
    boundary("sluice_graph_cache_create", || {
        out_new(cache_out, "cache_out", || {
            Ok(GraphCache::new(&get(device)?))
        })
    })
}

/// Destroys a graph cache. Ownership: its executable graphs go with it, after the
/// launches already enqueued.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `cache`, or a second destroy).
#[no_mangle]
pub extern "C" fn sluice_graph_cache_destroy(cache: sluice_graph_cache_t) -> *mut sluice_error_t {
    boundary("sluice_graph_cache_destroy", || remove(cache).map(drop))
}

/// Runs the region `key` on `stream`: the first call runs `body` eagerly, the second
/// captures and instantiates it (and launches the graph), later calls replay it
/// without calling `body`. With `SLUICE_GRAPHS=0` every call is eager. A non-zero
/// return from `body` fails the run with `SLUICE_ERROR_CALLBACK_FAILED`.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`body` NULL); `SLUICE_ERROR_INVALID_HANDLE` (a
/// stale `cache`, `stream`); `SLUICE_ERROR_WRONG_DEVICE` (a stream of another device);
/// `SLUICE_ERROR_CALLBACK_FAILED` (`body` returned non-zero);
/// `SLUICE_ERROR_INVALID_STATE` (a run of the same `cache` and `key` from inside its
/// own `body`, on that thread: the body recursed; or `stream` is already capturing when
/// the key is due to be captured); and any error of an op the body issued that it
/// passed on.
#[no_mangle]
pub extern "C" fn sluice_graph_cache_run(
    cache: sluice_graph_cache_t,
    key: u64,
    stream: sluice_stream_t,
    body: sluice_graph_body_fn,
    user_data: *mut c_void,
) -> *mut sluice_error_t {
    boundary("sluice_graph_cache_run", || {
        let f = body.ok_or_else(|| Error::new(ErrorCode::NullArgument, "body is NULL"))?;
        let c = get(cache)?;
        let s = get(stream)?;
        let mut run = || {
            // SAFETY: the caller provided a valid body for this user_data.
            let rc = unsafe { f(user_data, stream) };
            // The body is caller code: it may have switched the thread's context.
            crate::backend::forget_binding();
            match rc {
                0 => Ok(()),
                rc => Err(Error::new(
                    ErrorCode::CallbackFailed,
                    format!("graph cache body for key {key} returned {rc}"),
                )),
            }
        };
        c.run(key, &s, &mut run)
    })
}

/// Writes the cache's counters.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`stats_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `cache`).
#[no_mangle]
pub extern "C" fn sluice_graph_cache_stats(
    cache: sluice_graph_cache_t,
    stats_out: *mut sluice_graph_cache_stats_t,
) -> *mut sluice_error_t {
    boundary("sluice_graph_cache_stats", || {
        let out = out_ptr(stats_out, "stats_out")?;
        let st = get(cache)?.stats();
        write_out(
            out,
            sluice_graph_cache_stats_t {
                eager: st.eager,
                captured: st.captured,
                replayed: st.replayed,
                entries: st.entries,
            },
        );
        Ok(())
    })
}

/// Writes whether the cache holds an entry for `key` (its eager warm-up ran, or
/// its graph was captured) and has not evicted it: a binding that keeps
/// resources per captured key (Go keeps the wrappers of the buffers a graph
/// uses) drops those of keys no longer held.
///
/// Errors: `SLUICE_ERROR_NULL_ARGUMENT` (`contains_out` NULL);
/// `SLUICE_ERROR_INVALID_HANDLE` (a stale `cache`).
#[no_mangle]
pub extern "C" fn sluice_graph_cache_contains(
    cache: sluice_graph_cache_t,
    key: u64,
    contains_out: *mut bool,
) -> *mut sluice_error_t {
    boundary("sluice_graph_cache_contains", || {
        out_value(contains_out, "contains_out", || {
            Ok(get(cache)?.contains(key))
        })
    })
}

/// Keeps at most `max_entries` keys in the cache (0: no limit), evicting the least
/// recently used keys beyond that, now and on later inserts. A new cache holds
/// `SLUICE_GRAPH_CACHE_MAX` keys, else 1024. An evicted key runs eagerly again on
/// its next run, then is captured again; its graph is freed after the launches
/// already enqueued. Evictions are counted in `sluice_counters_t`.
///
/// Errors: `SLUICE_ERROR_INVALID_HANDLE` (a stale `cache`).
#[no_mangle]
pub extern "C" fn sluice_graph_cache_set_max_entries(
    cache: sluice_graph_cache_t,
    max_entries: usize,
) -> *mut sluice_error_t {
    boundary("sluice_graph_cache_set_max_entries", || {
        get(cache)?.set_max_entries(max_entries);
        Ok(())
    })
}

/// Turns graph caches on or off process-wide (initially off when `SLUICE_GRAPHS=0`).
///
/// Errors: none: it always succeeds.
#[no_mangle]
pub extern "C" fn sluice_graph_cache_set_enabled(enabled: bool) -> *mut sluice_error_t {
    boundary("sluice_graph_cache_set_enabled", || {
        graph_cache::set_graphs_enabled(enabled);
        Ok(())
    })
}

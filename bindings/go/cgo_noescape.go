package sluice

// cgo annotations of the hot C functions. Together they let the compiler keep
// the Go pointers passed to these functions (the *_out variables, arrays of
// sync handles) on the goroutine stack instead of moving them to the heap:
//
//   - noescape: the function keeps no copy of a Go pointer argument after it
//     returns (sluice copies handle arrays and strings, and writes *_out
//     pointers before returning);
//   - nocallback: the function never calls back into Go on the calling thread
//     (host callbacks run on driver or worker threads, and only
//     sluice_stream_launch_host_func enqueues them; it is not listed).
//
// Never list a function that may call Go on the calling thread: the
// free_user_data of host callbacks runs on the thread of a failed
// sluice_stream_launch_host_func and of any call that drops the last graph
// holding a captured callback (sluice_graph_destroy,
// sluice_graph_exec_destroy, sluice_graph_exec_update,
// sluice_graph_capture_end, sluice_graph_cache_destroy,
// sluice_stream_destroy), and sluice_graph_cache_run calls the Go body. The
// release function of a WrapDevice buffer runs on the thread of the call that
// dropped the buffer's last reference when its uses have completed
// (sluice_buffer_free, and the graph destroys above): those stay unlisted too.
//
// Any C function may log (a stale handle at debug level, a capture poisoned
// at warn level, ...). That is why the log receiver of SetLogCallback is a C
// function that only queues the message (shims.c) and never calls Go on the
// logging thread: a Go receiver called from inside one of the functions
// below would make the runtime panic ("function marked with #cgo nocallback
// called back into Go").
//
// cgo honours the pair only together. The copy functions that take host
// memory and sluice_buffer_register_host are left out on purpose.
//
// Functions that take no Go pointer (sluice_stream_copy,
// sluice_stream_memset, sluice_op_end, ...) gain nothing from the pair:
// noescape has no pointer to keep on the stack, and nocallback makes each
// call two runtime.cgoNoCallback calls dearer. They stay unlisted.

/*
#cgo noescape sluice_device_count
#cgo nocallback sluice_device_count
#cgo noescape sluice_device_open
#cgo nocallback sluice_device_open
#cgo noescape sluice_device_open_default
#cgo nocallback sluice_device_open_default
#cgo noescape sluice_device_props
#cgo nocallback sluice_device_props
#cgo noescape sluice_device_priority_range
#cgo nocallback sluice_device_priority_range
#cgo noescape sluice_device_pinned_stats
#cgo nocallback sluice_device_pinned_stats
#cgo noescape sluice_event_record
#cgo nocallback sluice_event_record
#cgo noescape sluice_event_query
#cgo nocallback sluice_event_query
#cgo noescape sluice_event_elapsed_ms
#cgo nocallback sluice_event_elapsed_ms
#cgo noescape sluice_event_sequence
#cgo nocallback sluice_event_sequence
#cgo noescape sluice_buffer_alloc
#cgo nocallback sluice_buffer_alloc
#cgo noescape sluice_buffer_alloc_pinned
#cgo nocallback sluice_buffer_alloc_pinned
#cgo noescape sluice_buffer_info
#cgo nocallback sluice_buffer_info
#cgo noescape sluice_buffer_sync
#cgo nocallback sluice_buffer_sync
#cgo noescape sluice_stream_create
#cgo nocallback sluice_stream_create
#cgo noescape sluice_stream_raw
#cgo nocallback sluice_stream_raw
#cgo noescape sluice_stream_query
#cgo nocallback sluice_stream_query
#cgo noescape sluice_stream_stats
#cgo nocallback sluice_stream_stats
#cgo noescape sluice_sync_create
#cgo nocallback sluice_sync_create
#cgo noescape sluice_sync_info
#cgo nocallback sluice_sync_info
#cgo noescape sluice_op_begin
#cgo nocallback sluice_op_begin
#cgo noescape sluice_module_get_function
#cgo nocallback sluice_module_get_function
#cgo noescape sluice_go_launch
#cgo nocallback sluice_go_launch
#include "sluice.h"
*/
import "C"

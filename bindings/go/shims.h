// C helpers of the Go binding. Declarations only: callbacks.go, which holds
// an //export, includes this file, so it may not define C functions.
#ifndef SLUICE_GO_SHIMS_H
#define SLUICE_GO_SHIMS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include "sluice.h"

// Enqueues the Go host-callback trampoline on `stream` with a cgo.Handle as
// its user data, and a free_user_data that deletes the handle (called by the
// library exactly once, when the callback can no longer run, also when this
// call fails). The handle is an integer; no Go pointer reaches C.
sluice_error_t *sluice_go_host_callback(sluice_stream_t stream, uintptr_t handle,
                                        const sluice_sync_t *reads, size_t num_reads,
                                        const sluice_sync_t *writes, size_t num_writes);

// Runs region `key` of `cache` with the Go graph-body trampoline and a
// cgo.Handle as its user data. The body is called (at most once) on this
// thread, before this function returns; the caller deletes the handle.
sluice_error_t *sluice_go_graph_cache_run(sluice_graph_cache_t cache, uint64_t key,
                                          sluice_stream_t stream, uintptr_t handle);

// Creates a prefetcher from `config`. With a non-zero `fill_handle` (a
// cgo.Handle) it is in pull mode: the Go fill trampoline is its fill callback
// and the handle its user data (config->fill and config->user_data are
// ignored). The caller deletes the handle once the prefetcher is destroyed
// (sluice_prefetcher_destroy joins the producer threads first), or at once when
// this call fails. The handle is an integer; no Go pointer reaches C.
sluice_error_t *sluice_go_prefetcher_create(sluice_device_t device,
                                            const sluice_prefetcher_config_t *config,
                                            uintptr_t fill_handle,
                                            sluice_prefetcher_t *prefetcher_out);

// Log messages (log.go). sluice_go_log_set_callback(true) makes the library
// send its log messages to a C receiver that copies each one into a bounded
// queue in C memory and returns: it never calls Go, so a message logged on
// any thread, under the library's locks, or inside a C function that cgo
// calls with `#cgo nocallback`, is safe. The Go pump goroutine takes the
// messages out with sluice_go_log_take. false goes back to stderr.
sluice_error_t *sluice_go_log_set_callback(bool on);

// A queued log message.
typedef struct sluice_go_log_msg_t {
	// text is the message (malloc'ed; the next sluice_go_log_take with the
	// same `out` frees it).
	char *text;
	// level is one of SLUICE_LOG_*.
	uint32_t level;
} sluice_go_log_msg_t;

// What sluice_go_log_take took.
typedef struct sluice_go_log_batch_t {
	// n is the number of messages written to out.
	size_t n;
	// last_seq is the number of the last of them (the first message queued
	// is 1); 0 when n is 0.
	uint64_t last_seq;
	// dropped counts messages lost since the last take (the queue was full).
	uint64_t dropped;
	// woken: sluice_go_log_wake was called and the queue is empty.
	bool woken;
} sluice_go_log_batch_t;

// Blocks until a message is queued, messages were dropped, or
// sluice_go_log_wake is called; then moves up to `max` of the oldest queued
// messages, in order, to `out`. It first frees the texts that `out` holds
// (from the previous take; `out` starts zeroed), so the taker reads them
// until its next take and frees nothing itself.
sluice_go_log_batch_t sluice_go_log_take(sluice_go_log_msg_t *out, size_t max);

// The number of messages queued so far (the seq of the newest).
uint64_t sluice_go_log_queued(void);

// Makes sluice_go_log_take return (woken) once the queue is empty.
void sluice_go_log_wake(void);

// Converts an address into a pointer on the C side (keeps go vet's unsafeptr
// check quiet about integer-to-pointer conversions of C addresses).
void *sluice_go_ptr(uint64_t addr);

// Benchmark loops: run the C API `n` times from C and return the elapsed
// nanoseconds, or write the first error to *err_out and return 0.
//
// sluice_go_bench_set_after_call(mode) makes every loop do, after each API
// call, what a cgo return does first (a diagnostic: is Go's excess the cost of
// fencing right after the driver's stores, or the code run between calls?): 0
// nothing, 1 an atomic read-modify-write (as exitsyscall's compare-and-swap),
// 2 an mfence, 3 / 4 / 5 a call into 4 / 16 / 64 KiB of code (x86-64; a
// jump per cache line).
void sluice_go_bench_set_after_call(int mode);
uint64_t sluice_go_bench_event(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out);
uint64_t sluice_go_bench_op(sluice_stream_t stream, sluice_sync_t obj, uint64_t n,
                            sluice_error_t **err_out);
uint64_t sluice_go_bench_query(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out);
uint64_t sluice_go_bench_op_sets(sluice_stream_t stream, const sluice_sync_t *reads, size_t num_reads,
                                 const sluice_sync_t *writes, size_t num_writes, uint64_t n,
                                 sluice_error_t **err_out);
uint64_t sluice_go_bench_copy(sluice_stream_t stream, sluice_buffer_t dst, sluice_buffer_t src,
                              size_t len, uint64_t n, sluice_error_t **err_out);
uint64_t sluice_go_bench_memset(sluice_stream_t stream, sluice_buffer_t dst, size_t len, uint64_t n,
                                sluice_error_t **err_out);
// A stand-in for a driver call's memory footprint: writes one byte in each
// 64-byte line of the first `kb` KiB of `buf` (C memory). The loop form makes
// the same call `n` times from C and returns the elapsed ns.
void sluice_go_bench_touch(unsigned char *buf, size_t kb);
uint64_t sluice_go_bench_touch_loop(unsigned char *buf, size_t kb, uint64_t n);
// The launch loop takes the argument values as Launch passes them (8 bytes
// each) and builds the array of pointers to them once, before the loop.
uint64_t sluice_go_bench_launch(sluice_stream_t stream, sluice_function_t function,
                                const sluice_launch_dims_t *dims, uint64_t *vals, size_t num_args,
                                const sluice_sync_t *reads, size_t num_reads,
                                const sluice_sync_t *writes, size_t num_writes, uint64_t n,
                                sluice_error_t **err_out);

// Wraps foreign device memory (sluice_buffer_wrap_device) with the Go release
// trampoline as its release_fn and a cgo.Handle of the Go function as its
// user data (0: no release function). The library calls the trampoline
// exactly once on success, never on failure (then the caller deletes the
// handle). The handle is an integer; no Go pointer reaches C.
sluice_error_t *sluice_go_wrap_device(sluice_device_t device, uint64_t ptr, size_t len,
                                      uintptr_t release_handle, sluice_buffer_t *buffer_out);

// What a DLPack managed tensor says (dlpack.go's ReadDLPack). sluice.h takes
// managed tensors as void *, so shims.c declares dlpack.h's layout itself.
typedef struct sluice_go_dlpack_t {
	uint64_t data;
	int32_t device_type, device_id;
	int32_t ndim;
	uint8_t dtype_code, dtype_bits;
	uint16_t dtype_lanes;
	const int64_t *shape, *strides;
	uint32_t major, minor;
	bool read_only;
} sluice_go_dlpack_t;

// Reads `tensor` of `format` (SLUICE_DLPACK_*) into *out; false for an
// unknown format.
bool sluice_go_dlpack_read(void *tensor, uint32_t format, sluice_go_dlpack_t *out);

// Calls the deleter of `tensor` of `format`, if it has one; false for an
// unknown format.
bool sluice_go_dlpack_delete(void *tensor, uint32_t format);

#endif

// C helpers of the Go binding. Declarations only: callbacks.go, which holds
// an //export, includes this file, so it may not define C functions.
#ifndef SLUICE_GO_SHIMS_H
#define SLUICE_GO_SHIMS_H

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

// Converts an address into a pointer on the C side (keeps go vet's unsafeptr
// check quiet about integer-to-pointer conversions of C addresses).
void *sluice_go_ptr(uint64_t addr);

// Benchmark loops: run the C API `n` times from C and return the elapsed
// nanoseconds, or write the first error to *err_out and return 0.
uint64_t sluice_go_bench_event(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out);
uint64_t sluice_go_bench_op(sluice_stream_t stream, sluice_sync_t obj, uint64_t n,
                            sluice_error_t **err_out);
uint64_t sluice_go_bench_query(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out);

#endif

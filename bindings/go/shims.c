// C helpers of the Go binding; see shims.h.
#include <time.h>
#include "shims.h"
#include "_cgo_export.h"

static int32_t sluice_go_trampoline(void *user_data) {
	return sluiceGoHostCallback((uintptr_t)user_data);
}

static void sluice_go_free_handle(void *user_data) { sluiceGoFreeHandle((uintptr_t)user_data); }

sluice_error_t *sluice_go_host_callback(sluice_stream_t stream, uintptr_t handle,
                                        const sluice_sync_t *reads, size_t num_reads,
                                        const sluice_sync_t *writes, size_t num_writes) {
	return sluice_stream_launch_host_func(stream, sluice_go_trampoline, (void *)handle,
	                                      sluice_go_free_handle, reads, num_reads, writes,
	                                      num_writes);
}

static int32_t sluice_go_body_trampoline(void *user_data, sluice_stream_t stream) {
	return sluiceGoGraphBody((uintptr_t)user_data, stream);
}

sluice_error_t *sluice_go_graph_cache_run(sluice_graph_cache_t cache, uint64_t key,
                                          sluice_stream_t stream, uintptr_t handle) {
	return sluice_graph_cache_run(cache, key, stream, sluice_go_body_trampoline,
	                              (void *)handle);
}

static int32_t sluice_go_prefetch_fill(void *user_data, sluice_prefetch_fill_t *fill) {
	return sluiceGoPrefetchFill((uintptr_t)user_data, fill);
}

sluice_error_t *sluice_go_prefetcher_create(sluice_device_t device,
                                            const sluice_prefetcher_config_t *config,
                                            uintptr_t fill_handle,
                                            sluice_prefetcher_t *prefetcher_out) {
	sluice_prefetcher_config_t c = *config;
	c.fill = fill_handle ? sluice_go_prefetch_fill : NULL;
	c.user_data = (void *)fill_handle;
	return sluice_prefetcher_create(device, &c, prefetcher_out);
}

void *sluice_go_ptr(uint64_t addr) { return (void *)(uintptr_t)addr; }

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t sluice_go_bench_event(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out) {
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_event_t ev;
		sluice_error_t *e = sluice_event_record(stream, 0, &ev);
		if (!e) e = sluice_event_destroy(ev);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_op(sluice_stream_t stream, sluice_sync_t obj, uint64_t n,
                            sluice_error_t **err_out) {
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_op_t op;
		sluice_error_t *e = sluice_op_begin(stream, NULL, 0, &obj, 1, &op);
		if (!e) e = sluice_op_end(op);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_query(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out) {
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		bool idle;
		sluice_error_t *e = sluice_stream_query(stream, &idle);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

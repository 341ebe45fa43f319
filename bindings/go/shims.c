// C helpers of the Go binding; see shims.h.
#include <pthread.h>
#include <string.h>
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

static void sluice_go_release(void *user_data) { sluiceGoRelease((uintptr_t)user_data); }

sluice_error_t *sluice_go_wrap_device(sluice_device_t device, uint64_t ptr, size_t len,
                                      uintptr_t release_handle, sluice_buffer_t *buffer_out) {
	return sluice_buffer_wrap_device(device, ptr, len, release_handle ? sluice_go_release : NULL,
	                                 (void *)release_handle, buffer_out);
}

// dlpack.h's layout (DLPack 1.x; DLManagedTensor is 0.x's).
typedef struct {
	void *data;
	struct {
		int32_t device_type, device_id;
	} device;
	int32_t ndim;
	struct {
		uint8_t code, bits;
		uint16_t lanes;
	} dtype;
	int64_t *shape, *strides;
	uint64_t byte_offset;
} go_dl_tensor;
typedef struct go_dl_versioned {
	struct {
		uint32_t major, minor;
	} version;
	void *manager_ctx;
	void (*deleter)(struct go_dl_versioned *);
	uint64_t flags;
	go_dl_tensor dl_tensor;
} go_dl_versioned;
typedef struct go_dl_unversioned {
	go_dl_tensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct go_dl_unversioned *);
} go_dl_unversioned;

bool sluice_go_dlpack_read(void *tensor, uint32_t format, sluice_go_dlpack_t *out) {
	const go_dl_tensor *t;
	memset(out, 0, sizeof *out);
	if (format == SLUICE_DLPACK_VERSIONED) {
		go_dl_versioned *v = tensor;
		t = &v->dl_tensor;
		out->major = v->version.major;
		out->minor = v->version.minor;
		out->read_only = (v->flags & 1) != 0;
	} else if (format == SLUICE_DLPACK_UNVERSIONED) {
		t = &((go_dl_unversioned *)tensor)->dl_tensor;
	} else {
		return false;
	}
	out->data = (uint64_t)(uintptr_t)t->data + t->byte_offset;
	out->device_type = t->device.device_type;
	out->device_id = t->device.device_id;
	out->ndim = t->ndim;
	out->dtype_code = t->dtype.code;
	out->dtype_bits = t->dtype.bits;
	out->dtype_lanes = t->dtype.lanes;
	out->shape = t->shape;
	out->strides = t->strides;
	return true;
}

bool sluice_go_dlpack_delete(void *tensor, uint32_t format) {
	if (format == SLUICE_DLPACK_VERSIONED) {
		go_dl_versioned *v = tensor;
		if (v->deleter) v->deleter(v);
		return true;
	}
	if (format == SLUICE_DLPACK_UNVERSIONED) {
		go_dl_unversioned *u = tensor;
		if (u->deleter) u->deleter(u);
		return true;
	}
	return false;
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

// The log queue: a ring of messages copied into C memory, guarded by log_mu.
// The receiver runs on whatever thread logs, possibly under the library's
// locks: it only copies the message, takes log_mu and returns.
#define SLUICE_GO_LOG_QUEUE 1024

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_cv = PTHREAD_COND_INITIALIZER;
static sluice_go_log_msg_t log_ring[SLUICE_GO_LOG_QUEUE];
static size_t log_head, log_len;
static uint64_t log_queued, log_dropped;
static bool log_wake;

static void sluice_go_log(uint32_t level, const char *message, void *user_data) {
	(void)user_data;
	char *text = strdup(message ? message : "");
	pthread_mutex_lock(&log_mu);
	if (text && log_len < SLUICE_GO_LOG_QUEUE) {
		size_t i = (log_head + log_len) % SLUICE_GO_LOG_QUEUE;
		log_ring[i].text = text;
		log_ring[i].level = level;
		text = NULL;
		log_len++;
		log_queued++;
	} else {
		log_dropped++;
	}
	pthread_cond_signal(&log_cv);
	pthread_mutex_unlock(&log_mu);
	free(text);
}

sluice_error_t *sluice_go_log_set_callback(bool on) {
	return sluice_log_set_callback(on ? sluice_go_log : NULL, NULL);
}

sluice_go_log_batch_t sluice_go_log_take(sluice_go_log_msg_t *out, size_t max) {
	sluice_go_log_batch_t b = {0};
	// The texts of the previous take, which the taker has read by now.
	for (size_t i = 0; i < max; i++) {
		free(out[i].text);
		out[i].text = NULL;
	}
	pthread_mutex_lock(&log_mu);
	while (log_len == 0 && log_dropped == 0 && !log_wake) pthread_cond_wait(&log_cv, &log_mu);
	b.dropped = log_dropped;
	log_dropped = 0;
	while (b.n < max && log_len > 0) {
		out[b.n++] = log_ring[log_head];
		log_ring[log_head].text = NULL;
		log_head = (log_head + 1) % SLUICE_GO_LOG_QUEUE;
		log_len--;
	}
	if (b.n > 0) {
		b.last_seq = log_queued - log_len;
	} else if (log_wake && b.dropped == 0) {
		log_wake = false;
		b.woken = true;
	}
	pthread_mutex_unlock(&log_mu);
	return b;
}

uint64_t sluice_go_log_queued(void) {
	pthread_mutex_lock(&log_mu);
	uint64_t n = log_queued;
	pthread_mutex_unlock(&log_mu);
	return n;
}

void sluice_go_log_wake(void) {
	pthread_mutex_lock(&log_mu);
	log_wake = true;
	pthread_cond_broadcast(&log_cv);
	pthread_mutex_unlock(&log_mu);
}

void *sluice_go_ptr(uint64_t addr) { return (void *)(uintptr_t)addr; }

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int bench_after_call;
static uint64_t bench_after_word;

void sluice_go_bench_set_after_call(int mode) { bench_after_call = mode; }

// Code of `lines` 64-byte cache lines, each a jump to the next: an
// instruction footprint (cache lines and branch targets) with little work.
#if defined(__x86_64__)
#define CODE_LINES(name, lines)                                                            \
	static void __attribute__((noinline)) name(void) {                                       \
		__asm__ volatile(".p2align 6\n.rept " #lines "\njmp 1f\n.skip 62, 0xcc\n1:\n.endr\n" :: \
		                     : "memory");                                                    \
	}
#else
#define CODE_LINES(name, lines) \
	static void name(void) {}
#endif
CODE_LINES(code_4k, 64)
CODE_LINES(code_16k, 256)
CODE_LINES(code_64k, 1024)

// `after` is bench_after_call, read once before a loop, so that with no mode set
// the C baseline pays a test of a register per call, not a load.
static inline void after_call(int after) {
	switch (after) {
	case 1: __atomic_fetch_add(&bench_after_word, 1, __ATOMIC_SEQ_CST); break;
	case 2: __atomic_thread_fence(__ATOMIC_SEQ_CST); break;
	case 3: code_4k(); break;
	case 4: code_16k(); break;
	case 5: code_64k(); break;
	}
}

void sluice_go_bench_touch(unsigned char *buf, size_t kb) {
	for (size_t i = 0; i < kb * 1024; i += 64) buf[i]++;
}

uint64_t sluice_go_bench_touch_loop(unsigned char *buf, size_t kb, uint64_t n) {
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_go_bench_touch(buf, kb);
		after_call(after);
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_event(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out) {
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_event_t ev;
		sluice_error_t *e = sluice_event_record(stream, 0, &ev);
		after_call(after);
		if (!e) e = sluice_event_destroy(ev);
		after_call(after);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_op(sluice_stream_t stream, sluice_sync_t obj, uint64_t n,
                            sluice_error_t **err_out) {
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_op_t op;
		sluice_error_t *e = sluice_op_begin(stream, NULL, 0, &obj, 1, &op);
		after_call(after);
		if (!e) e = sluice_op_end(op);
		after_call(after);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_query(sluice_stream_t stream, uint64_t n, sluice_error_t **err_out) {
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		bool idle;
		sluice_error_t *e = sluice_stream_query(stream, &idle);
		after_call(after);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_op_sets(sluice_stream_t stream, const sluice_sync_t *reads, size_t num_reads,
                                 const sluice_sync_t *writes, size_t num_writes, uint64_t n,
                                 sluice_error_t **err_out) {
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_op_t op;
		sluice_error_t *e = sluice_op_begin(stream, reads, num_reads, writes, num_writes, &op);
		after_call(after);
		if (!e) e = sluice_op_end(op);
		after_call(after);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_copy(sluice_stream_t stream, sluice_buffer_t dst, sluice_buffer_t src,
                              size_t len, uint64_t n, sluice_error_t **err_out) {
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_error_t *e = sluice_stream_copy(stream, dst, 0, src, 0, len);
		after_call(after);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_memset(sluice_stream_t stream, sluice_buffer_t dst, size_t len, uint64_t n,
                                sluice_error_t **err_out) {
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_error_t *e = sluice_stream_memset(stream, dst, 0, (uint8_t)i, len);
		after_call(after);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

uint64_t sluice_go_bench_launch(sluice_stream_t stream, sluice_function_t function,
                                const sluice_launch_dims_t *dims, uint64_t *vals, size_t num_args,
                                const sluice_sync_t *reads, size_t num_reads,
                                const sluice_sync_t *writes, size_t num_writes, uint64_t n,
                                sluice_error_t **err_out) {
	void *ptrs[num_args > 0 ? num_args : 1];
	for (size_t i = 0; i < num_args; i++) ptrs[i] = &vals[i];
	void **args = num_args > 0 ? ptrs : NULL;
	const int after = bench_after_call;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		sluice_error_t *e = sluice_stream_launch(stream, function, dims, args, num_args, reads,
		                                         num_reads, writes, num_writes);
		after_call(after);
		if (e) {
			*err_out = e;
			return 0;
		}
	}
	return now_ns() - t0;
}

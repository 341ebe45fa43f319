/* A stand-in libcuda.so for profiling sluice's own per-call cost on a machine
 * without a GPU. Every entry point sluice probes exists; calls succeed at once and
 * do no device work (kernels never run, copies copy nothing). Not for tests of data.
 *
 *   MOCKCUDA_TOUCH_KB=N  each stream, event and launch call reads and writes N KiB
 *                        of private memory, a rough model of the driver's cache
 *                        footprint (default 0).
 *   MOCKCUDA_CALL_NS=N   each of those calls also spins N ns, a rough model of the
 *                        driver's own time per call (default 0).
 *   MOCKCUDA_COPY_GBPS=R a copy engine's timing: each cuMemcpyAsync takes
 *                        MOCKCUDA_COPY_US (default 0) plus len/R on its stream's
 *                        clock; events, queries and waits follow that clock (spin).
 *   MOCKCUDA_PINNED=1    cuMemHostAlloc'd and registered memory is host memory to
 *                        cuPointerGetAttributes (else nothing is).
 *
 * Build: cc -O2 -shared -fPIC -o libcuda.so.1 mockcuda.c  (see scripts/profile-host.sh) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

typedef int CUresult;
static __thread void *current_ctx;
static char primary_ctx;
static unsigned char *scratch;
static size_t touch_bytes;
static int inited;

static uint64_t call_ns;
static uint64_t now_ns(void);
static void touch(void) {
    if (call_ns) {
        uint64_t end = now_ns() + call_ns;
        while (now_ns() < end) {}
    }
    if (!touch_bytes) return;
    for (size_t i = 0; i < touch_bytes; i += 64) scratch[i]++;
}

/* Streams and events are 64 zeroed bytes; word 0 is when their work ends (ns). */
static void *fresh(void) { return calloc(1, 64); }

static double copy_ns_per_byte;
static uint64_t copy_fixed_ns;
static uint64_t null_tail;
static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
static uint64_t *clock_of(void *o) { return o ? (uint64_t *)o : &null_tail; }
static uint64_t when(void *o) { return __atomic_load_n(clock_of(o), __ATOMIC_ACQUIRE); }
static void spin_until(uint64_t t) { while (copy_ns_per_byte > 0 && now_ns() < t) {} }
static int pending(void *o) { return copy_ns_per_byte > 0 && now_ns() < when(o); }

static int track_pinned;
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t p, n; } pins[1024];
static void pin_add(void *p, size_t n) {
    if (!track_pinned) return;
    pthread_mutex_lock(&pin_lock);
    for (int i = 0; i < 1024; i++)
        if (!pins[i].p) { pins[i].p = (uint64_t)(uintptr_t)p; pins[i].n = n; break; }
    pthread_mutex_unlock(&pin_lock);
}
static void pin_del(void *p) {
    pthread_mutex_lock(&pin_lock);
    for (int i = 0; i < 1024; i++)
        if (pins[i].p == (uint64_t)(uintptr_t)p) { pins[i].p = 0; break; }
    pthread_mutex_unlock(&pin_lock);
}
static int pin_find(uint64_t p, uint64_t *start, uint64_t *n) {
    int found = 0;
    pthread_mutex_lock(&pin_lock);
    for (int i = 0; i < 1024 && !found; i++)
        if (pins[i].p && pins[i].p <= p && p < pins[i].p + pins[i].n) { *start = pins[i].p; *n = pins[i].n; found = 1; }
    pthread_mutex_unlock(&pin_lock);
    return found;
}

CUresult cuInit(unsigned f) {
    (void)f;
    const char *t = getenv("MOCKCUDA_TOUCH_KB");
    touch_bytes = t ? (size_t)atoi(t) * 1024 : 0;
    if (touch_bytes) scratch = calloc(1, touch_bytes);
    const char *r = getenv("MOCKCUDA_COPY_GBPS");
    copy_ns_per_byte = r ? 1.0 / atof(r) : 0;
    const char *u = getenv("MOCKCUDA_COPY_US");
    copy_fixed_ns = u ? (uint64_t)(atof(u) * 1000) : 0;
    track_pinned = getenv("MOCKCUDA_PINNED") != NULL;
    const char *c = getenv("MOCKCUDA_CALL_NS");
    call_ns = c ? (uint64_t)atoll(c) : 0;
    inited = 1;
    return 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuGetErrorName(int r, const char **s) { (void)r; *s = "CUDA_ERROR_MOCK"; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = o; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGetName(char *n, int len, int d) { (void)d; strncpy(n, "mockcuda", (size_t)len); return 0; }
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)80 << 30; return 0; }
CUresult cuDeviceGetAttribute(int *v, unsigned a, int d) {
    (void)d;
    switch (a) {
    case 75: *v = 9; break;  /* compute capability major */
    case 76: *v = 0; break;  /* minor */
    case 16: *v = 132; break; /* multiprocessors */
    default: *v = 1;
    }
    return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = &primary_ctx; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = current_ctx; return 0; }
CUresult cuCtxSetCurrent(void *c) { current_ctx = c; return 0; }
CUresult cuCtxGetStreamPriorityRange(int *lo, int *hi) { *lo = 0; *hi = -5; return 0; }
CUresult cuStreamCreateWithPriority(void **s, unsigned f, int p) { (void)f; (void)p; *s = fresh(); return 0; }
CUresult cuStreamDestroy_v2(void *s) { free(s); return 0; }
CUresult cuStreamGetFlags(void *s, unsigned *f) { (void)s; *f = 1; return 0; }
CUresult cuStreamGetCtx(void *s, void **c) { (void)s; *c = &primary_ctx; return 0; }
CUresult cuStreamQuery(void *s) { touch(); return pending(s) ? 600 : 0; }
CUresult cuStreamSynchronize(void *s) { touch(); spin_until(when(s)); return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) {
    (void)f;
    touch();
    if (when(e) > when(s)) __atomic_store_n(clock_of(s), when(e), __ATOMIC_RELEASE);
    return 0;
}
CUresult cuLaunchHostFunc(void *s, void (*fn)(void *), void *u) { (void)s; fn(u); return 0; }
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = fresh(); return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
CUresult cuEventRecord(void *e, void *s) { touch(); __atomic_store_n(clock_of(e), when(s), __ATOMIC_RELEASE); return 0; }
CUresult cuEventQuery(void *e) { return pending(e) ? 600 : 0; }
CUresult cuEventSynchronize(void *e) { touch(); spin_until(when(e)); return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 1.0f; return 0; }
CUresult cuMemAllocAsync(uint64_t *p, size_t n, void *s) { (void)s; *p = (uint64_t)(uintptr_t)malloc(n ? n : 1); touch(); return 0; }
CUresult cuMemFreeAsync(uint64_t p, void *s) { (void)s; free((void *)(uintptr_t)p); touch(); return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { (void)f; *p = malloc(n ? n : 1); pin_add(*p, n); return 0; }
CUresult cuMemFreeHost(void *p) { pin_del(p); free(p); return 0; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned f) { (void)f; pin_add(p, n); return 0; }
CUresult cuMemHostUnregister(void *p) { pin_del(p); return 0; }
CUresult cuPointerGetAttributes(unsigned n, unsigned *a, void **d, uint64_t p) {
    uint64_t start = 0, size = 0;
    int host = pin_find(p, &start, &size);
    for (unsigned i = 0; i < n; i++) {
        if (a[i] == 2) *(unsigned *)d[i] = host ? 1 : 0;   /* memory type */
        else if (a[i] == 11) *(uint64_t *)d[i] = start;    /* range start */
        else if (a[i] == 12) *(size_t *)d[i] = size;       /* range size */
        else memset(d[i], 0, 4);
    }
    return 0;
}
CUresult cuMemcpyAsync(uint64_t d, uint64_t s, size_t n, void *st) {
    (void)d; (void)s;
    touch();
    if (copy_ns_per_byte > 0) {
        uint64_t t = now_ns() > when(st) ? now_ns() : when(st);
        __atomic_store_n(clock_of(st), t + copy_fixed_ns + (uint64_t)(n * copy_ns_per_byte), __ATOMIC_RELEASE);
    }
    return 0;
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *s, size_t n, void *st) { (void)d; (void)s; (void)n; (void)st; touch(); return 0; }
CUresult cuMemsetD8Async(uint64_t d, unsigned char v, size_t n, void *st) { (void)d; (void)v; (void)n; (void)st; touch(); return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, unsigned *o, void **v) { (void)img; (void)n; (void)o; (void)v; *m = fresh(); return 0; }
CUresult cuModuleUnload(void *m) { free(m); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { (void)m; (void)name; *f = fresh(); return 0; }
CUresult cuFuncSetAttribute(void *f, unsigned attr, int v) { (void)f; (void)attr; (void)v; return 0; }
CUresult cuFuncGetAttribute(int *v, unsigned attr, void *f) { (void)attr; (void)f; *v = 0; return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *s, void **args, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sh; (void)s; (void)args; (void)extra;
    touch();
    return 0;
}
CUresult cuLaunchKernelEx(const void *config, void *f, void **args, void **extra) {
    (void)config; (void)f; (void)args; (void)extra;
    touch();
    return 0;
}
CUresult cuStreamBeginCapture_v2(void *s, unsigned m) { (void)s; (void)m; return 0; }
CUresult cuStreamEndCapture(void *s, void **g) { (void)s; *g = fresh(); return 0; }
CUresult cuStreamIsCapturing(void *s, unsigned *st) { (void)s; *st = 0; return 0; }
CUresult cuGraphDestroy(void *g) { free(g); return 0; }
CUresult cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long f) { (void)g; (void)f; *e = fresh(); return 0; }
CUresult cuGraphExecDestroy(void *e) { free(e); return 0; }
CUresult cuGraphUpload(void *e, void *s) { (void)e; (void)s; return 0; }
CUresult cuGraphLaunch(void *e, void *s) { (void)e; (void)s; touch(); return 0; }
CUresult cuGraphExecUpdate_v2(void *e, void *g, void *info) { (void)e; (void)g; (void)info; return 0; }
CUresult cuGraphNodeGetType(void *n, unsigned *t) { (void)n; *t = 0; return 0; }
CUresult cuGraphGetNodes(void *g, void **nodes, size_t *n) { (void)g; (void)nodes; *n = 0; return 0; }
CUresult cuGraphDebugDotPrint(void *g, const char *path, unsigned f) { (void)g; (void)path; (void)f; return 0; }
CUresult cuPointerGetAttribute(void *data, unsigned attr, unsigned long long p) { (void)data; (void)attr; (void)p; return 1; }

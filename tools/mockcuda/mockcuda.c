/* A stand-in libcuda.so for profiling sluice's own per-call cost on a machine
 * without a GPU. Every entry point sluice probes exists; calls succeed at once and
 * do no device work (kernels never run, copies copy nothing). Not for tests of data.
 *
 *   MOCKCUDA_TOUCH_KB=N  each stream, event and launch call reads and writes N KiB
 *                        of private memory, a rough model of the driver's cache
 *                        footprint (default 0).
 *
 * Build: cc -O2 -shared -fPIC -o libcuda.so.1 mockcuda.c  (see scripts/profile-host.sh) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static __thread void *current_ctx;
static char primary_ctx;
static unsigned char *scratch;
static size_t touch_bytes;
static int inited;

static void touch(void) {
    if (!touch_bytes) return;
    for (size_t i = 0; i < touch_bytes; i += 64) scratch[i]++;
}

static void *fresh(void) { return malloc(64); }

CUresult cuInit(unsigned f) {
    (void)f;
    const char *t = getenv("MOCKCUDA_TOUCH_KB");
    touch_bytes = t ? (size_t)atoi(t) * 1024 : 0;
    if (touch_bytes) scratch = calloc(1, touch_bytes);
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
CUresult cuStreamQuery(void *s) { (void)s; touch(); return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; touch(); return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; touch(); return 0; }
CUresult cuLaunchHostFunc(void *s, void (*fn)(void *), void *u) { (void)s; fn(u); return 0; }
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = fresh(); return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
CUresult cuEventRecord(void *e, void *s) { (void)e; (void)s; touch(); return 0; }
CUresult cuEventQuery(void *e) { (void)e; return 0; }
CUresult cuEventSynchronize(void *e) { (void)e; touch(); return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 1.0f; return 0; }
CUresult cuMemAllocAsync(uint64_t *p, size_t n, void *s) { (void)s; *p = (uint64_t)(uintptr_t)malloc(n ? n : 1); touch(); return 0; }
CUresult cuMemFreeAsync(uint64_t p, void *s) { (void)s; free((void *)(uintptr_t)p); touch(); return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { (void)f; *p = malloc(n ? n : 1); return 0; }
CUresult cuMemFreeHost(void *p) { free(p); return 0; }
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned f) { (void)p; (void)n; (void)f; return 0; }
CUresult cuMemHostUnregister(void *p) { (void)p; return 0; }
CUresult cuPointerGetAttributes(unsigned n, unsigned *a, void **d, uint64_t p) {
    (void)a; (void)p;
    for (unsigned i = 0; i < n; i++) memset(d[i], 0, 4);
    return 0;
}
CUresult cuMemcpyAsync(uint64_t d, uint64_t s, size_t n, void *st) { (void)d; (void)s; (void)n; (void)st; touch(); return 0; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void *s, size_t n, void *st) { (void)d; (void)s; (void)n; (void)st; touch(); return 0; }
CUresult cuMemsetD8Async(uint64_t d, unsigned char v, size_t n, void *st) { (void)d; (void)v; (void)n; (void)st; touch(); return 0; }
CUresult cuModuleLoadDataEx(void **m, const void *img, unsigned n, unsigned *o, void **v) { (void)img; (void)n; (void)o; (void)v; *m = fresh(); return 0; }
CUresult cuModuleUnload(void *m) { free(m); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { (void)m; (void)name; *f = fresh(); return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sh, void *s, void **args, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sh; (void)s; (void)args; (void)extra;
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

/* The driver's answers that the host backend imitates (docs/reliability.md, the
 * host fidelity items):
 *   query/sync: cuEventQuery and cuEventSynchronize on an event whose last record
 *     was made in a live capture (and what the capture's end says afterwards), and
 *     on one whose capture has ended.
 *   update: cuGraphExecUpdate between captured graphs: changed parameters (memset
 *     value, addresses, sizes), a changed node type, an event record or a fork with
 *     no work in one of them (no node), changed edges with the same per-stream work,
 *     the same graph captured in another interleaving of two forked streams, and a
 *     copy whose memory type changes (device to device, against pinned host to
 *     device), and a redundant edge (a -> c beside a -> b -> c) against none.
 * Build: cc -O2 -I$CUDA/include -o graph_update_fidelity graph_update_fidelity.c -lcuda
 * Prints one line per case. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s = %d\n", #x, r_); exit(1); } } while (0)
#define N 4096

static CUstream o, f1, f2;
static CUevent e1, e2, e3;
static CUdeviceptr X, Y, Z;
static void *P;

static const char *name(CUresult r) {
  const char *s = "?";
  cuGetErrorName(r, &s);
  return s;
}

static size_t nodes(CUgraph g) {
  size_t n = 0;
  CK(cuGraphGetNodes(g, NULL, &n));
  return n;
}

static CUgraph capture(void (*body)(int), int v) {
  CUgraph g = NULL;
  CK(cuStreamBeginCapture(o, CU_STREAM_CAPTURE_MODE_RELAXED));
  body(v);
  CK(cuStreamEndCapture(o, &g));
  return g;
}

static void update(const char *what, void (*a)(int), int va, void (*b)(int), int vb) {
  CUgraph ga = capture(a, va), gb = capture(b, vb);
  CUgraphExec ex;
  CK(cuGraphInstantiate(&ex, ga, 0));
  CUgraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  CUresult r = cuGraphExecUpdate(ex, gb, &info);
  int ty = -1;
  if (info.errorNode) {
    CUgraphNodeType t;
    if (cuGraphNodeGetType(info.errorNode, &t) == CUDA_SUCCESS) ty = (int)t;
  }
  printf("update %-34s nodes %zu -> %zu: %d %s, result %d, error node type %d\n", what,
         nodes(ga), nodes(gb), (int)r, name(r), (int)info.result, ty);
  CK(cuGraphExecDestroy(ex));
  CK(cuGraphDestroy(ga));
  CK(cuGraphDestroy(gb));
}

/* memset X; copy X -> Y. v moves the addresses and the value. */
static void base(int v) {
  CK(cuMemsetD8Async(X + v * 64, (unsigned char)(v + 1), N / 2, o));
  CK(cuMemcpyAsync(Y + v * 64, X + v * 128, N / 2, o));
}
/* the same with an event recorded between (no node) */
static void base_recorded(int v) {
  CK(cuMemsetD8Async(X, (unsigned char)(v + 1), N / 2, o));
  CK(cuEventRecord(e1, o));
  CK(cuMemcpyAsync(Y, X, N / 2, o));
}
/* the same with a fork that does no work, joined back */
static void base_empty_fork(int v) {
  CK(cuMemsetD8Async(X, (unsigned char)(v + 1), N / 2, o));
  CK(cuEventRecord(e1, o));
  CK(cuStreamWaitEvent(f1, e1, 0));
  CK(cuEventRecord(e2, f1));
  CK(cuStreamWaitEvent(o, e2, 0));
  CK(cuMemcpyAsync(Y, X, N / 2, o));
}
static void sizes(int v) {
  CK(cuMemsetD8Async(X, 1, v ? N : N / 2, o));
  CK(cuMemcpyAsync(Y, X, v ? N : N / 2, o));
}
/* memset X; then memset Y (v = 0) or copy X -> Y (v = 1) */
static void kinds(int v) {
  CK(cuMemsetD8Async(X, 1, N, o));
  if (v)
    CK(cuMemcpyAsync(Y, X, N, o));
  else
    CK(cuMemsetD8Async(Y, 2, N, o));
}
/* a on o; b on a fork from after a (v = 0) or from after c (v = 1); c on o; join */
static void edges(int v) {
  CK(cuMemsetD8Async(X, 1, N, o));
  if (v) CK(cuMemsetD8Async(Z, 3, N, o));
  CK(cuEventRecord(e1, o));
  CK(cuStreamWaitEvent(f1, e1, 0));
  CK(cuMemsetD8Async(Y, 2, N, f1));
  if (!v) CK(cuMemsetD8Async(Z, 3, N, o));
  CK(cuEventRecord(e2, f1));
  CK(cuStreamWaitEvent(o, e2, 0));
}
/* two forks with two ops each (f1: memsets, f2: copies), issued interleaved (v = 0)
 * or one fork's ops first (v = 1) */
static void interleave(int v) {
  CK(cuEventRecord(e1, o));
  CK(cuStreamWaitEvent(f1, e1, 0));
  CK(cuStreamWaitEvent(f2, e1, 0));
  if (v) {
    CK(cuMemsetD8Async(X, 1, N, f1));
    CK(cuMemsetD8Async(X, 2, N, f1));
    CK(cuMemcpyAsync(Z, Y, N, f2));
    CK(cuMemcpyAsync(Z, Y, N, f2));
  } else {
    CK(cuMemsetD8Async(X, 1, N, f1));
    CK(cuMemcpyAsync(Z, Y, N, f2));
    CK(cuMemsetD8Async(X, 2, N, f1));
    CK(cuMemcpyAsync(Z, Y, N, f2));
  }
  CK(cuEventRecord(e2, f1));
  CK(cuEventRecord(e3, f2));
  CK(cuStreamWaitEvent(o, e2, 0));
  CK(cuStreamWaitEvent(o, e3, 0));
}
/* the same, all four memsets */
static void interleave_same(int v) {
  CK(cuEventRecord(e1, o));
  CK(cuStreamWaitEvent(f1, e1, 0));
  CK(cuStreamWaitEvent(f2, e1, 0));
  if (v) {
    CK(cuMemsetD8Async(X, 1, N, f1));
    CK(cuMemsetD8Async(X, 2, N, f1));
    CK(cuMemsetD8Async(Z, 3, N, f2));
    CK(cuMemsetD8Async(Z, 4, N, f2));
  } else {
    CK(cuMemsetD8Async(X, 1, N, f1));
    CK(cuMemsetD8Async(Z, 3, N, f2));
    CK(cuMemsetD8Async(X, 2, N, f1));
    CK(cuMemsetD8Async(Z, 4, N, f2));
  }
  CK(cuEventRecord(e2, f1));
  CK(cuEventRecord(e3, f2));
  CK(cuStreamWaitEvent(o, e2, 0));
  CK(cuStreamWaitEvent(o, e3, 0));
}
/* the two forks swapped: which fork joins first */
static void fork_order(int v) {
  CUstream a = v ? f2 : f1, b = v ? f1 : f2;
  CK(cuEventRecord(e1, o));
  CK(cuStreamWaitEvent(a, e1, 0));
  CK(cuStreamWaitEvent(b, e1, 0));
  CK(cuMemsetD8Async(X, 1, N, f1));
  CK(cuMemcpyAsync(Z, Y, N, f2));
  CK(cuEventRecord(e2, f1));
  CK(cuEventRecord(e3, f2));
  CK(cuStreamWaitEvent(o, e2, 0));
  CK(cuStreamWaitEvent(o, e3, 0));
}
/* a; b on a fork after a; then c on o after joining the fork (v = 0: c depends on a
 * and b, a redundant edge unless the driver prunes it) or c on the fork before the
 * join (v = 1: a -> b -> c) */
static void redundant(int v) {
  CK(cuMemsetD8Async(X, 1, N, o));
  CK(cuEventRecord(e1, o));
  CK(cuStreamWaitEvent(f1, e1, 0));
  CK(cuMemsetD8Async(Y, 2, N, f1));
  if (v) CK(cuMemsetD8Async(Z, 3, N, f1));
  CK(cuEventRecord(e2, f1));
  CK(cuStreamWaitEvent(o, e2, 0));
  if (!v) CK(cuMemsetD8Async(Z, 3, N, o));
}
/* b on a fork, a on o, then c after both: joined on o (v = 0: c's edges from a,
 * then b) or on the fork (v = 1: from b, then a); the same nodes and edges */
static void edge_order(int v) {
  CK(cuEventRecord(e1, o));
  CK(cuStreamWaitEvent(f1, e1, 0));
  CK(cuMemsetD8Async(Y, 2, N, f1));
  CK(cuMemsetD8Async(X, 1, N, o));
  if (v) {
    CK(cuEventRecord(e2, o));
    CK(cuStreamWaitEvent(f1, e2, 0));
    CK(cuMemsetD8Async(Z, 3, N, f1));
    CK(cuEventRecord(e3, f1));
    CK(cuStreamWaitEvent(o, e3, 0));
  } else {
    CK(cuEventRecord(e2, f1));
    CK(cuStreamWaitEvent(o, e2, 0));
    CK(cuMemsetD8Async(Z, 3, N, o));
  }
}
/* a copy into Y from device memory (v = 0) or from pinned host memory (v = 1) */
static void memtype(int v) {
  CK(cuMemcpyAsync(Y, v ? (CUdeviceptr)P : X, N, o));
}
/* a copy from device memory into Y (v = 0) or into pinned host memory (v = 1) */
static void memtype_dst(int v) {
  CK(cuMemcpyAsync(v ? (CUdeviceptr)P : Y, X, N, o));
}

static void captured_event(const char *what, int sync) {
  CK(cuStreamBeginCapture(o, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuMemsetD8Async(X, 1, N, o));
  CK(cuEventRecord(e1, o));
  CUresult r = sync ? cuEventSynchronize(e1) : cuEventQuery(e1);
  CUstreamCaptureStatus st;
  CK(cuStreamIsCapturing(o, &st));
  CUgraph g = NULL;
  CUresult end = cuStreamEndCapture(o, &g);
  printf("%s in a live capture: %d %s; capture status then %d; end %d %s, graph %s\n", what,
         (int)r, name(r), (int)st, (int)end, name(end), g ? "made" : "NULL");
  if (g) CK(cuGraphDestroy(g));
  CK(cuStreamBeginCapture(o, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuEventRecord(e1, o));
  CK(cuStreamEndCapture(o, &g));
  CK(cuGraphDestroy(g));
  r = sync ? cuEventSynchronize(e1) : cuEventQuery(e1);
  printf("%s after its capture ended: %d %s\n", what, (int)r, name(r));
  CK(cuEventRecord(e1, o));
  r = sync ? cuEventSynchronize(e1) : cuEventQuery(e1);
  printf("%s recorded again outside: %d %s\n", what, (int)r, name(r));
  CK(cuStreamSynchronize(o));
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  int ver = 0;
  CK(cuInit(0));
  CK(cuDriverGetVersion(&ver));
  printf("driver %d\n", ver);
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&o, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&f1, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&f2, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
  CK(cuMemAlloc(&X, 2 * N));
  CK(cuMemAlloc(&Y, 2 * N));
  CK(cuMemAlloc(&Z, 2 * N));
  CK(cuMemHostAlloc(&P, N, CU_MEMHOSTALLOC_PORTABLE));

  captured_event("query", 0);
  captured_event("synchronize", 1);

  update("params (value, addresses)", base, 0, base, 3);
  update("sizes", sizes, 0, sizes, 1);
  update("event record added", base, 0, base_recorded, 0);
  update("empty fork added", base, 0, base_empty_fork, 0);
  update("memset -> memcpy", kinds, 0, kinds, 1);
  update("edges (fork point moved)", edges, 0, edges, 1);
  update("interleaving (types differ)", interleave, 0, interleave, 1);
  update("interleaving (all memsets)", interleave_same, 0, interleave_same, 1);
  update("fork order", fork_order, 0, fork_order, 1);
  update("redundant edge", redundant, 0, redundant, 1);
  update("edge order", edge_order, 0, edge_order, 1);
  update("copy source dev -> pinned", memtype, 0, memtype, 1);
  update("copy destination dev -> pinned", memtype_dst, 0, memtype_dst, 1);
  return 0;
}

/* What does the driver return for a wait on an event recorded in a capture that has
 * ended? sluice refuses such waits itself (capture::check_wait, found by TSan on the
 * host backend; docs/decisions.md); this probe checks the driver's own answer in the
 * three cases sluice refuses or allows:
 *   ended:   A captured, recorded E, ended; B (not capturing) waits on E.
 *   again:   the same, while A captures again.
 *   other:   B captures on its own and waits on E recorded in A's live capture.
 *   fork:    B (not capturing) waits on E of A's live capture: a fork (allowed).
 * Build: cc -O2 -I$CUDA/include -o captured_event_wait captured_event_wait.c -lcuda
 * Prints one line per case: the CUresult of cuStreamWaitEvent and its name. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s = %d\n", #x, r_); exit(1); } } while (0)

static void report(const char *what, CUresult r) {
  const char *name = "?";
  cuGetErrorName(r, &name);
  printf("captured_event_wait %s: %d %s\n", what, (int)r, name);
}

/* Ends any capture left on s, discarding its graph. */
static void end_capture(CUstream s) {
  CUstreamCaptureStatus st;
  CK(cuStreamIsCapturing(s, &st));
  if (st != CU_STREAM_CAPTURE_STATUS_NONE) {
    CUgraph g = NULL;
    cuStreamEndCapture(s, &g);
    if (g) cuGraphDestroy(g);
  }
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUstream a, b;
  CUevent e;
  CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CUgraph g;

  CK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuEventRecord(e, a));
  CK(cuStreamEndCapture(a, &g));
  CK(cuGraphDestroy(g));
  report("ended", cuStreamWaitEvent(b, e, 0));
  end_capture(b);

  CK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
  report("again", cuStreamWaitEvent(b, e, 0));
  end_capture(b);
  end_capture(a);

  CK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuEventRecord(e, a));
  CK(cuStreamBeginCapture(b, CU_STREAM_CAPTURE_MODE_RELAXED));
  report("other", cuStreamWaitEvent(b, e, 0));
  end_capture(b);
  report("fork", cuStreamWaitEvent(b, e, 0));
  end_capture(a);
  end_capture(b);

  cuEventDestroy(e);
  cuStreamDestroy(a);
  cuStreamDestroy(b);
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}

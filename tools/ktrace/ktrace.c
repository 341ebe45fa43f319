// CUDA_INJECTION64_PATH library: every kernel's device start and end (CUPTI
// activity, graph nodes included) as CSV lines start,end,stream,graphnode,name
// (nanoseconds) into $KTRACE_OUT, written as CUPTI hands back its buffers.
// Buffers are handed back every 10 ms, and all of them at exit where atexit
// runs; a Go program exits without it, so its last 10 ms may be missing.
// build.sh builds it; gaps.py summarises a window of steps.
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#ifndef KREC
#define KREC CUpti_ActivityKernel9
#endif
static FILE *out;
static void CUPTIAPI buf_req(uint8_t **buf, size_t *size, size_t *max) {
  *size = 256 << 10;
  *buf = aligned_alloc(8, *size);
  *max = 0;
}
static void CUPTIAPI buf_done(CUcontext c, uint32_t s, uint8_t *buf, size_t size, size_t valid) {
  CUpti_Activity *r = NULL;
  while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      KREC *k = (KREC *)r;
      fprintf(out, "%llu,%llu,%u,%llu,%s\n", (unsigned long long)k->start, (unsigned long long)k->end,
              k->streamId, (unsigned long long)k->graphNodeId, k->name);
    }
  }
  fflush(out);
  free(buf);
}
static void flush_all(void) { cuptiActivityFlushAll(1); }
int InitializeInjection(void) {
  const char *p = getenv("KTRACE_OUT");
  out = fopen(p ? p : "/tmp/ktrace.csv", "w");
  if (!out) return 0;
  cuptiActivityRegisterCallbacks(buf_req, buf_done);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushPeriod(10);
  atexit(flush_all);
  return 1;
}

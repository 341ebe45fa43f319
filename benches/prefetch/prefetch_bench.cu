// GPU benchmark of the sluice prefetcher (issue 12): does it hide the H2D copy of
// the next batch behind the compute of the current one as well as hand-written CUDA
// double buffering does?
//
// Build (from the repository root; benches/prefetch/run.sh does this, with the
// arch taken from nvidia-smi's compute_cap):
//   nvcc -O2 -std=c++17 -arch=sm_90 benches/prefetch/prefetch_bench.cu -I include -L .gpu -lsluice -lcuda -lpthread -Xlinker -rpath=$PWD/.gpu -o /tmp/sluice-prefetch-build/prefetch_bench
// Run:
//   /tmp/sluice-prefetch-build/prefetch_bench
//
// Environment (all optional):
//   SLUICE_BENCH_N       measured batches per run (default 60)
//   SLUICE_BENCH_WARMUP  warm-up batches per run before them (default 5, at least 1)
//   SLUICE_BENCH_REPS    runs per variant and ratio; the median is reported (default 3)
//   SLUICE_BENCH_MB      batch size in MiB (default 64)
//   SLUICE_BENCH_KB      batch size in KiB, in place of SLUICE_BENCH_MB (small batches:
//                        the trainer's are 200 KiB)
//   SLUICE_BENCH_STRICT  1: exit 2 when a goal fails (errors always exit 1)
//
// Variants, each over WARMUP + N batches (ms per step = time between the ends of the
// compute of batch WARMUP-1 and of the last batch, by CUDA events on the consumer's
// stream, divided by N):
//   (a)  sluice prefetcher, depth 2, zero-copy push: a producer std::thread takes a
//        slot (sluice_prefetcher_acquire), writes the batch's sequence number into
//        its first 4 bytes and submits it; the consumer takes it with
//        sluice_prefetcher_next on a sluice stream, launches the compute kernel with
//        <<<>>> on that stream's raw CUstream (ordered by the lease, a foreign op from
//        next to release) and releases it with sluice_batch_release.
//   (a') the same with sluice_prefetcher_push (a memcpy from pageable memory into the
//        pinned staging), for information only.
//   (a0) the prefetcher with no compute (copy only), for its copy GB/s.
//   (b)  raw CUDA double buffering: two pinned host slots, two device slots, a copy
//        stream and a compute stream and events in both directions.
//   (c)  blocking: cudaMemcpy (synchronous, from pinned memory), kernel, sync, per
//        batch (what a synchronous data.To(device) does).
// The compute kernel is a loop of dependent FMAs over the batch; its iteration count
// is calibrated in this run so that it takes 0.5x, 1x and 2x one batch's pinned H2D
// copy time. Every batch's first 4 bytes carry (tag + its sequence number) and the
// kernel stores what it read, so every run checks that batch i saw batch i.
//
// Output: a Markdown table, a goals section with PASS/FAIL lines, and
// "RESULT key=value" lines (benches/prefetch/run.sh compares them with
// torch_idiom.py's).

#include <cuda_runtime.h>

#include "sluice.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// ---------------------------------------------------------------- errors

[[noreturn]] static void die(const std::string& msg) {
    fflush(stdout);
    fprintf(stderr, "prefetch_bench: %s\n", msg.c_str());
    fflush(stderr);
    std::_Exit(1);
}

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t ck_err_ = (call);                                                   \
        if (ck_err_ != cudaSuccess) {                                                   \
            die(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call + \
                " failed: " + cudaGetErrorName(ck_err_) + ": " +                        \
                cudaGetErrorString(ck_err_));                                           \
        }                                                                               \
    } while (0)

// The error's code name, message and driver code; frees the error.
static std::string sl_text(sluice_error_t* e) {
    std::string s = std::string(sluice_error_code_name(sluice_error_code(e))) + ": " +
                    sluice_error_message(e);
    uint32_t drv = sluice_error_driver_code(e);
    if (drv != 0) s += " (CUresult " + std::to_string(drv) + ")";
    sluice_error_free(e);
    return s;
}

#define SL(call)                                                                        \
    do {                                                                                \
        sluice_error_t* sl_err_ = (call);                                               \
        if (sl_err_ != nullptr) {                                                       \
            die(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + #call + \
                " failed: " + sl_text(sl_err_));                                        \
        }                                                                               \
    } while (0)

// ---------------------------------------------------------------- kernels

// The compute: `iters` dependent FMAs per 32-bit word of the batch. Thread 0 stores
// the batch's first word into seen[idx] (when seen is not null). The final store
// never happens (`never` is -1 and acc >= 0) but the compiler cannot know it.
__global__ void compute_kernel(const uint32_t* __restrict__ in, size_t n, int iters,
                               float never, float* __restrict__ sink,
                               uint32_t* __restrict__ seen, int idx) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    if (tid == 0 && seen != nullptr) seen[idx] = in[0];
    float acc = 0.0f;
    for (size_t i = tid; i < n; i += stride) {
        float x = (float)(in[i] & 1023u);
#pragma unroll 4
        for (int k = 0; k < iters; ++k) x = fmaf(x, 0.9999f, 0.0001f);
        acc += x;
    }
    if (acc == never) sink[tid & 1023] = acc;
}

// The copy-only runs' stand-in for the compute: stores the batch's first word.
__global__ void seen_kernel(const uint32_t* __restrict__ in, uint32_t* __restrict__ seen,
                            int idx) {
    seen[idx] = in[0];
}

// ---------------------------------------------------------------- setup

struct Bench {
    // Parameters.
    size_t batch = 64ull << 20;
    size_t words = 0;
    int n = 60;
    int warm = 5;
    int reps = 3;
    // Launch geometry of the compute kernel: one full wave.
    dim3 grid, block;
    // Raw CUDA resources.
    void* h_slot[2] = {nullptr, nullptr};  // pinned (cudaHostAlloc)
    void* d_slot[2] = {nullptr, nullptr};
    void* h_pageable = nullptr;            // source of (a')
    uint32_t* d_cal = nullptr;             // calibration input
    float* d_sink = nullptr;
    uint32_t* d_seen = nullptr;            // what each batch's kernel read
    cudaStream_t copy_stream = nullptr, compute_stream = nullptr;
    cudaEvent_t copy_done[2], compute_done[2];
    cudaEvent_t ev0, ev1;
    // sluice.
    sluice_device_t dev{0};
    sluice_stream_t stream{0};
    cudaStream_t stream_raw = nullptr;
    // A new tag for every run, so a stale slot from an earlier run is caught.
    uint32_t next_tag = 1;

    uint32_t tag() { return (next_tag++) << 20; }
    int total() const { return warm + n; }
};

static int env_int(const char* name, int def, int min) {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') return def;
    int x = atoi(v);
    return x >= min ? x : def;
}

static double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.0f;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

static void launch_compute(Bench& g, const void* in, int iters, cudaStream_t s,
                           uint32_t* seen, int idx) {
    compute_kernel<<<g.grid, g.block, 0, s>>>((const uint32_t*)in, g.words, iters, -1.0f,
                                              g.d_sink, seen, idx);
    CK(cudaGetLastError());
}

// Clears seen[0..total) and waits for it.
static void reset_seen(Bench& g) {
    CK(cudaMemset(g.d_seen, 0xff, (size_t)g.total() * sizeof(uint32_t)));
    CK(cudaDeviceSynchronize());
}

// Checks that batch i saw tag + i. Call once the run's streams are synchronised.
static void check_seen(Bench& g, uint32_t tag, const char* what) {
    std::vector<uint32_t> h((size_t)g.total());
    CK(cudaMemcpy(h.data(), g.d_seen, h.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    for (int i = 0; i < g.total(); ++i) {
        if (h[(size_t)i] != tag + (uint32_t)i) {
            char buf[256];
            snprintf(buf, sizeof buf,
                     "%s: data check failed: batch %d read 0x%08x, expected 0x%08x", what, i,
                     h[(size_t)i], tag + (uint32_t)i);
            die(buf);
        }
    }
}

// ---------------------------------------------------------------- calibration

// Median time of one pinned H2D copy of a batch, from `reps` copies back to back.
static double measure_copy_ms(Bench& g, int reps) {
    std::vector<cudaEvent_t> ev((size_t)reps + 1);
    for (auto& e : ev) CK(cudaEventCreate(&e));
    for (int k = 0; k < 2; ++k)
        CK(cudaMemcpyAsync(g.d_slot[0], g.h_slot[0], g.batch, cudaMemcpyHostToDevice,
                           g.copy_stream));
    CK(cudaEventRecord(ev[0], g.copy_stream));
    for (int k = 0; k < reps; ++k) {
        CK(cudaMemcpyAsync(g.d_slot[0], g.h_slot[0], g.batch, cudaMemcpyHostToDevice,
                           g.copy_stream));
        CK(cudaEventRecord(ev[(size_t)k + 1], g.copy_stream));
    }
    CK(cudaEventSynchronize(ev[(size_t)reps]));
    std::vector<double> t;
    for (int k = 0; k < reps; ++k) t.push_back(elapsed_ms(ev[(size_t)k], ev[(size_t)k + 1]));
    for (auto& e : ev) CK(cudaEventDestroy(e));
    return median(t);
}

// Median time of the compute kernel with `iters`, from `reps` launches back to back.
static double measure_compute_ms(Bench& g, int iters, int reps) {
    std::vector<cudaEvent_t> ev((size_t)reps + 1);
    for (auto& e : ev) CK(cudaEventCreate(&e));
    launch_compute(g, g.d_cal, iters, g.compute_stream, nullptr, 0);
    CK(cudaEventRecord(ev[0], g.compute_stream));
    for (int k = 0; k < reps; ++k) {
        launch_compute(g, g.d_cal, iters, g.compute_stream, nullptr, 0);
        CK(cudaEventRecord(ev[(size_t)k + 1], g.compute_stream));
    }
    CK(cudaEventSynchronize(ev[(size_t)reps]));
    std::vector<double> t;
    for (int k = 0; k < reps; ++k) t.push_back(elapsed_ms(ev[(size_t)k], ev[(size_t)k + 1]));
    for (auto& e : ev) CK(cudaEventDestroy(e));
    return median(t);
}

// The iteration count whose kernel time is closest to target_ms (binary search);
// writes that time, re-measured, to got_ms.
static int calibrate(Bench& g, double target_ms, double* got_ms) {
    int lo = 1;
    double tlo = measure_compute_ms(g, lo, 5);
    if (tlo >= target_ms) {
        *got_ms = measure_compute_ms(g, lo, 11);
        return lo;
    }
    int hi = 2;
    double thi = 0.0;
    while ((thi = measure_compute_ms(g, hi, 5)) < target_ms) {
        lo = hi;
        tlo = thi;
        if (hi >= (1 << 26)) die("calibration: the kernel never reaches the copy time");
        hi *= 2;
    }
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        double t = measure_compute_ms(g, mid, 5);
        if (t < target_ms) {
            lo = mid;
            tlo = t;
        } else {
            hi = mid;
            thi = t;
        }
    }
    int best = (target_ms - tlo <= thi - target_ms) ? lo : hi;
    *got_ms = measure_compute_ms(g, best, 11);
    return best;
}

// ---------------------------------------------------------------- (a), (a'), (a0)

enum class Feed { Acquire, Push };

struct PfResult {
    double step_ms = 0.0;
    double copy_gbps = 0.0;  // sluice_prefetcher_stats
    double producer_wait_ms = 0.0;
    double consumer_wait_ms = 0.0;
};

// The consumer's host wait for a batch; generous, so a hang becomes an error.
static const uint32_t kNextTimeoutMs = 60000;

// One run of the prefetcher. iters < 0: no compute (copy only).
static PfResult run_prefetcher(Bench& g, Feed feed, int iters, const char* what) {
    const int total = g.total();
    const uint32_t tag = g.tag();
    reset_seen(g);

    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.depth = 2;
    cfg.segments = 1;
    cfg.capacity[0] = g.batch;
    cfg.fill = nullptr;  // push mode
    cfg.user_data = nullptr;
    cfg.producer_threads = 0;
    sluice_prefetcher_t pf;
    SL(sluice_prefetcher_create(g.dev, &cfg, &pf));

    std::mutex mu;
    std::string producer_error;  // under mu
    auto set_error = [&](const std::string& m) {
        std::lock_guard<std::mutex> lock(mu);
        if (producer_error.empty()) producer_error = m;
    };

    std::thread producer([&] {
        for (int i = 0; i < total; ++i) {
            if (feed == Feed::Acquire) {
                sluice_prefetch_fill_t f;
                memset(&f, 0, sizeof f);
                sluice_error_t* e = sluice_prefetcher_acquire(pf, SLUICE_WAIT_FOREVER, &f);
                if (e != nullptr) {
                    set_error("sluice_prefetcher_acquire of batch " + std::to_string(i) +
                              ": " + sl_text(e));
                    break;
                }
                if (f.seq != (uint64_t)i || f.segments != 1 || f.capacity[0] < g.batch ||
                    f.host[0] == nullptr) {
                    set_error("sluice_prefetcher_acquire of batch " + std::to_string(i) +
                              " gave seq " + std::to_string(f.seq) + ", " +
                              std::to_string(f.segments) + " segments, capacity " +
                              std::to_string(f.capacity[0]));
                    sluice_error_t* c = sluice_prefetcher_cancel(pf, &f);
                    if (c != nullptr) sl_text(c);
                    break;
                }
                // Zero copy: the producer writes only the batch's sequence number.
                ((uint32_t*)f.host[0])[0] = tag + (uint32_t)i;
                f.len[0] = g.batch;
                e = sluice_prefetcher_submit(pf, &f);
                if (e != nullptr) {
                    set_error("sluice_prefetcher_submit of batch " + std::to_string(i) +
                              ": " + sl_text(e));
                    break;
                }
            } else {
                ((uint32_t*)g.h_pageable)[0] = tag + (uint32_t)i;
                sluice_prefetch_segment_t seg;
                seg.ptr = g.h_pageable;
                seg.len = g.batch;
                uint64_t seq = ~0ull;
                sluice_error_t* e =
                    sluice_prefetcher_push(pf, &seg, 1, SLUICE_WAIT_FOREVER, &seq);
                if (e != nullptr) {
                    set_error("sluice_prefetcher_push of batch " + std::to_string(i) + ": " +
                              sl_text(e));
                    break;
                }
                if (seq != (uint64_t)i) {
                    set_error("sluice_prefetcher_push of batch " + std::to_string(i) +
                              " gave seq " + std::to_string(seq));
                    break;
                }
            }
        }
        sluice_error_t* e = sluice_prefetcher_close_input(pf);
        if (e != nullptr) set_error("sluice_prefetcher_close_input: " + sl_text(e));
    });

    // On a consumer failure: destroy the prefetcher (wakes the producer), join it,
    // and report both sides.
    auto fail = [&](const std::string& m) {
        sluice_error_t* e = sluice_prefetcher_destroy(pf);
        if (e != nullptr) sl_text(e);
        producer.join();
        std::lock_guard<std::mutex> lock(mu);
        die(std::string(what) + ": consumer: " + m +
            (producer_error.empty() ? std::string() : "\n  producer: " + producer_error));
    };

    for (int i = 0; i < total; ++i) {
        sluice_batch_t b;
        sluice_batch_view_t v;
        memset(&v, 0, sizeof v);
        sluice_error_t* e = sluice_prefetcher_next(pf, g.stream, kNextTimeoutMs, &b, &v);
        if (e != nullptr)
            fail("sluice_prefetcher_next of batch " + std::to_string(i) + ": " + sl_text(e));
        if (v.seq != (uint64_t)i || v.segments != 1 || v.len[0] != g.batch ||
            v.device_ptr[0] == 0) {
            sluice_error_t* r = sluice_batch_release(b);
            if (r != nullptr) sl_text(r);
            fail("batch " + std::to_string(i) + " came as seq " + std::to_string(v.seq) +
                 " with " + std::to_string(v.segments) + " segments of " +
                 std::to_string(v.len[0]) + " bytes");
        }
        const void* dptr = (const void*)(uintptr_t)v.device_ptr[0];
        if (iters >= 0) {
            launch_compute(g, dptr, iters, g.stream_raw, g.d_seen, i);
        } else {
            seen_kernel<<<1, 1, 0, g.stream_raw>>>((const uint32_t*)dptr, g.d_seen, i);
            CK(cudaGetLastError());
        }
        if (i == g.warm - 1) CK(cudaEventRecord(g.ev0, g.stream_raw));
        if (i == total - 1) CK(cudaEventRecord(g.ev1, g.stream_raw));
        e = sluice_batch_release(b);
        if (e != nullptr)
            fail("sluice_batch_release of batch " + std::to_string(i) + ": " + sl_text(e));
    }
    {
        sluice_batch_t b;
        sluice_batch_view_t v;
        sluice_error_t* e = sluice_prefetcher_next(pf, g.stream, kNextTimeoutMs, &b, &v);
        if (e == nullptr) {
            sluice_error_t* r = sluice_batch_release(b);
            if (r != nullptr) sl_text(r);
            fail("a batch after the last one (seq " + std::to_string(v.seq) + ")");
        }
        uint32_t code = sluice_error_code(e);
        std::string text = sl_text(e);
        if (code != SLUICE_ERROR_END_OF_DATA) fail("after the last batch: " + text);
    }
    producer.join();
    {
        std::lock_guard<std::mutex> lock(mu);
        if (!producer_error.empty()) die(std::string(what) + ": producer: " + producer_error);
    }
    SL(sluice_stream_synchronize(g.stream));

    sluice_prefetcher_stats_t st;
    memset(&st, 0, sizeof st);
    SL(sluice_prefetcher_stats(pf, &st));
    if (st.batches != (uint64_t)total || st.bytes != (uint64_t)total * g.batch) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s: stats say %llu batches, %llu bytes; expected %d, %llu",
                 what, (unsigned long long)st.batches, (unsigned long long)st.bytes, total,
                 (unsigned long long)total * g.batch);
        die(buf);
    }
    SL(sluice_prefetcher_destroy(pf));
    check_seen(g, tag, what);

    PfResult r;
    r.step_ms = elapsed_ms(g.ev0, g.ev1) / g.n;
    r.copy_gbps = st.copy_gbps;
    r.producer_wait_ms = st.producer_wait_ns / 1e6;
    r.consumer_wait_ms = st.consumer_wait_ns / 1e6;
    return r;
}

// ---------------------------------------------------------------- (b)

static double run_raw_double_buffer(Bench& g, int iters) {
    const int total = g.total();
    const uint32_t tag = g.tag();
    reset_seen(g);
    for (int i = 0; i < total; ++i) {
        const int s = i & 1;
        // The pinned slot is free once its previous copy (batch i-2) has finished.
        if (i >= 2) CK(cudaEventSynchronize(g.copy_done[s]));
        ((uint32_t*)g.h_slot[s])[0] = tag + (uint32_t)i;
        // The device slot is free once the compute of batch i-2 has finished.
        CK(cudaStreamWaitEvent(g.copy_stream, g.compute_done[s], 0));
        CK(cudaMemcpyAsync(g.d_slot[s], g.h_slot[s], g.batch, cudaMemcpyHostToDevice,
                           g.copy_stream));
        CK(cudaEventRecord(g.copy_done[s], g.copy_stream));
        // The compute of batch i waits for its copy.
        CK(cudaStreamWaitEvent(g.compute_stream, g.copy_done[s], 0));
        launch_compute(g, g.d_slot[s], iters, g.compute_stream, g.d_seen, i);
        CK(cudaEventRecord(g.compute_done[s], g.compute_stream));
        if (i == g.warm - 1) CK(cudaEventRecord(g.ev0, g.compute_stream));
        if (i == total - 1) CK(cudaEventRecord(g.ev1, g.compute_stream));
    }
    CK(cudaStreamSynchronize(g.compute_stream));
    CK(cudaStreamSynchronize(g.copy_stream));
    check_seen(g, tag, "(b)");
    return elapsed_ms(g.ev0, g.ev1) / g.n;
}

// ---------------------------------------------------------------- (c)

static double run_blocking(Bench& g, int iters) {
    const int total = g.total();
    const uint32_t tag = g.tag();
    reset_seen(g);
    cudaStream_t legacy = 0;
    for (int i = 0; i < total; ++i) {
        ((uint32_t*)g.h_slot[0])[0] = tag + (uint32_t)i;
        CK(cudaMemcpy(g.d_slot[0], g.h_slot[0], g.batch, cudaMemcpyHostToDevice));
        launch_compute(g, g.d_slot[0], iters, legacy, g.d_seen, i);
        if (i == g.warm - 1) CK(cudaEventRecord(g.ev0, legacy));
        if (i == total - 1) CK(cudaEventRecord(g.ev1, legacy));
        CK(cudaStreamSynchronize(legacy));
    }
    check_seen(g, tag, "(c)");
    return elapsed_ms(g.ev0, g.ev1) / g.n;
}

// ---------------------------------------------------------------- main

struct Ratio {
    double factor;
    const char* name;
    int iters = 0;
    double compute_ms = 0.0;
    bool calibrated = false;
    double a = 0, ap = 0, b = 0, c = 0, pf_gbps = 0;
};

int main() {
    Bench g;
    g.batch = (size_t)env_int("SLUICE_BENCH_MB", 64, 1) << 20;
    if (env_int("SLUICE_BENCH_KB", 0, 1) > 0) g.batch = (size_t)env_int("SLUICE_BENCH_KB", 0, 1) << 10;
    g.words = g.batch / sizeof(uint32_t);
    g.n = env_int("SLUICE_BENCH_N", 60, 1);
    g.warm = env_int("SLUICE_BENCH_WARMUP", 5, 1);
    g.reps = env_int("SLUICE_BENCH_REPS", 3, 1);
    const bool strict = env_int("SLUICE_BENCH_STRICT", 0, 0) == 1;

    int count = 0;
    CK(cudaGetDeviceCount(&count));
    if (count == 0) {
        printf("no CUDA device: skipping\n");
        return 0;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(0));  // creates the primary context, which sluice shares
    SL(sluice_device_open(SLUICE_BACKEND_CUDA, 0, &g.dev));
    sluice_device_props_t props;
    memset(&props, 0, sizeof props);
    SL(sluice_device_props(g.dev, &props));
    if (props.backend != SLUICE_BACKEND_CUDA) die("sluice device 0 is not a CUDA device");
    char cuda_name[256];
    memset(cuda_name, 0, sizeof cuda_name);
    {
        cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, 0));
        strncpy(cuda_name, p.name, sizeof cuda_name - 1);
    }
    if (strcmp(cuda_name, props.name) != 0)
        fprintf(stderr, "warning: the runtime's device 0 is %s, sluice's is %s\n", cuda_name,
                props.name);

    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int threads_per_sm = 0;
    CK(cudaDeviceGetAttribute(&threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, 0));
    g.block = dim3(256);
    g.grid = dim3((unsigned)(sms * std::max(1, threads_per_sm / 256)));

    for (int s = 0; s < 2; ++s) {
        CK(cudaHostAlloc(&g.h_slot[s], g.batch, cudaHostAllocDefault));
        memset(g.h_slot[s], 0, g.batch);
        CK(cudaMalloc(&g.d_slot[s], g.batch));
        CK(cudaMemset(g.d_slot[s], 0, g.batch));
        CK(cudaEventCreateWithFlags(&g.copy_done[s], cudaEventDisableTiming));
        CK(cudaEventCreateWithFlags(&g.compute_done[s], cudaEventDisableTiming));
    }
    g.h_pageable = malloc(g.batch);
    if (g.h_pageable == nullptr) die("malloc of the pageable source failed");
    memset(g.h_pageable, 0, g.batch);
    CK(cudaMalloc((void**)&g.d_cal, g.batch));
    CK(cudaMemset(g.d_cal, 0, g.batch));
    CK(cudaMalloc((void**)&g.d_sink, 1024 * sizeof(float)));
    CK(cudaMalloc((void**)&g.d_seen, (size_t)g.total() * sizeof(uint32_t)));
    CK(cudaStreamCreateWithFlags(&g.copy_stream, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g.compute_stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g.ev0));
    CK(cudaEventCreate(&g.ev1));
    CK(cudaDeviceSynchronize());

    SL(sluice_stream_create(g.dev, SLUICE_STREAM_NON_BLOCKING, 0, &g.stream));
    void* raw = nullptr;
    SL(sluice_stream_raw(g.stream, &raw));
    if (raw == nullptr) die("sluice_stream_raw gave NULL");
    g.stream_raw = (cudaStream_t)raw;

    printf("# sluice prefetcher benchmark (issue 12)\n\n");
    printf("device: %s (sm_%d%d, %d SMs), sluice %s, batch %zu KiB, %d batches after %d "
           "warm-up, median of %d runs\n\n",
           props.name, props.compute_capability_major, props.compute_capability_minor, sms,
           sluice_version(), g.batch >> 10, g.n, g.warm, g.reps);
    fflush(stdout);

    // 1. The copy time and the calibrated compute.
    const double copy_ms = measure_copy_ms(g, 20);
    const double raw_gbps = g.batch / (copy_ms * 1e-3) / 1e9;
    printf("pinned H2D copy of one batch: %.3f ms (%.2f GB/s)\n", copy_ms, raw_gbps);
    Ratio ratios[3] = {{0.5, "0.5x"}, {1.0, "1x"}, {2.0, "2x"}};
    for (Ratio& r : ratios) {
        const double target = r.factor * copy_ms;
        r.iters = calibrate(g, target, &r.compute_ms);
        r.calibrated = std::fabs(r.compute_ms - target) <= 0.10 * target;
        printf("compute at %s: %d iterations, %.3f ms (target %.3f ms)%s\n", r.name, r.iters,
               r.compute_ms, target, r.calibrated ? "" : "  ** off by more than 10%");
    }
    fflush(stdout);

    // 2. (a0): the prefetcher alone, for its copy GB/s.
    std::vector<double> a0_step, a0_gbps;
    for (int rep = 0; rep < g.reps; ++rep) {
        PfResult r = run_prefetcher(g, Feed::Acquire, -1, "(a0)");
        a0_step.push_back(r.step_ms);
        a0_gbps.push_back(r.copy_gbps);
    }
    const double pf_copy_gbps = median(a0_gbps);
    const double pf_pipe_gbps = g.batch / (median(a0_step) * 1e-3) / 1e9;
    printf("prefetcher copy only (a0): %.3f ms/step (%.2f GB/s), stats copy_gbps %.2f\n\n",
           median(a0_step), pf_pipe_gbps, pf_copy_gbps);
    fflush(stdout);

    // 3. The variants at each ratio, interleaved within each repetition.
    for (Ratio& r : ratios) {
        std::vector<double> a, b, c, gb;
        for (int rep = 0; rep < g.reps; ++rep) {
            PfResult pa = run_prefetcher(g, Feed::Acquire, r.iters, "(a)");
            a.push_back(pa.step_ms);
            gb.push_back(pa.copy_gbps);
            b.push_back(run_raw_double_buffer(g, r.iters));
            c.push_back(run_blocking(g, r.iters));
            if (rep == 0) r.ap = run_prefetcher(g, Feed::Push, r.iters, "(a')").step_ms;
        }
        r.a = median(a);
        r.b = median(b);
        r.c = median(c);
        r.pf_gbps = median(gb);
        printf("ran %s: (a) %.3f  (b) %.3f  (c) %.3f  (a') %.3f ms/step\n", r.name, r.a, r.b,
               r.c, r.ap);
        fflush(stdout);
    }
    const double copy_ms_end = measure_copy_ms(g, 20);
    printf("pinned H2D copy re-measured at the end: %.3f ms (drift %+.1f%%)\n\n", copy_ms_end,
           100.0 * (copy_ms_end / copy_ms - 1.0));

    // 4. Table.
    printf("| ratio | copy ms | compute ms | (a) ms/step | (b) ms/step | (c) ms/step | eff (a) "
           "| (a)/(b) thrpt | (a)/(c) speedup | eff (b) | (a') ms/step | (a) pf copy GB/s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Ratio& r : ratios) {
        const double ideal = std::max(copy_ms, r.compute_ms);
        printf("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.3f | %.3f | "
               "%.2f |\n",
               r.name, copy_ms, r.compute_ms, r.a, r.b, r.c, ideal / r.a, r.b / r.a, r.c / r.a,
               ideal / r.b, r.ap, r.pf_gbps);
    }
    printf("\neff = max(copy, compute) / step; (a)/(b) thrpt = (b) step / (a) step; "
           "(a)/(c) speedup = (c) step / (a) step.\n");
    printf("raw pinned H2D: %.2f GB/s; prefetcher copy (a0, sluice_prefetcher_stats): %.2f "
           "GB/s; (a0) pipeline: %.2f GB/s.\n",
           raw_gbps, pf_copy_gbps, pf_pipe_gbps);
    printf("The last column is the stats' copy_gbps within (a) runs, for information: it "
           "is timed on the copy stream and may include the copy's device wait for the "
           "consumer's work.\n\n");

    // 5. Goals.
    int failed = 0;
    auto goal = [&](bool ok, const std::string& line) {
        printf("- %s %s\n", ok ? "PASS" : "FAIL", line.c_str());
        if (!ok) ++failed;
    };
    char buf[256];
    printf("## Goals\n\n");
    {
        const Ratio& r = ratios[1];
        const double eff = std::max(copy_ms, r.compute_ms) / r.a;
        snprintf(buf, sizeof buf, "(a) efficiency >= 0.95 at 1x: %.3f", eff);
        goal(eff >= 0.95, buf);
    }
    for (const Ratio& r : ratios) {
        snprintf(buf, sizeof buf, "(a) >= 0.98x the throughput of (b) at %s: %.3f", r.name,
                 r.b / r.a);
        goal(r.b / r.a >= 0.98, buf);
    }
    {
        const Ratio& r = ratios[1];
        snprintf(buf, sizeof buf, "(a)/(c) >= 1.9 at 1x: %.2f", r.c / r.a);
        goal(r.c / r.a >= 1.9, buf);
    }
    snprintf(buf, sizeof buf,
             "prefetcher copy GB/s >= 0.97x raw pinned GB/s: %.2f vs %.2f (%.3f)",
             pf_copy_gbps, raw_gbps, pf_copy_gbps / raw_gbps);
    goal(pf_copy_gbps >= 0.97 * raw_gbps, buf);
    {
        bool all = true;
        for (const Ratio& r : ratios) all = all && r.calibrated;
        goal(all, "compute calibrated within 10% of its target at every ratio");
    }
    printf("- PASS data check: every batch of every run read its own sequence number\n");
    printf("\n%d goal(s) failed\n\n", failed);

    // 6. Machine-readable results.
    printf("RESULT batch_bytes=%zu\n", g.batch);
    printf("RESULT n=%d\n", g.n);
    printf("RESULT warmup=%d\n", g.warm);
    printf("RESULT reps=%d\n", g.reps);
    printf("RESULT copy_ms=%.4f\n", copy_ms);
    printf("RESULT copy_ms_end=%.4f\n", copy_ms_end);
    printf("RESULT raw_h2d_gbps=%.3f\n", raw_gbps);
    printf("RESULT pf_copy_gbps=%.3f\n", pf_copy_gbps);
    printf("RESULT pf_pipeline_gbps=%.3f\n", pf_pipe_gbps);
    for (const Ratio& r : ratios) {
        const double ideal = std::max(copy_ms, r.compute_ms);
        printf("RESULT iters_%s=%d\n", r.name, r.iters);
        printf("RESULT compute_ms_%s=%.4f\n", r.name, r.compute_ms);
        printf("RESULT a_ms_%s=%.4f\n", r.name, r.a);
        printf("RESULT aprime_ms_%s=%.4f\n", r.name, r.ap);
        printf("RESULT b_ms_%s=%.4f\n", r.name, r.b);
        printf("RESULT c_ms_%s=%.4f\n", r.name, r.c);
        printf("RESULT eff_a_%s=%.4f\n", r.name, ideal / r.a);
        printf("RESULT eff_b_%s=%.4f\n", r.name, ideal / r.b);
        printf("RESULT eff_c_%s=%.4f\n", r.name, ideal / r.c);
        printf("RESULT a_over_b_%s=%.4f\n", r.name, r.b / r.a);
        printf("RESULT a_over_c_%s=%.4f\n", r.name, r.c / r.a);
        printf("RESULT pf_copy_gbps_%s=%.3f\n", r.name, r.pf_gbps);
    }
    printf("RESULT goals_failed=%d\n", failed);
    fflush(stdout);

    // 7. Teardown.
    SL(sluice_stream_destroy(g.stream));
    SL(sluice_device_close(g.dev));
    for (int s = 0; s < 2; ++s) {
        CK(cudaFreeHost(g.h_slot[s]));
        CK(cudaFree(g.d_slot[s]));
        CK(cudaEventDestroy(g.copy_done[s]));
        CK(cudaEventDestroy(g.compute_done[s]));
    }
    free(g.h_pageable);
    CK(cudaFree(g.d_cal));
    CK(cudaFree(g.d_sink));
    CK(cudaFree(g.d_seen));
    CK(cudaStreamDestroy(g.copy_stream));
    CK(cudaStreamDestroy(g.compute_stream));
    CK(cudaEventDestroy(g.ev0));
    CK(cudaEventDestroy(g.ev1));
    return (strict && failed > 0) ? 2 : 0;
}

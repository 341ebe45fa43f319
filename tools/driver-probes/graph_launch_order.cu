// Probe: does the CUDA driver keep stream order when one thread launches a graph on
// a stream while another thread enqueues kernels on the same stream?
//
// Thread K enqueues kernels K_i on stream S; each spins, then sets done[i] = 1, and
// K publishes i once cuLaunchKernel returned. Thread G loops: launch a graph (or a
// kernel, graphs=0) on S, read the last published i, record event e on S, make a
// checker stream wait on e, and copy done[i] into out[j] there. K_i was enqueued on S
// before e, so done[i] must be 1 when the checker runs. lock=1 puts a mutex around
// every enqueue on S (what sluice does: one push lock per stream).
//
//   nvcc -O2 -arch=sm_90 -o graph_launch_order graph_launch_order.cu
//   ./graph_launch_order [graphs=1] [lock=0] [secs=5]
#include <cuda_runtime.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                \
                         cudaGetErrorString(e_));                                          \
            std::exit(3);                                                                  \
        }                                                                                  \
    } while (0)

__device__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
__global__ void mark(unsigned *done, int i, unsigned long long ns) {
    spin(ns);
    done[i] = 1;
}
__global__ void busy(unsigned long long ns) { spin(ns); }
__global__ void sample(const unsigned *done, int i, unsigned *out, int j) { out[j] = done[i] + 1; }

static long opt(int argc, char **argv, const char *k, long d) {
    size_t n = std::strlen(k);
    for (int i = 1; i < argc; i++)
        if (!std::strncmp(argv[i], k, n) && argv[i][n] == '=') return std::atol(argv[i] + n + 1);
    return d;
}

int main(int argc, char **argv) {
    const bool graphs = opt(argc, argv, "graphs", 1), lock = opt(argc, argv, "lock", 0);
    const double secs = (double)opt(argc, argv, "secs", 5);
    const int MAXK = 4 << 20, MAXJ = 1 << 20;
    CK(cudaSetDevice(0));
    cudaStream_t s, chk, cap;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&chk, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    unsigned *done, *out;
    CK(cudaMalloc(&done, MAXK * 4));
    CK(cudaMalloc(&out, MAXJ * 4));
    CK(cudaMemset(done, 0, MAXK * 4));
    CK(cudaMemset(out, 0, MAXJ * 4));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeRelaxed));
    busy<<<1, 32, 0, cap>>>(20000);
    CK(cudaStreamEndCapture(cap, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    std::vector<cudaEvent_t> ev(4096);
    for (auto &e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CK(cudaDeviceSynchronize());

    std::mutex push;
    std::atomic<int> published{-1};
    std::atomic<bool> stop{false};
    auto guard = [&] { return lock ? std::unique_lock<std::mutex>(push) : std::unique_lock<std::mutex>(); };
    std::thread k([&] {
        CK(cudaSetDevice(0));
        for (int i = 0; i < MAXK && !stop; i++) {
            {
                auto l = guard();
                mark<<<1, 32, 0, s>>>(done, i, 3000);
                CK(cudaGetLastError());
            }
            published.store(i, std::memory_order_release);
        }
    });
    std::vector<int> sampled(MAXJ);
    int j = 0;
    auto t0 = std::chrono::steady_clock::now();
    while (j < MAXJ && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < secs) {
        cudaEvent_t e = ev[j % ev.size()];
        if (j % ev.size() == 0) CK(cudaStreamSynchronize(chk)); // events reused only after their waits ran
        int i;
        {
            auto l = guard();
            if (graphs)
                CK(cudaGraphLaunch(ge, s));
            else
                busy<<<1, 32, 0, s>>>(20000);
            i = published.load(std::memory_order_acquire);
            CK(cudaEventRecord(e, s));
        }
        if (i < 0) continue;
        CK(cudaStreamWaitEvent(chk, e, 0));
        sample<<<1, 1, 0, chk>>>(done, i, out, j);
        sampled[j++] = i;
    }
    stop = true;
    k.join();
    CK(cudaDeviceSynchronize());
    std::vector<unsigned> h(j);
    CK(cudaMemcpy(h.data(), out, j * 4, cudaMemcpyDeviceToHost));
    long early = 0;
    for (int x = 0; x < j; x++) early += h[x] != 2;
    std::printf("RESULT graph_launch_order graphs=%d lock=%d samples=%d out_of_order=%ld -> %s\n",
                graphs, lock, j, early, early ? "ORDER BROKEN" : "in order");
    return 0;
}

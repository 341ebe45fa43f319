// The prefetcher's producers in raw CUDA (issue 14, run 153 in docs/gpu-runs.md):
// T host threads each submit N batches of B bytes, pinned host to device: a
// stream wait on the consumer's last event, the async copy, an event record.
// Mode "shared": one copy stream for all threads (a mutex around the three
// calls); mode "own": a copy stream per thread. Prints batches/s and µs per
// submit. Build and run on the GPU machine:
//   nvcc -O2 -std=c++17 -o raw_submit benches/prefetch/raw_submit.cu -lpthread && ./raw_submit
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>
#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(ck_)); exit(1); } } while (0)
int main(int argc, char** argv) {
  const size_t B = 256 * 785;
  const int N = 4000;
  CK(cudaFree(0));
  cudaStream_t consumer;
  CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  cudaEvent_t released;
  CK(cudaEventCreateWithFlags(&released, cudaEventDisableTiming));
  CK(cudaEventRecord(released, consumer));
  for (int own = 0; own < 2; ++own) {
    for (int T : {1, 2, 4, 8}) {
      std::vector<cudaStream_t> streams(own ? T : 1);
      for (auto& s : streams) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      std::vector<void*> host(T), dev(T);
      std::vector<std::vector<cudaEvent_t>> evs(T, std::vector<cudaEvent_t>(16));
      for (int t = 0; t < T; ++t) {
        CK(cudaHostAlloc(&host[t], B, cudaHostAllocPortable));
        CK(cudaMalloc(&dev[t], B));
        for (auto& e : evs[t]) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      }
      std::mutex mu;
      std::vector<double> submit_us(T);
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> th;
      for (int t = 0; t < T; ++t)
        th.emplace_back([&, t] {
          cudaStream_t s = streams[own ? t : 0];
          double sum = 0;
          for (int i = 0; i < N; ++i) {
            auto a = std::chrono::steady_clock::now();
            {
              std::unique_lock<std::mutex> l(mu, std::defer_lock);
              if (!own) l.lock();
              CK(cudaStreamWaitEvent(s, released, 0));
              CK(cudaMemcpyAsync(dev[t], host[t], B, cudaMemcpyHostToDevice, s));
              CK(cudaEventRecord(evs[t][i % 16], s));
            }
            sum += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
            if (i % 16 == 15) CK(cudaEventSynchronize(evs[t][i % 16]));
          }
          submit_us[t] = sum / N;
        });
      for (auto& x : th) x.join();
      CK(cudaDeviceSynchronize());
      double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double su = 0;
      for (double v : submit_us) su += v / T;
      printf("%-6s threads %d: %9.0f batches/s, submit %6.1f us, %5.1f GB/s\n", own ? "own" : "shared", T,
             T * N / el, su, T * N * (double)B / el / 1e9);
      for (int t = 0; t < T; ++t) {
        CK(cudaFreeHost(host[t]));
        CK(cudaFree(dev[t]));
        for (auto& e : evs[t]) CK(cudaEventDestroy(e));
      }
      for (auto& s : streams) CK(cudaStreamDestroy(s));
    }
  }
  return 0;
}

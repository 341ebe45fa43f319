// The prefetcher's whole protocol in raw CUDA, the baseline for examples/prefetch_cost.rs:
// a ring of 16 slots (pinned host + device memory, 200 KiB: the Go trainer's batch),
// P producer threads and one consumer, no fill and no compute, as prefetch_cost does.
//   producer: take a free slot (mutex + condition variable); wait on the host for the
//             slot's previous copy (its pinned memory is free again); on the copy
//             stream: wait for the consumer's release of the slot, copy, record
//             `copied`; queue the batch for the consumer.
//   consumer: take the next batch in order; its stream waits for `copied`; record
//             `released` on its stream; the slot is free.
// Mode "shared": one copy stream (a mutex around the three calls, as sluice's one copy
// stream); mode "own": a copy stream per producer. Prints batches/s and µs per call.
// Build and run on the GPU machine:
//   nvcc -O2 -std=c++17 -o raw_ring benches/prefetch/raw_ring.cu -lpthread && ./raw_ring
#include <cuda_runtime.h>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>
#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(ck_)); exit(1); } } while (0)
using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

int main() {
  const size_t B = 256 * 785;
  const int SLOTS = 16;
  const long N = 40000;
  CK(cudaFree(0));
  struct Slot { void* host; void* dev; cudaEvent_t copied, released; bool copied_once = false; };
  std::vector<Slot> slots(SLOTS);
  for (auto& s : slots) {
    CK(cudaHostAlloc(&s.host, B, cudaHostAllocPortable));
    CK(cudaMalloc(&s.dev, B));
    CK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&s.released, cudaEventDisableTiming));
  }
  cudaStream_t consumer;
  CK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  for (auto& s : slots) CK(cudaEventRecord(s.released, consumer));
  for (int own = 0; own < 2; ++own) {
    for (int P : {1, 4, 1, 4}) {
      std::vector<cudaStream_t> copy(own ? P : 1);
      for (auto& c : copy) CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
      std::mutex mu, copy_mu;
      std::condition_variable freed, ready;
      std::deque<int> free_slots;
      for (int i = 0; i < SLOTS; ++i) free_slots.push_back(i);
      std::map<long, int> done;  // seq -> slot, submitted
      long next_seq = 0;
      std::vector<double> acq(P), sub(P);
      auto t0 = Clock::now();
      std::vector<std::thread> th;
      for (int p = 0; p < P; ++p)
        th.emplace_back([&, p] {
          cudaStream_t cs = copy[own ? p : 0];
          double a_sum = 0, s_sum = 0;
          for (;;) {
            auto a = Clock::now();
            int slot;
            long seq;
            {
              std::unique_lock<std::mutex> l(mu);
              freed.wait(l, [&] { return !free_slots.empty() || next_seq >= N; });
              if (next_seq >= N) break;
              slot = free_slots.front();
              free_slots.pop_front();
              seq = next_seq++;
            }
            Slot& s = slots[slot];
            CK(cudaEventSynchronize(s.copied));  // the pinned memory's last reader
            auto b = Clock::now();
            {
              std::unique_lock<std::mutex> l(copy_mu, std::defer_lock);
              if (!own) l.lock();
              CK(cudaStreamWaitEvent(cs, s.released, 0));
              CK(cudaMemcpyAsync(s.dev, s.host, B, cudaMemcpyHostToDevice, cs));
              CK(cudaEventRecord(s.copied, cs));
            }
            {
              std::lock_guard<std::mutex> l(mu);
              done[seq] = slot;
            }
            ready.notify_one();
            a_sum += us(a, b);
            s_sum += us(b, Clock::now());
          }
          acq[p] = a_sum;
          sub[p] = s_sum;
        });
      double next_sum = 0, rel_sum = 0;
      for (long i = 0; i < N; ++i) {
        auto a = Clock::now();
        int slot;
        {
          std::unique_lock<std::mutex> l(mu);
          ready.wait(l, [&] { return done.count(i) > 0; });
          slot = done[i];
          done.erase(i);
        }
        CK(cudaStreamWaitEvent(consumer, slots[slot].copied, 0));
        auto b = Clock::now();
        CK(cudaEventRecord(slots[slot].released, consumer));
        {
          std::lock_guard<std::mutex> l(mu);
          free_slots.push_back(slot);
        }
        freed.notify_one();
        next_sum += us(a, b);
        rel_sum += us(b, Clock::now());
      }
      double el = std::chrono::duration<double>(Clock::now() - t0).count();
      {
        std::lock_guard<std::mutex> l(mu);
        next_seq = N;
      }
      freed.notify_all();
      for (auto& x : th) x.join();
      CK(cudaDeviceSynchronize());
      double a = 0, s = 0;
      for (int p = 0; p < P; ++p) a += acq[p], s += sub[p];
      printf("%-6s producers %d: %9.0f batches/s, acquire %6.2f us, submit %6.2f us, next %6.2f us, release %6.2f us, %5.1f GB/s\n",
             own ? "own" : "shared", P, N / el, a / N, s / N, next_sum / N, rel_sum / N, N * (double)B / el / 1e9);
      for (auto& c : copy) CK(cudaStreamDestroy(c));
    }
  }
  return 0;
}

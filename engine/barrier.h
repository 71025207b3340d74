// A barrier for the threads of one graph run. It spins briefly (the usual wait between
// nodes is a few microseconds) and then yields the core, so a thread whose partner was
// descheduled by another process does not burn the core that partner needs — OpenMP's own
// barrier, spinning for its full spin count, made a 2-thread step 100× slower on a busy
// 2-core machine.
#pragma once
#include <sched.h>

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTNKIT_CPU_RELAX() _mm_pause()
#else
#define ATTNKIT_CPU_RELAX() ((void)0)
#endif

namespace attnkit {

class SpinBarrier {
 public:
  explicit SpinBarrier(int threads) : threads_(threads) {}

  // All threads' writes before wait() are visible to all threads after it: each arrival is
  // a release on count_, the last arriver acquires them all and releases generation_.
  void wait() {
    const unsigned gen = generation_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == threads_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
      return;
    }
    for (int spins = 0; generation_.load(std::memory_order_acquire) == gen; ++spins) {
      if (spins < kSpins) {
        ATTNKIT_CPU_RELAX();
      } else {
        sched_yield();
      }
    }
  }

 private:
  static constexpr int kSpins = 4000;  // about 20–50 µs of pause instructions
  const int threads_;
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<unsigned> generation_{0};
};

}  // namespace attnkit

// A barrier for the threads of one graph run. It spins briefly (the usual wait between
// nodes is a few microseconds), then sleeps on a futex, so a thread whose partner was
// descheduled by another process gives the core back instead of burning it — OpenMP's own
// barrier, spinning for its long spin count, made a 2-thread step 100× slower on a busy
// 2-core machine.
#pragma once
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>

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
      generation_.fetch_add(1, std::memory_order_seq_cst);
      if (sleepers_.load(std::memory_order_seq_cst) > 0) futex(FUTEX_WAKE_PRIVATE, INT_MAX);
      return;
    }
    for (int spins = 0; spins < kSpins; ++spins) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      ATTNKIT_CPU_RELAX();
    }
    // Announce the sleep before the last check, so the last arriver either sees a sleeper
    // and wakes it, or this thread sees the new generation (futex re-checks the value).
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while (generation_.load(std::memory_order_seq_cst) == gen) futex(FUTEX_WAIT_PRIVATE, gen);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  void futex(int op, unsigned value) {
    syscall(SYS_futex, reinterpret_cast<unsigned*>(&generation_), op, value, nullptr, nullptr, 0);
  }

  static constexpr int kSpins = 4000;  // some tens of microseconds of pause instructions
  const int threads_;
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<unsigned> generation_{0};
  alignas(64) std::atomic<int> sleepers_{0};
};

}  // namespace attnkit

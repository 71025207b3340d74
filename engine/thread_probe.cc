// The executor's adaptive thread use: now and then a probe times blocks of runs (training
// steps, or an inference graph's forward runs) with all threads and with one, and the faster
// is used until the next probe. Results do not depend on the thread count; only the speed does.
#include "engine/thread_probe.h"

#include <algorithm>

namespace attnkit {

bool ThreadProbe::next_parallel() {
  if (runs_left_ > 0) return ParallelRun(kRuns - runs_left_);
  if (--runs_until_probe_ <= 0) {  // start a probe
    runs_left_ = kRuns;
    parallel_seconds_ = serial_seconds_ = 0;
    return true;
  }
  return parallel_;
}

void ThreadProbe::record(bool parallel, double seconds) {
  if (runs_left_ <= 0) return;
  const int k = kRuns - runs_left_;  // this run's place in the probe
  // Sums, not minima: on a busy machine parallel runs vary most, and the best of a few
  // would favour them; the mean is what a long run will see. The first run of each block
  // is not counted: it finds the data in the other core's caches (a small model's whole
  // arena fits in L2), which made runs that alternated one by one, as probes did before,
  // look alike when blocks of either kind were 10-30% apart.
  if (k % kBlock != 0) (parallel ? parallel_seconds_ : serial_seconds_) += seconds;
  // After each parallel + serial pair of blocks a clear verdict ends the probe: parallel runs
  // much slower (on a machine busy with other work a parallel step of a small model can take
  // several times a serial one: a barrier waits for a descheduled thread), or much faster (a
  // large model's step on 2 threads takes ~0.55× one thread's: three more serial steps cost a
  // 20-step run of reversal-large ~10%).
  const bool pair_done = (k + 1) % (2 * kBlock) == 0;
  const bool clear = parallel_seconds_ > kClearRatio * serial_seconds_ ||
                     serial_seconds_ > kClearRatio * parallel_seconds_;
  if (--runs_left_ > 0 && !(pair_done && clear)) return;
  runs_left_ = 0;
  const bool verdict = parallel_seconds_ < 0.95 * serial_seconds_;
  interval_ = verdict == parallel_ ? std::min<int64_t>(interval_ * 2, kMaxInterval) : kFirstInterval;
  parallel_ = verdict;
  runs_until_probe_ = interval_;
}

void ThreadProbe::reset() {
  parallel_ = true;
  runs_left_ = 0;
}

}  // namespace attnkit

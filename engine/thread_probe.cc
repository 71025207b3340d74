// The executor's adaptive thread use: now and then a probe times blocks of runs (training
// steps, or an inference graph's forward runs) with all threads and with one, and the faster
// is used until the next probe (see the probe state
// in engine/executor.h). Results do not depend on the thread count; only the speed does.
#include "engine/executor.h"

#include <algorithm>

namespace attnkit {

int Executor::threads_for_run() {
  if (threads_ == 1 || !adaptive_) return threads_;
  if (probe_runs_left_ > 0) return ProbeParallel(kProbeRuns - probe_runs_left_) ? threads_ : 1;
  if (--runs_until_probe_ <= 0) {  // start a probe
    probe_runs_left_ = kProbeRuns;
    best_parallel_ = best_serial_ = 0;
    return threads_;
  }
  return threads_in_use();
}

void Executor::record_run(int threads, double seconds) {
  if (probe_runs_left_ <= 0) return;
  const int k = kProbeRuns - probe_runs_left_;  // this run's place in the probe
  // Sums, not minima: on a busy machine parallel runs vary most, and the best of a few
  // would favour them; the mean is what a long run will see. The first run of each block
  // is not counted: it finds the data in the other core's caches (a small model's whole
  // arena fits in L2), which made runs that alternated one by one, as probes did before,
  // look alike when blocks of either kind were 10-30% apart.
  if (k % kProbeBlock != 0) (threads == 1 ? best_serial_ : best_parallel_) += seconds;
  // After each parallel + serial pair of blocks, parallel runs clearly slower end the
  // probe: on a machine busy with other work a parallel step of a small model can take
  // several times a serial one (a barrier waits for a descheduled thread).
  const bool pair_done = (k + 1) % (2 * kProbeBlock) == 0;
  if (--probe_runs_left_ > 0 && !(pair_done && best_parallel_ > 1.25 * best_serial_)) return;
  probe_runs_left_ = 0;
  const bool parallel = best_parallel_ < 0.95 * best_serial_;
  probe_interval_ = parallel == parallel_ ? std::min<int64_t>(probe_interval_ * 2, 8192) : 64;
  parallel_ = parallel;
  runs_until_probe_ = probe_interval_;
}

}  // namespace attnkit

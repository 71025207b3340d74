// Adaptive thread use's probe (ExecutorOptions::adaptive_threads): from the times of runs
// (training steps, or an inference graph's forward runs) it decides whether runs use all
// threads or one. Pure logic: the caller times its runs and reports them, so tests can feed it
// times of their own.
#pragma once
#include <cstdint>

namespace attnkit {

class ThreadProbe {
 public:
  // A probe: blocks of kBlock runs, parallel then serial, twice. A block's first run warms the
  // caches of its thread count and is not counted.
  static constexpr int kBlock = 3, kRuns = 4 * kBlock;
  // After each parallel + serial pair of blocks, a probe ends early when one kind of run took
  // more than this many times the other's (summed) time: the verdict is clear, and each
  // further probe run of the slower kind costs the run that much.
  static constexpr double kClearRatio = 1.25;
  // Probes come this many runs apart after a verdict that changes, twice as far each time it
  // stands, at most kMaxInterval.
  static constexpr int64_t kFirstInterval = 64, kMaxInterval = 8192;

  // Whether the next run is to use every thread, counting it as started. The first run is
  // parallel and not part of a probe: it starts the OpenMP threads and first touches the
  // arena and the kernels' scratch (on the compute-bound model that made its parallel run look
  // slower than a serial one, and the executor then ran 64 steps on one thread).
  bool next_parallel();
  // The run next_parallel() announced took `seconds` on all threads (parallel) or on one.
  void record(bool parallel, double seconds);
  // The verdict outside probes: whether runs use every thread.
  bool parallel() const { return parallel_; }
  bool probing() const { return runs_left_ > 0; }
  int64_t probe_interval() const { return interval_; }
  // Every run parallel from now on (adaptive use turned off); calls of next_parallel() after it
  // probe again when the current interval runs out (at once if reset during a probe).
  void reset();

 private:
  static bool ParallelRun(int k) { return (k / kBlock) % 2 == 0; }
  bool parallel_ = true;
  int runs_left_ = 0;
  double parallel_seconds_ = 0, serial_seconds_ = 0;  // summed times of the probe's counted runs
  int64_t runs_until_probe_ = 2, interval_ = kFirstInterval;
};

}  // namespace attnkit

// For the programs that run training steps with several threads (tools/attnkit.cc,
// bench/bench_train_step.cc): idle OpenMP workers made to sleep instead of spin.
#pragma once

namespace attnkit {

// With threads > 1 and no OMP_WAIT_POLICY of the user's, sets it to PASSIVE and starts the
// program again with the same argv (libgomp reads it only when it loads), so idle OpenMP
// workers sleep rather than spin on a core another thread needs — on a machine whose cores
// are shared, spinning made 2 threads slower than 1, and made one thread slower while the
// workers spun. Returns when there is nothing to do (or the restart failed).
void prefer_passive_openmp(int threads, char* const* argv);

}  // namespace attnkit

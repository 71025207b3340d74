// For the programs that run training steps or inference (tools/attnkit.cc,
// bench/bench_train_step.cc): settings that libgomp and glibc read only when the program loads,
// so the program sets them and starts itself again.
#pragma once

#include <string>
#include <vector>

namespace attnkit {

struct EnvSetting {
  std::string name, value;
  bool operator==(const EnvSetting& o) const { return name == o.name && value == o.value; }
};

// What the program would set, given the current values (nullptr: unset), none of the user's
// own choices overridden. Only when threads > 1 and OMP_WAIT_POLICY is unset (a restart costs
// a whole process start, ~13 ms on our VMs: worth it for this, not for huge pages alone):
// - OMP_WAIT_POLICY=PASSIVE: idle OpenMP workers sleep rather than spin on a core another
//   thread needs (on shared cores spinning made 2 threads slower than 1, and one thread slower
//   while the workers spun);
// - with transparent_hugepages (given on request: "[madvise]"), glibc.malloc.hugetlb=1 added
//   to GLIBC_TUNABLES unless it names glibc.malloc.hugetlb already: glibc's malloc then asks
//   for transparent huge pages, so the large buffers (data sets, the arena, images) take a page
//   fault per 2 MiB instead of per 4 KiB — on a virtual machine whose page faults cost ~10 µs,
//   about 14% of a whole `attnkit train reversal --threads 2`.
std::vector<EnvSetting> preferred_environment(int threads, const char* omp_wait_policy, const char* glibc_tunables,
                                              bool transparent_hugepages);

// Sets preferred_environment's settings and starts the program again with the same argv when
// there are any; returns when there is nothing to set (or the restart failed: the program
// then runs as it is). Call it first thing in main, before any thread starts.
void prefer_program_environment(int threads, char* const* argv, bool hugepages = true);

}  // namespace attnkit

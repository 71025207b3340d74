// The attnkit program's data-parallel group on MPI (library attnkit_mpi, built with the CMake
// option ATTNKIT_MPI; the attnkit library itself knows only engine/collective.h). MPI starts
// only in a process an MPI launcher (mpirun, mpiexec, srun) started, so a plain `attnkit`
// never touches it.
#pragma once
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/collective.h"

namespace attnkit {

// Whether an MPI launcher started this process (its environment says so), and the number of
// processes it started (0 when it does not say). Inline: a program built without MPI uses
// them to refuse to run under mpirun.
inline bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}
inline int launched_group_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

// The MPI module, attnkit_mpi.so (built with the CMake option ATTNKIT_MPI): MpiGroup and the
// MPI library behind it. The attnkit program loads it with dlopen only when an MPI launcher
// started it or for --version, so a plain run neither loads Open MPI's eight libraries (several
// ms of every start) nor needs them installed.
struct MpiModule {
  // kMpiModuleVersion of the program the module was built for: a module of another layout is
  // refused instead of called through the wrong pointers.
  int version;
  // The MPI library's own name and version (first line), e.g. "Open MPI v4.1.4, …".
  std::string (*library_version)();
  // MPI_COMM_WORLD as a Collective (a new MpiGroup watching stop_flag, see MpiGroup); throws Error.
  Collective* (*start_group)(int* argc, char*** argv, const volatile int* stop_flag);
  // Ends every process of the job (MpiGroup::abort); does not return.
  void (*abort)(int code);
};

constexpr int kMpiModuleVersion = 1;

// The program's side: the module beside the program (<its folder>/attnkit_mpi.so, as built) or
// installed (<libdir>/attnkit/attnkit_mpi.so, found from the program's folder as installed),
// loaded on the first call. Throws
// Error naming the files tried and why each could not be loaded.
const MpiModule& load_mpi_module();

// MPI_COMM_WORLD as a Collective: starts MPI (MPI_Init_thread, funneled: only the thread
// that calls sum() talks to MPI) and ends it (MPI_Finalize) when destroyed.
class MpiGroup final : public Collective {
 public:
  MpiGroup(int* argc, char*** argv);
  ~MpiGroup() override;
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // A reduce-scatter and an all-gather: process k adds up chunk k of everyone's data in rank
  // order, then every process gathers the summed chunks. 2·(size−1)/size of the data goes out
  // and comes in per process, as in a ring all-reduce, and the sums do not depend on timing
  // or on which algorithms the MPI library picks.
  // In place: the reduce-scatter sends from data (padded to size() equal chunks, the room
  // sum_room asks for) and the summed chunk is written into its place in data for an in-place
  // all-gather, so the data is not copied in and out of buffers of its own.
  void sum(float* data, int64_t n) override;
  int64_t sum_room(int64_t n) const override { return chunk(n) * size_; }
  std::vector<uint64_t> all_gather(uint64_t value) override;
  int64_t bytes_summed() const override { return bytes_; }
  double seconds_summing() const override { return seconds_; }

  // A flag a signal handler sets (SIGINT/SIGTERM). mpirun sends SIGTERM to every rank when a
  // rank has died, then SIGKILL a second later; a rank waiting in sum() when the flag is set
  // and still waiting kGiveUpSeconds later tells so (an `error:` line with its rank) and ends.
  // A signal for a graceful stop, which every rank gets, does not come to that: the sum
  // completes and the ranks stop together after the step.
  void watch_stop_flag(const volatile int* flag) { stop_flag_ = flag; }
  static constexpr double kGiveUpSeconds = 0.8;

  // Ends every process of the job (MPI_Abort) with this exit code.
  [[noreturn]] static void abort(int code);

 private:
  int64_t chunk(int64_t n) const { return (n + size_ - 1) / size_; }
  void wait(void* request, const char* what);  // an MPI_Request, polled
  int rank_ = 0, size_ = 1;
  const volatile int* stop_flag_ = nullptr;
  std::vector<float> recv_;
  int64_t bytes_ = 0;
  double seconds_ = 0;
};

}  // namespace attnkit

#include "tools/mpi_collective.h"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/error.h"

namespace attnkit {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(text, static_cast<size_t>(len)));
}

std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown";
  std::string v(text, static_cast<size_t>(len));
  return v.substr(0, v.find_first_of("\n,"));
}

Collective* start_group(int* argc, char*** argv, const volatile int* stop_flag) {
  auto* group = new MpiGroup(argc, argv);
  group->watch_stop_flag(stop_flag);
  return group;
}

void abort_job(int code) { MpiGroup::abort(code); }

const MpiModule kModule{kMpiModuleVersion, library_version, start_group, abort_job};

}  // namespace

MpiGroup::MpiGroup(int* argc, char*** argv) {
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // Errors come back as codes (turned into exceptions) instead of ending the job unexplained.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiGroup::~MpiGroup() { MPI_Finalize(); }

void MpiGroup::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should it, end this process at least
}

void MpiGroup::sum(float* data, int64_t n) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t size = size_, chunk = this->chunk(n);
  if (chunk > (int64_t{1} << 30)) throw Error("MPI: " + std::to_string(n) + " floats are too many for one sum");
  recv_.resize(static_cast<size_t>(size * chunk));
  const int c = static_cast<int>(chunk);
  // recv_ [k·chunk, (k+1)·chunk) = process k's piece of this process's chunk. (The room past
  // n in data is sent too; what it holds ends in the room's sums, which nobody reads.)
  MPI_Request request;
  check(MPI_Ialltoall(data, c, MPI_FLOAT, recv_.data(), c, MPI_FLOAT, MPI_COMM_WORLD, &request), "MPI_Ialltoall");
  wait(&request, "MPI_Ialltoall");
  float* mine = data + rank_ * chunk;
  std::memcpy(mine, recv_.data(), static_cast<size_t>(chunk) * sizeof(float));
  for (int64_t k = 1; k < size; ++k) {
    const float* part = recv_.data() + k * chunk;
    for (int64_t i = 0; i < chunk; ++i) mine[i] += part[i];
  }
  check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, c, MPI_FLOAT, MPI_COMM_WORLD, &request),
        "MPI_Iallgather");
  wait(&request, "MPI_Iallgather");
  bytes_ += 2 * (size - 1) * chunk * static_cast<int64_t>(sizeof(float));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void MpiGroup::wait(void* request_ptr, const char* what) {
  MPI_Request& request = *static_cast<MPI_Request*>(request_ptr);
  using Clock = std::chrono::steady_clock;
  Clock::time_point signalled{};
  for (long spins = 0;; ++spins) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (spins > 1000) sched_yield();  // a rank sharing its core (mpirun --oversubscribe) runs meanwhile
    if (!stop_flag_ || !*stop_flag_) continue;
    const auto now = Clock::now();
    if (signalled == Clock::time_point{}) signalled = now;
    if (std::chrono::duration<double>(now - signalled).count() < kGiveUpSeconds) continue;
    char line[256];
    const int len = std::snprintf(line, sizeof line,
                                  "error: rank %d of %d: the other ranks stopped answering while results were "
                                  "exchanged (a rank ended or was killed; mpirun names it); nothing was saved since the "
                                  "last save\n", rank_, size_);
    if (len > 0) (void)!::write(2, line, static_cast<size_t>(std::min<int>(len, sizeof line - 1)));
    std::_Exit(1);
  }
}

std::vector<uint64_t> MpiGroup::all_gather(uint64_t value) {
  std::vector<uint64_t> all(static_cast<size_t>(size_));
  unsigned long long v = value;
  MPI_Request request;
  check(MPI_Iallgather(&v, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD, &request),
        "MPI_Iallgather");
  wait(&request, "MPI_Iallgather");
  return all;
}

}  // namespace attnkit

// The module's entry point, found by load_mpi_module with dlsym.
extern "C" __attribute__((visibility("default"))) const attnkit::MpiModule* attnkit_mpi_module() {
  return &attnkit::kModule;
}

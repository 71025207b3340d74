// prefer_passive_openmp (see tools/passive_openmp.h): compiled into each program that calls
// it, since re-executing the process is a program's decision, not the library's.
#include "tools/passive_openmp.h"

#include <unistd.h>

#include <cstdlib>

namespace attnkit {

void prefer_passive_openmp(int threads, char* const* argv) {
  if (threads <= 1 || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace attnkit

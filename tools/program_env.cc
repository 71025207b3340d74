// prefer_program_environment (see tools/program_env.h): compiled into each program that calls
// it, since re-executing the process is a program's decision, not the library's.
#include "tools/program_env.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace attnkit {

std::vector<EnvSetting> preferred_environment(int threads, const char* omp_wait_policy, const char* glibc_tunables,
                                              bool transparent_hugepages) {
  std::vector<EnvSetting> settings;
  // A restart costs a process start (~13 ms on our VMs, 1.6× a 20 ms `attnkit eval`): only
  // OMP_WAIT_POLICY is worth one; huge pages come with it.
  if (threads <= 1 || omp_wait_policy != nullptr) return settings;
  settings.push_back({"OMP_WAIT_POLICY", "PASSIVE"});
  const std::string tunables = glibc_tunables ? glibc_tunables : "";
  if (transparent_hugepages && tunables.find("glibc.malloc.hugetlb") == std::string::npos)
    settings.push_back({"GLIBC_TUNABLES", tunables + (tunables.empty() ? "" : ":") + "glibc.malloc.hugetlb=1"});
  return settings;
}

namespace {

// Whether the kernel gives transparent huge pages to the programs that ask (madvise):
// /sys/kernel/mm/transparent_hugepage/enabled reads e.g. "always [madvise] never". ("always"
// gives them without asking; "never" to no one.)
bool transparent_hugepages_on_request() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  return std::getline(f, line) && line.find("[madvise]") != std::string::npos;
}

}  // namespace

void prefer_program_environment(int threads, char* const* argv, bool hugepages) {
  const std::vector<EnvSetting> settings = preferred_environment(
      threads, std::getenv("OMP_WAIT_POLICY"), std::getenv("GLIBC_TUNABLES"), hugepages && transparent_hugepages_on_request());
  if (settings.empty()) return;
  for (const EnvSetting& s : settings) ::setenv(s.name.c_str(), s.value.c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace attnkit

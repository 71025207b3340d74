// load_mpi_module (see tools/mpi_collective.h): the program's side of the MPI module, without
// MPI itself.
#include <dlfcn.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "engine/error.h"
#include "tools/mpi_collective.h"

namespace attnkit {

const MpiModule& load_mpi_module() {
  static const MpiModule* module = nullptr;
  if (module) return *module;
  std::string exe(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size());
  exe.resize(n > 0 ? static_cast<size_t>(n) : 0);
  const std::string dir = exe.substr(0, exe.rfind('/') == std::string::npos ? 0 : exe.rfind('/'));
  // (ATTNKIT_MPI_MODULE_FROM_BIN: the installed module's folder relative to the installed program's.)
  const std::vector<std::string> paths = {dir + "/attnkit_mpi.so",
                                          dir + "/" ATTNKIT_MPI_MODULE_FROM_BIN "/attnkit_mpi.so"};
  std::string why;
  for (const std::string& path : paths) {
    // RTLD_GLOBAL: Open MPI loads components of its own that look for its symbols there.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!handle) {
      const char* error = ::dlerror();  // (names the file)
      why += "; " + (error ? std::string(error) : path + ": cannot be loaded");
      continue;
    }
    using Entry = const MpiModule* (*)();
    const auto entry = reinterpret_cast<Entry>(::dlsym(handle, "attnkit_mpi_module"));
    const MpiModule* found = entry ? entry() : nullptr;
    if (!found || found->version != kMpiModuleVersion) {
      ::dlclose(handle);
      why += "; " + path + (found ? ": made for another attnkit (module version " + std::to_string(found->version) +
                                        ", this program's " + std::to_string(kMpiModuleVersion) + ")"
                                  : ": no attnkit_mpi_module");
      continue;
    }
    module = found;
    return *module;
  }
  throw Error("cannot load the MPI module attnkit_mpi.so (reinstall attnkit, or build it with ATTNKIT_MPI)" + why);
}

}  // namespace attnkit

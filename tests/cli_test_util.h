// Running the attnkit program (ATTNKIT_CLI) from tests: in the background with its output in
// files, under a file-size limit (a full disk), and signalled or killed at will.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "file_test_util.h"

namespace attnkit::testing {

namespace fs = std::filesystem;

// A fresh folder ATTNKIT_BINARY_DIR/group/name (kept after the test, for a look).
inline fs::path cli_scratch(const std::string& group, const std::string& name) {
  fs::path dir = fs::path(ATTNKIT_BINARY_DIR) / group / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// attnkit started in the background, stdout and stderr into files of `dir`.
struct Child {
  pid_t pid = -1;
  fs::path out, err;

  // fsize_limit > 0: every file the child writes is cut at that many bytes (EFBIG, as on a
  // full disk) — RLIMIT_FSIZE, SIGXFSZ at its default action (attnkit ignores it itself, so
  // that its writes fail with EFBIG instead of the signal killing it).
  // stdin_file: the child's standard input ("" = inherited).
  Child(const std::vector<std::string>& args, const fs::path& dir, const std::string& tag, long fsize_limit = 0,
        const fs::path& stdin_file = {})
      : out(dir / (tag + ".out")), err(dir / (tag + ".err")) {
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, 1), ::dup2(e, 2);
      if (!stdin_file.empty()) ::dup2(::open(stdin_file.c_str(), O_RDONLY), 0);
      if (fsize_limit > 0) {
        ::signal(SIGXFSZ, SIG_DFL);
        struct rlimit rl {static_cast<rlim_t>(fsize_limit), static_cast<rlim_t>(fsize_limit)};
        ::setrlimit(RLIMIT_FSIZE, &rl);
      }
      ::setenv("OMP_NUM_THREADS", "1", 1);
      std::vector<char*> argv;
      std::string cli = ATTNKIT_CLI;
      argv.push_back(cli.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  // The exit code, 128 + signal when killed; *peak_rss_kb gets the child's peak memory.
  int wait(long* peak_rss_kb = nullptr) {
    int status = 0;
    struct rusage ru {};
    REQUIRE(::wait4(pid, &status, 0, &ru) == pid);
    if (peak_rss_kb) *peak_rss_kb = ru.ru_maxrss;
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Child() {
    if (pid > 0) ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
  }
  std::string stderr_text() const { return slurp(err); }
};

inline int run_cli(const std::vector<std::string>& args, const fs::path& dir, const std::string& tag, long fsize_limit = 0) {
  Child c(args, dir, tag, fsize_limit);
  const int code = c.wait();
  INFO("attnkit exit " << code << ", stderr: " << c.stderr_text());
  return code;
}

inline nlohmann::json json_file(const fs::path& p) { return nlohmann::json::parse(slurp(p)); }

}  // namespace attnkit::testing

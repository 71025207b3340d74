// `mpirun -np N attnkit train …` end to end (Open MPI): the losses of one process at the same
// global batch, the same bits on every run, resume across rank counts, a killed rank, ranks
// started differently. Built when the program is built with MPI (ATTNKIT_MPI); elsewhere
// every case reports itself skipped.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "cli_test_util.h"
#include "skip_test_util.h"

namespace attnkit::testing {
namespace {

#ifdef ATTNKIT_MPIRUN
// mpirun with `ranks` copies of attnkit ARGS, in the background; an MPMD job when `second`
// is given (one rank each). Root may run it; ranks share the 2 cores (--oversubscribe).
struct Mpirun {
  pid_t pid = -1;
  fs::path out, err;
  Mpirun(int ranks, const std::vector<std::string>& args, const fs::path& dir, const std::string& tag,
         const std::vector<std::string>& second = {})
      : out(dir / (tag + ".out")), err(dir / (tag + ".err")) {
    std::vector<std::string> argv = {ATTNKIT_MPIRUN, "--oversubscribe", "--bind-to", "none"};
    auto app = [&](int n, const std::vector<std::string>& a) {
      argv.insert(argv.end(), {"-np", std::to_string(n), ATTNKIT_CLI});
      argv.insert(argv.end(), a.begin(), a.end());
    };
    if (second.empty()) {
      app(ranks, args);
    } else {
      app(1, args);
      argv.push_back(":");
      app(1, second);
    }
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 1);
      ::dup2(::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
      ::chdir(dir.c_str());
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
      ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
      // Sanitize preset: Open MPI's components keep memory and are unloaded before the leak
      // check runs, so LeakSanitizer can name no library to suppress; the ranks run without
      // it (AddressSanitizer and UBSan stay on; test_data_parallel checks the trainer's
      // group code for leaks in one process).
      if (const char* asan = std::getenv("ASAN_OPTIONS"))
        ::setenv("ASAN_OPTIONS", (std::string(asan) + ":detect_leaks=0").c_str(), 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      ::setenv("ATTNKIT_TEST_JOB", tag.c_str(), 1);  // finds the job's ranks in /proc
      std::vector<char*> p;
      for (auto& a : argv) p.push_back(a.data());
      p.push_back(nullptr);
      ::execv(p[0], p.data());
      ::_exit(127);
    }
  }
  int wait() {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Mpirun() {
    if (pid > 0) ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
  }
  std::string stderr_text() const { return slurp(err); }
  std::string stdout_text() const { return slurp(out); }
};

int run_mpi(int ranks, const std::vector<std::string>& args, const fs::path& dir, const std::string& tag) {
  Mpirun m(ranks, args, dir, tag);
  const int code = m.wait();
  INFO("mpirun exit " << code << ", stderr: " << m.stderr_text());
  return code;
}

std::vector<double> losses(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // step,loss
  std::vector<double> out;
  while (std::getline(in, line)) out.push_back(std::stod(line.substr(line.find(',') + 1)));
  return out;
}

void require_close(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1 << ": " << a[i] << " vs " << b[i]);
    REQUIRE(std::abs(a[i] - b[i]) <= 1e-5 * std::abs(b[i]));
  }
}

// The pid of rank `rank` of the job tagged `tag`, 0 while it has not started.
pid_t rank_pid(const std::string& tag, int rank) {
  const std::string want_job = "ATTNKIT_TEST_JOB=" + tag, want_rank = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  DIR* d = ::opendir("/proc");
  pid_t found = 0;
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream env(fs::path("/proc") / e->d_name / "environ", std::ios::binary);
    std::string entry;
    bool job = false, r = false;
    while (std::getline(env, entry, '\0')) job |= entry == want_job, r |= entry == want_rank;
    std::ifstream cmd(fs::path("/proc") / e->d_name / "cmdline", std::ios::binary);
    std::string exe;
    std::getline(cmd, exe, '\0');
    if (job && r && exe == ATTNKIT_CLI) found = pid;
  }
  if (d) ::closedir(d);
  return found;
}

const std::vector<std::string> kReversal = {"train", "reversal", "--epochs", "2", "--train-size", "200",
                                            "--val-size", "64", "--batch-size", "12", "--no-pictures", "--quiet"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}
#endif

}  // namespace

TEST_CASE("mpirun -np 2 and -np 3 train with the losses and accuracy of one process") {
#ifndef ATTNKIT_MPIRUN
  ATTNKIT_SKIP("attnkit built without MPI (ATTNKIT_MPI off)");
#else
  const fs::path dir = cli_scratch("mpi", "equivalence");
  // 200 sequences in batches of 12: 34 steps; each epoch's last batch of 8 splits 4/4 or 2/3/3.
  REQUIRE(run_cli(with(kReversal, {"--out", (dir / "alone").string()}), dir, "alone") == 0);
  const auto alone = losses(dir / "alone/loss.csv");
  REQUIRE(alone.size() == 34);
  const auto alone_metrics = json_file(dir / "alone/metrics.json");
  REQUIRE(alone_metrics["ranks"] == 1);
  for (int ranks : {2, 3}) {
    INFO(ranks << " ranks");
    const std::string out = "np" + std::to_string(ranks);
    REQUIRE(run_mpi(ranks, with(kReversal, {"--out", out}), dir, out) == 0);
    require_close(losses(dir / out / "loss.csv"), alone);
    const auto m = json_file(dir / out / "metrics.json");
    REQUIRE(m["ranks"] == ranks);
    REQUIRE(m["val_accuracy"] == alone_metrics["val_accuracy"]);
    REQUIRE(m["communication"]["floats_summed_per_step"] == alone_metrics["param_count"].get<int64_t>() + 2);
    REQUIRE(m["communication"]["bytes_sent_per_step"].get<int64_t>() > 0);
  }
  // Rank 0 alone prints.
  Mpirun loud(2, {"train", "reversal", "--epochs", "1", "--train-size", "64", "--no-pictures", "--out", "loud"}, dir,
              "loud");
  REQUIRE(loud.wait() == 0);
  const std::string text = loud.stdout_text();
  REQUIRE(text.find("training reversal") != std::string::npos);
  REQUIRE(text.find("training reversal", text.find("training reversal") + 1) == std::string::npos);
  REQUIRE(text.find("2 ranks × 1 thread") != std::string::npos);
#endif
}

TEST_CASE("two mpirun jobs of the same size give the same bits") {
#ifndef ATTNKIT_MPIRUN
  ATTNKIT_SKIP("attnkit built without MPI (ATTNKIT_MPI off)");
#else
  const fs::path dir = cli_scratch("mpi", "repeat");
  REQUIRE(run_mpi(3, with(kReversal, {"--out", "a"}), dir, "a") == 0);
  REQUIRE(run_mpi(3, with(kReversal, {"--out", "b"}), dir, "b") == 0);
  REQUIRE(slurp(dir / "a/loss.csv") == slurp(dir / "b/loss.csv"));
  REQUIRE(slurp(dir / "a/model.safetensors") == slurp(dir / "b/model.safetensors"));
#endif
}

TEST_CASE("resume works with another rank count than the run that saved") {
#ifndef ATTNKIT_MPIRUN
  ATTNKIT_SKIP("attnkit built without MPI (ATTNKIT_MPI off)");
#else
  const fs::path dir = cli_scratch("mpi", "resume");
  REQUIRE(run_cli(with(kReversal, {"--out", (dir / "straight").string()}), dir, "straight") == 0);
  const auto straight = losses(dir / "straight/loss.csv");
  auto one_epoch = kReversal;
  one_epoch[3] = "1";
  // 2 ranks, then 3; and 1 process, then 2 ranks.
  REQUIRE(run_mpi(2, with(one_epoch, {"--out", "x"}), dir, "x1") == 0);
  REQUIRE(run_mpi(3, {"train", "reversal", "--resume", "x", "--epochs", "2", "--no-pictures", "--quiet"}, dir, "x2") == 0);
  require_close(losses(dir / "x/loss.csv"), straight);
  REQUIRE(json_file(dir / "x/metrics.json")["ranks"] == 3);
  REQUIRE(run_cli(with(one_epoch, {"--out", (dir / "y").string()}), dir, "y1") == 0);
  REQUIRE(run_mpi(2, {"train", "reversal", "--resume", "y", "--epochs", "2", "--no-pictures", "--quiet"}, dir, "y2") == 0);
  require_close(losses(dir / "y/loss.csv"), straight);
#endif
}

TEST_CASE("a killed rank ends the job with an error naming it and leaves the checkpoint as it was") {
#ifndef ATTNKIT_MPIRUN
  ATTNKIT_SKIP("attnkit built without MPI (ATTNKIT_MPI off)");
#else
  const fs::path dir = cli_scratch("mpi", "killed");
  REQUIRE(run_cli({"train", "reversal", "--epochs", "1", "--no-pictures", "--quiet", "--out", (dir / "k").string()}, dir,
                  "first") == 0);
  const std::string before = slurp(dir / "k/model.safetensors"), metrics_before = slurp(dir / "k/metrics.json");
  Mpirun job(2, {"train", "reversal", "--resume", "k", "--epochs", "100000", "--no-pictures", "--quiet"}, dir, "killed");
  pid_t victim = 0;
  for (int i = 0; i < 600 && !victim; ++i) {
    victim = rank_pid("killed", 1);
    if (!victim) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(victim > 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // into the training steps
  ::kill(victim, SIGKILL);
  const int code = job.wait();
  const std::string err = job.stderr_text();
  INFO("stderr: " << err);
  REQUIRE(code != 0);
  REQUIRE(err.find("error: rank 0 of 2: the other ranks stopped answering") != std::string::npos);
  REQUIRE(err.find("rank 1") != std::string::npos);  // mpirun: "process rank 1 … exited on signal 9"
  REQUIRE(slurp(dir / "k/model.safetensors") == before);
  REQUIRE(slurp(dir / "k/metrics.json") == metrics_before);
#endif
}

TEST_CASE("a plain run never loads the MPI module, and without it --version and mpirun say so") {
#ifndef ATTNKIT_MPIRUN
  ATTNKIT_SKIP("attnkit built without MPI (ATTNKIT_MPI off)");
#else
  // A copy of the program in a folder of its own: its attnkit_mpi.so is not beside it.
  const fs::path dir = cli_scratch("mpi", "no_module");
  const fs::path exe = dir / "attnkit";
  fs::copy_file(ATTNKIT_CLI, exe);
  REQUIRE_FALSE(fs::exists(dir / "attnkit_mpi.so"));
  auto run = [&](const std::string& env, const std::string& args, const std::string& tag) {
    const std::string command = "cd '" + dir.string() + "' && " + env + " '" + exe.string() + "' " + args + " > " +
                                tag + ".out 2> " + tag + ".err";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  auto text = [&](const std::string& name) {
    std::ifstream f(dir / name);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  // Training, alone: nothing of MPI needed.
  REQUIRE(run("", "train reversal --epochs 1 --no-pictures --quiet --out run", "plain") == 0);
  CHECK(fs::exists(dir / "run" / "model.safetensors"));
  REQUIRE(run("", "--version", "version") == 0);
  CHECK(text("version.out").find("MPI: unavailable: cannot load the MPI module attnkit_mpi.so") != std::string::npos);
  // Started by a launcher (its environment), the process says what is missing and ends.
  CHECK(run("OMPI_COMM_WORLD_SIZE=2", "train reversal --epochs 1 --no-pictures --out run2", "launched") == 1);
  const std::string err = text("launched.err");
  INFO(err);
  CHECK(err.find("error: cannot load the MPI module attnkit_mpi.so") != std::string::npos);
  CHECK(err.find((dir / "attnkit_mpi.so").string()) != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "run2"));
  // A launcher of one process needs no MPI: the process runs alone.
  CHECK(run("OMPI_COMM_WORLD_SIZE=1", "train reversal --epochs 1 --no-pictures --quiet --out run3", "alone") == 0);
  CHECK(fs::exists(dir / "run3" / "model.safetensors"));
  // The program as built finds the module beside it.
  const std::string built = "'" + std::string(ATTNKIT_CLI) + "' --version > '" + (dir / "built.out").string() + "'";
  CHECK(std::system(built.c_str()) == 0);
  CHECK(text("built.out").find("MPI: Open MPI") != std::string::npos);
#endif
}

TEST_CASE("ranks started with other arguments and batches that do not divide are refused") {
#ifndef ATTNKIT_MPIRUN
  ATTNKIT_SKIP("attnkit built without MPI (ATTNKIT_MPI off)");
#else
  const fs::path dir = cli_scratch("mpi", "refused");
  {
    Mpirun job(0, with(kReversal, {"--seed", "1", "--out", "s"}), dir, "seeds", with(kReversal, {"--seed", "2", "--out", "s"}));
    REQUIRE(job.wait() == 1);
    const std::string err = job.stderr_text();
    INFO(err);
    REQUIRE(err.find("error: rank 1 of 2 was started with other arguments than rank 0") != std::string::npos);
    REQUIRE_FALSE(fs::exists(dir / "s"));
  }
  {
    Mpirun job(3, {"train", "reversal", "--batch-size", "32", "--no-pictures", "--out", "b"}, dir, "batch");
    REQUIRE(job.wait() == 2);
    const std::string err = job.stderr_text();
    INFO(err);
    const std::string want = "--batch-size 32 does not divide among 3 processes";
    REQUIRE(err.find(want) != std::string::npos);
    REQUIRE(err.find(want, err.find(want) + 1) == std::string::npos);  // told once, by rank 0
    REQUIRE_FALSE(fs::exists(dir / "b"));
  }
  {
    Mpirun job(2, {"eval", "--checkpoint", "nowhere"}, dir, "eval");
    REQUIRE(job.wait() == 2);
    REQUIRE(job.stderr_text().find("only 'attnkit train' runs across the processes") != std::string::npos);
  }
  {  // one process under mpirun: every command runs as it does alone
    Mpirun job(1, {"demo", "lookup"}, dir, "one");
    REQUIRE(job.wait() == 0);
    REQUIRE(job.stdout_text().find("запрос про еду") != std::string::npos);
    Mpirun missing(1, {"eval", "--checkpoint", "nowhere"}, dir, "one_eval");
    REQUIRE(missing.wait() == 1);
    const std::string err = missing.stderr_text();
    INFO(err);
    REQUIRE(err.find("error: nowhere") != std::string::npos);
    REQUIRE(err.find("ending the job") == std::string::npos);
  }
#endif
}

}  // namespace attnkit::testing

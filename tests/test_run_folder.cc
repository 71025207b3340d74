// The run folder changes as one unit (tools/run_folder.h): under a full disk, SIGKILL at any
// moment and a second writer, the folder holds one whole version; pictures that cannot be
// written give exit 3 and say so in metrics.json; --save-every and SIGINT/SIGTERM save a
// folder that resumes bit for bit; --resume takes flags equal to the checkpoint's values.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "cli_test_util.h"

namespace {

using namespace attnkit::testing;
using Clock = std::chrono::steady_clock;

fs::path scratch(const std::string& name) { return cli_scratch("test_run_folder_tmp", name); }

// Every regular file of a folder (hidden ones but the lock file included) and its bytes.
std::map<std::string, std::string> folder_bytes(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() != ".attnkit.lock")
      files[e.path().filename().string()] = slurp(e.path());
  return files;
}

// Entries beside the run folder that a writer leaves while it works.
int staging_folders(const fs::path& parent) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(parent))
    n += e.path().filename().string().rfind(".attnkit-staging-", 0) == 0;
  return n;
}

// The checkpoint's config entry `key`.
std::string checkpoint_entry(const fs::path& checkpoint, const std::string& key) {
  const auto meta = attnkit::read_checkpoint_metadata(checkpoint.string());
  const auto it = meta.find("config." + key);
  return it == meta.end() ? "" : it->second;
}

// One whole version: every file comes from the same run (seed) and the same step.
void require_one_version(const fs::path& run) {
  const nlohmann::json meta = json_file(run / "meta.json"), metrics = json_file(run / "metrics.json");
  const std::string seed = std::to_string(metrics["seed"].get<uint64_t>());
  INFO("folder " << run << ", meta " << meta.dump() << ", metrics seed " << seed);
  REQUIRE(meta["seed"].get<uint64_t>() == metrics["seed"].get<uint64_t>());
  REQUIRE(checkpoint_entry(run / "model.safetensors", "seed") == seed);
  REQUIRE(meta["step"] == metrics["steps"]);
  const std::string csv = slurp(run / "loss.csv");
  REQUIRE(static_cast<int64_t>(std::count(csv.begin(), csv.end(), '\n')) == metrics["steps"].get<int64_t>() + 1);
  // The pictures of this version, not of an earlier one: written after the data files.
  if (metrics["pictures_written"].get<bool>())
    REQUIRE(fs::last_write_time(run / "report.html") >= fs::last_write_time(run / "meta.json"));
}

}  // namespace

TEST_CASE("disk full while saving over an earlier run: the earlier run stays whole and the error names the file") {
  const fs::path dir = scratch("disk_full");
  const fs::path run = dir / "runs" / "ns";
  REQUIRE(run_cli({"train", "neighbor-sum", "--epochs", "2", "--quiet", "--out", run.string()}, dir, "first") == 0);
  const auto before = folder_bytes(run);
  REQUIRE(before.count("model.safetensors"));
  // Cut every file at sizes that fail one file after another: loss.csv, the checkpoint, ...
  // (At least 1 KB: clang's OpenMP runtime sizes a 1 KB shared-memory file at start-up and
  // aborts when it cannot.)
  for (long limit : {1200L, 4000L, 60000L}) {
    INFO("file size limit " << limit);
    Child c({"train", "neighbor-sum", "--epochs", "3", "--seed", "5", "--quiet", "--out", run.string()}, dir,
            "full" + std::to_string(limit), limit);
    const int code = c.wait();
    const std::string err = c.stderr_text();
    INFO(err);
    CHECK(code == 1);
    CHECK(err.rfind("error: ", 0) == 0);
    CHECK(err.find(run.string() + "/") != std::string::npos);  // names the file being written
    CHECK(err.find(".attnkit-staging-") == std::string::npos);
    CHECK(err.find("(" + run.string() + " is unchanged)") != std::string::npos);
    CHECK(folder_bytes(run) == before);
    CHECK(staging_folders(run.parent_path()) == 0);
  }
  require_one_version(run);
}

TEST_CASE("pictures that cannot be written: everything else is saved, metrics.json says why, exit 3") {
  const fs::path dir = scratch("pictures_fail");
  const fs::path first = dir / "first", run = dir / "run";
  REQUIRE(run_cli({"train", "neighbor-sum", "--epochs", "1", "--quiet", "--out", first.string()}, dir, "first") == 0);
  // A limit above every data file and below the largest picture.
  uintmax_t data_max = 0, picture_max = 0;
  for (const auto& e : fs::directory_iterator(first)) {
    const std::string ext = e.path().extension().string();
    auto& m = ext == ".png" || ext == ".html" ? picture_max : data_max;
    m = std::max(m, fs::file_size(e.path()));
  }
  const long limit = static_cast<long>(data_max) + 4096;
  REQUIRE(picture_max > static_cast<uintmax_t>(limit));
  Child c({"train", "neighbor-sum", "--epochs", "1", "--quiet", "--out", run.string()}, dir, "run", limit);
  CHECK(c.wait() == 3);
  const std::string err = c.stderr_text();
  CHECK(err.rfind("error: pictures not drawn: ", 0) == 0);
  CHECK(err.find("everything else is saved") != std::string::npos);
  CHECK(err.find((run / "attention.png").string()) != std::string::npos);
  const nlohmann::json m = json_file(run / "metrics.json");
  CHECK(m["pictures_written"] == false);
  CHECK(m["pictures_error"].get<std::string>().find(".png") != std::string::npos);
  CHECK(m["state"] == "finished");
  for (const char* name : {"attention.png", "links.png", "loss.png", "report.html"}) CHECK_FALSE(fs::exists(run / name));
  require_one_version(run);
  // The saved run is a good one: it resumes.
  CHECK(run_cli({"train", "neighbor-sum", "--epochs", "2", "--quiet", "--no-pictures", "--resume", run.string()}, dir,
              "resume") == 0);
}

TEST_CASE("SIGKILL at any moment of a run over an earlier one leaves one whole version") {
  const fs::path dir = scratch("sigkill");
  const fs::path run = dir / "runs" / "ns";
  const std::vector<std::string> base = {"train", "neighbor-sum", "--epochs", "2", "--quiet", "--out", run.string()};
  auto with_seed = [&](int seed) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--seed", std::to_string(seed)});
    return args;
  };
  const auto t0 = Clock::now();
  REQUIRE(run_cli(with_seed(1000), dir, "first") == 0);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  attnkit::Rng rng(11);
  int killed = 0;
  for (int round = 0; round < 16; ++round) {
    Child c(with_seed(round), dir, "round");
    // Uniform over the run's duration, so the kills land in training, staging and commit.
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds * static_cast<double>(rng.below(1000)) / 1000.0));
    ::kill(c.pid, SIGKILL);
    killed += c.wait() == 128 + SIGKILL;
    INFO("round " << round);
    require_one_version(run);
  }
  CHECK(killed > 8);
  // The next writer clears the staging folders the killed ones left.
  REQUIRE(run_cli(with_seed(99), dir, "last") == 0);
  require_one_version(run);
  CHECK(json_file(run / "metrics.json")["seed"] == 99);
  CHECK(staging_folders(run.parent_path()) == 0);
}

TEST_CASE("a second writer into a run folder is refused and named, the lock ends with the holder") {
  const fs::path dir = scratch("two_writers");
  const fs::path run = dir / "runs" / "busy";
  Child holder({"train", "reversal", "--epochs", "100000", "--quiet", "--out", run.string()}, dir, "holder");
  const std::string pid = "pid " + std::to_string(holder.pid) + ",";
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (slurp(run / ".attnkit.lock").find(pid) == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(slurp(run / ".attnkit.lock").find(pid) != std::string::npos);

  Child second({"train", "neighbor-sum", "--epochs", "1", "--quiet", "--out", run.string()}, dir, "second");
  CHECK(second.wait() == 1);
  const std::string err = second.stderr_text();
  CHECK(err.find("is being written by another process (" + pid + " attnkit train reversal") != std::string::npos);
  CHECK(err.find(run.string()) != std::string::npos);

  ::kill(holder.pid, SIGKILL);
  holder.wait();
  // The kernel dropped the lock with the process.
  CHECK(run_cli({"train", "neighbor-sum", "--epochs", "1", "--quiet", "--out", run.string()}, dir, "third") == 0);
  require_one_version(run);
}

TEST_CASE("an --out that is a symbolic link replaces the folder it points to, and a folder keeps its permissions") {
  const fs::path dir = scratch("symlink_out");
  const fs::path target = dir / "target", link = dir / "link";
  fs::create_directories(target);
  ::chmod(target.c_str(), 0550);  // no write permission, even for its owner: kept, and no old version left beside it
  fs::create_directory_symlink("target", link);
  const std::vector<std::string> train = {"train", "reversal", "--epochs", "1", "--train-size", "64", "--quiet",
                                          "--no-pictures", "--out"};
  for (int round = 0; round < 2; ++round) {  // a new folder's first version, then a second one
    std::vector<std::string> args = train;
    args.push_back(link.string());
    REQUIRE(run_cli(args, dir, "train") == 0);
    CHECK(fs::is_symlink(link));
    CHECK(fs::read_symlink(link) == "target");
    CHECK(fs::exists(target / "model.safetensors"));
    struct stat st {};
    REQUIRE(::stat(target.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0550);
    require_one_version(target);
    int staged = 0;
    for (const auto& e : fs::directory_iterator(dir)) staged += e.path().filename().string().rfind(".attnkit-staging-", 0) == 0;
    CHECK(staged == 0);
  }
  fs::create_directory_symlink("nowhere", dir / "dangling");
  std::vector<std::string> args = train;
  args.push_back((dir / "dangling").string());
  Child c(args, dir, "dangling");
  REQUIRE(c.wait() == 1);
  CHECK(c.stderr_text().find("dangling: is a symbolic link to a folder that is not there (nowhere)") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "nowhere"));
}

TEST_CASE("resume of a checkpoint without a validation set (val_size 0, a library run) names the entry") {
  const fs::path dir = scratch("no_val");
  const fs::path run = dir / "run";
  REQUIRE(run_cli({"train", "reversal", "--epochs", "1", "--train-size", "64", "--quiet", "--no-pictures", "--out",
                   run.string()}, dir, "train") == 0);
  attnkit::SafetensorsFile f = attnkit::read_safetensors((run / "model.safetensors").string());
  REQUIRE(f.metadata.count("config.val_size") == 1);
  f.metadata["config.val_size"] = "0";
  attnkit::write_safetensors((run / "model.safetensors").string(), f.tensors, f.metadata);
  const fs::path out = dir / "more";
  Child c({"train", "reversal", "--epochs", "2", "--resume", run.string(), "--out", out.string()}, dir, "resume");
  REQUIRE(c.wait() == 1);
  const std::string err = c.stderr_text();
  INFO(err);
  CHECK(err.find("model.safetensors: 'config.val_size' = '0': the run had no validation set") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "model.safetensors"));
}

TEST_CASE("a signal after the last step (during the final evaluation and save) keeps the finished run") {
  // A large validation set makes the final save take a second or more: the signal lands in it.
  const fs::path dir = scratch("signal_final_save");
  const fs::path run = dir / "run";
  Child c({"train", "neighbor-sum", "--epochs", "1", "--train-size", "64", "--val-size", "1500000", "--no-pictures",
           "--out", run.string()},
          dir, "train");
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (slurp(c.out).find("epoch 1/1") == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(slurp(c.out).find("epoch 1/1") != std::string::npos);  // the one step is done
  ::kill(c.pid, SIGINT);
  REQUIRE(c.wait() == 0);
  const std::string err = c.stderr_text();
  INFO(err);
  CHECK(err.find("SIGINT arrived during or after the last step: the finished run is saved in " + run.string()) !=
        std::string::npos);
  const nlohmann::json m = json_file(run / "metrics.json");
  CHECK(m["state"] == "finished");
  CHECK(m["steps"] == 1);
  require_one_version(run);
}

TEST_CASE("SIGINT mid-training saves the run, exits 130, and --resume finishes it bit for bit") {
  const fs::path dir = scratch("sigint");
  const fs::path full = dir / "full", part = dir / "part";
  const std::vector<std::string> common = {"train", "neighbor-sum", "--epochs", "150", "--quiet", "--no-pictures",
                                           "--snapshot-steps", "0,500,2000,5000"};
  auto args = [&](const fs::path& out, std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), {"--out", out.string()});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  REQUIRE(run_cli(args(full, {}), dir, "full") == 0);

  for (const int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    fs::remove_all(part);
    Child c(args(part, {"--save-every", "100"}), dir, "part");
    // The first save (step 100) is there: training is under way.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (!fs::exists(part / "metrics.json") && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(fs::exists(part / "metrics.json"));
    ::kill(c.pid, sig);
    REQUIRE(c.wait() == 128 + sig);
    const std::string err = c.stderr_text();
    INFO(err);
    CHECK(err.find(std::string("stopped by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM")) != std::string::npos);
    const nlohmann::json m = json_file(part / "metrics.json");
    CHECK(m["state"] == "stopped");
    CHECK(m["steps"].get<int64_t>() >= 100);
    CHECK(m["steps"].get<int64_t>() < m["total_steps"].get<int64_t>());
    CHECK(err.find("after step " + std::to_string(m["steps"].get<int64_t>())) != std::string::npos);
    require_one_version(part);

    REQUIRE(run_cli({"train", "neighbor-sum", "--quiet", "--no-pictures", "--resume", part.string()}, dir, "resume") == 0);
    CHECK(json_file(part / "metrics.json")["state"] == "finished");
    for (const char* name : {"model.safetensors", "loss.csv", "attention.npy", "snapshots.npy"}) {
      INFO(name);
      CHECK(slurp(part / name) == slurp(full / name));
    }
  }
}

TEST_CASE("save-every: the folder between saves is a whole earlier version that resumes") {
  const fs::path dir = scratch("save_every");
  const fs::path run = dir / "run";
  // Killed after the saves began, the folder holds the last save (a multiple of 40 steps).
  Child c({"train", "neighbor-sum", "--epochs", "150", "--quiet", "--no-pictures", "--save-every", "40", "--out",
           run.string()},
          dir, "run");
  // Killed once a save past step 120 is there (more than two epochs of 47 steps).
  auto saved_steps = [&]() -> int64_t {
    try {
      return json_file(run / "metrics.json")["steps"].get<int64_t>();
    } catch (const std::exception&) {
      return 0;  // not there yet
    }
  };
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (saved_steps() < 120 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(saved_steps() >= 120);
  ::kill(c.pid, SIGKILL);
  c.wait();
  require_one_version(run);
  const nlohmann::json m = json_file(run / "metrics.json");
  CHECK(m["state"] == "in progress");
  CHECK(m["steps"].get<int64_t>() % 40 == 0);
  CHECK(run_cli({"train", "neighbor-sum", "--epochs", "2", "--quiet", "--no-pictures", "--resume", run.string()}, dir,
                "short") == 2);  // fewer epochs than done
}

TEST_CASE("resume: flags equal to the checkpoint's are accepted, different ones refused, fewer epochs refused") {
  const fs::path dir = scratch("resume_flags");
  const fs::path r = dir / "run";
  REQUIRE(run_cli({"train", "neighbor-sum", "--epochs", "2", "--seed", "4", "--lr", "0.01", "--quiet", "--no-pictures",
               "--out", r.string()},
              dir, "first") == 0);
  const std::string epochs_before = checkpoint_entry(r / "model.safetensors", "epochs");
  CHECK(epochs_before == "2");
  Child fewer({"train", "neighbor-sum", "--epochs", "1", "--quiet", "--resume", r.string()}, dir, "fewer");
  CHECK(fewer.wait() == 2);
  CHECK(fewer.stderr_text().find("--epochs 1: the checkpoint has already trained") != std::string::npos);
  CHECK(checkpoint_entry(r / "model.safetensors", "epochs") == "2");  // nothing rewritten
  Child other({"train", "neighbor-sum", "--epochs", "3", "--seed", "5", "--quiet", "--resume", r.string()}, dir, "other");
  CHECK(other.wait() == 2);
  CHECK(other.stderr_text().find("--seed 5 differs from the checkpoint's 4") != std::string::npos);
  CHECK(run_cli({"train", "neighbor-sum", "--epochs", "3", "--seed", "4", "--lr", "0.01", "--batch-size", "64", "--quiet",
             "--no-pictures", "--resume", r.string()},
            dir, "same") == 0);
  CHECK(checkpoint_entry(r / "model.safetensors", "epochs") == "3");
}

TEST_CASE("paths that name nothing usable: '' is a usage error, a FIFO is refused without waiting for a writer") {
  const fs::path dir = scratch("paths");
  CHECK(run_cli({"train", "neighbor-sum", "--data", ""}, dir, "data") == 2);
  CHECK(run_cli({"train", "neighbor-sum", "--out", ""}, dir, "out") == 2);
  CHECK(run_cli({"eval", "--checkpoint", ""}, dir, "eval") == 2);
  CHECK(run_cli({"render", dir.string(), "--layer", "-1", "--out", (dir / "x.png").string()}, dir, "layer") == 2);
  const fs::path fifo = dir / "data.npz";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  Child c({"train", "neighbor-sum", "--quiet", "--data", fifo.string(), "--out", (dir / "run").string()}, dir, "fifo");
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (::waitpid(c.pid, &status, WNOHANG) == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(Clock::now() < deadline);  // did not hang
  c.pid = -1;
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(c.stderr_text().find("not a regular file") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "run"));
}

TEST_CASE("the working folder and the root are refused as output folders and nothing changes") {
  const fs::path dir = scratch("dot_out");
  const fs::path sub = dir / "sub";
  fs::create_directories(sub);
  REQUIRE(run_cli({"train", "reversal", "--epochs", "1", "--quiet", "--no-pictures", "--out", sub.string()}, dir,
                  "first") == 0);
  const auto before = folder_bytes(sub);
  // The child runs in this process's working folder: sub, for the test's duration. A new
  // version replaces the whole folder, which would leave the shell in the deleted old one.
  struct Cwd {
    fs::path old = fs::current_path();
    ~Cwd() { fs::current_path(old); }
  } restore;
  fs::current_path(sub);
  for (const std::string& out : std::vector<std::string>{".", "..", "../sub", sub.string() + "/.", "/"}) {
    INFO("--out " << out);
    Child c({"train", "reversal", "--epochs", "1", "--quiet", "--no-pictures", "--out", out}, dir, "refused");
    REQUIRE(c.wait() == 1);
    const std::string err = c.stderr_text();
    INFO(err);
    REQUIRE(err.rfind("error: ", 0) == 0);
    REQUIRE(err.find(out == "/" ? "filesystem root" : "is the working folder") != std::string::npos);
    REQUIRE(folder_bytes(sub) == before);
    REQUIRE(staging_folders(sub) == 0);
    REQUIRE(staging_folders(dir) == 0);
  }
  REQUIRE(!fs::exists("/.attnkit.lock"));
}

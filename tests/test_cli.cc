// The attnkit program end to end: each subcommand on small settings, its files read back by
// numpy (/usr/bin/python3), exit codes 2 for usage errors and 1 (one "error:" line) otherwise.
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <cctype>
#include <cmath>
#include <vector>
#include <iterator>

#include <nlohmann/json.hpp>

#include "engine/safetensors.h"
#include "engine/simd_target.h"
#include "file_test_util.h"

namespace {

namespace fs = std::filesystem;
using attnkit::testing::slurp;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct Result {
  int code;
  std::string out, err;
};

fs::path scratch(const std::string& name) {
  fs::path dir = fs::path(ATTNKIT_BINARY_DIR) / "test_cli_tmp" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

Result sh(const std::string& command, const fs::path& dir) {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string full = command + " > '" + out.string() + "' 2> '" + err.string() + "'";
  const int status = std::system(full.c_str());
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  INFO(command << "\nstdout: " << r.out << "\nstderr: " << r.err);
  return r;
}

Result attnkit(const std::string& args, const fs::path& dir) {
  return sh(std::string("'") + ATTNKIT_CLI + "' " + args, dir);
}

// Runs a numpy script; its stdout is returned. The script sees the folder as `d`.
std::string numpy(const std::string& script, const fs::path& dir) {
  const fs::path py = dir / "check.py";
  std::ofstream(py) << "import numpy as np, json, sys\nd = " << "'" << dir.string() << "'\n" << script << "\n";
  const Result r = sh("/usr/bin/python3 '" + py.string() + "'", dir);
  INFO(script << "\n" << r.err);
  REQUIRE(r.code == 0);
  return r.out;
}

std::string fmt_accuracy(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "accuracy %.4f", v);
  return buf;
}

nlohmann::json json_file(const fs::path& p) { return nlohmann::json::parse(slurp(p)); }

void expect_usage_error(const std::string& args, const std::string& names, const fs::path& dir) {
  const Result r = attnkit(args, dir);
  INFO(args << " → " << r.err);
  CHECK(r.code == 2);
  CHECK(r.err.find(names) != std::string::npos);
}

void expect_runtime_error(const std::string& args, const std::string& names, const fs::path& dir) {
  const Result r = attnkit(args, dir);
  INFO(args << " → " << r.err);
  CHECK(r.code == 1);
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(names) != std::string::npos);
}

TEST_CASE("train reversal at the lesson's settings: accuracy, files numpy reads, snapshots") {
  const fs::path dir = scratch("reversal");
  const Result r = attnkit("train reversal --out '" + (dir / "run").string() + "'", dir);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("epoch 3/3") != std::string::npos);  // one plain line per epoch (not a tty)
  CHECK(r.out.find("\r") == std::string::npos);
  const fs::path run = dir / "run";
  for (const char* f : {"metrics.json", "attention.npy", "meta.json", "loss.csv", "model.safetensors", "snapshots.npy"})
    CHECK(fs::exists(run / f));
  CHECK_FALSE(fs::exists(run / "rollout.npy"));  // one layer

  const auto metrics = json_file(run / "metrics.json");
  for (const char* key : {"task", "seed", "epochs", "steps", "val_accuracy", "final_loss", "train_seconds",
                          "steps_per_second", "threads", "arena_bytes", "arena_lower_bound_bytes"})
    CHECK(metrics.contains(key));
  CHECK(metrics["steps"] == 3 * 63);  // 2000 / 32 → 63 batches, the last one partial
  CHECK(metrics["val_accuracy"].get<double>() > 0.9);  // chance is 0.1
  CHECK(metrics["arena_bytes"].get<int64_t>() >= metrics["arena_lower_bound_bytes"].get<int64_t>());
  CHECK(metrics["train_chunk_rows"] == 0);  // a lesson model's arena is small: whole batches
  CHECK(metrics["model"]["mlp_hidden"] == 0);  // a LayerNorm + Linear head: no MLP
  CHECK(metrics["val_majority_accuracy"].get<double>() < 0.2);  // ten digits, about equally common
  CHECK(r.out.find("(always answering ") != std::string::npos);

  const auto meta = json_file(run / "meta.json");
  CHECK(meta["tokens"].size() == 8);
  CHECK(meta["labels"][1].get<std::string>() == std::to_string(meta["tokens"][1].get<int>()) + "\u00b71");
  CHECK(meta["snapshot_steps"] == nlohmann::json({0, 10, 20, 30, 60}));
  CHECK(meta["predictions"].size() == 8);

  const std::string out = numpy(R"(
a = np.load(d + '/run/attention.npy'); s = np.load(d + '/run/snapshots.npy')
assert a.dtype == np.float32 and a.shape == (1, 1, 8, 8), (a.dtype, a.shape)
assert s.dtype == np.float32 and s.shape == (5, 1, 1, 8, 8), s.shape
assert np.allclose(a.sum(-1), 1, atol=1e-5) and np.allclose(s.sum(-1), 1, atol=1e-5)
# trained reversal looks at the mirrored position
print(int((a[0, 0].argmax(-1) == np.arange(8)[::-1]).sum()))
)", dir);
  CHECK(std::stoi(out) >= 7);
  const std::string csv = slurp(run / "loss.csv");
  CHECK(csv.rfind("step,loss\n1,", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 3 * 63);
}

TEST_CASE("train --train-chunk: steps in chunks of sequences, the whole batches' losses, a smaller arena") {
  const fs::path dir = scratch("train-chunk");
  nlohmann::json m[2];
  for (int chunk : {0, 5}) {
    const fs::path run = dir / ("run" + std::to_string(chunk));
    const Result r = attnkit("train reversal --epochs 1 --no-pictures --train-chunk " + std::to_string(chunk) +
                                 " --out '" + run.string() + "'",
                             dir);
    REQUIRE(r.code == 0);
    CHECK((r.out.find("steps in chunks of 5 sequences") != std::string::npos) == (chunk == 5));
    m[chunk ? 1 : 0] = json_file(run / "metrics.json");
  }
  CHECK(m[0]["train_chunk_rows"] == 0);
  CHECK(m[1]["train_chunk_rows"] == 5);
  CHECK(m[1]["arena_bytes"].get<int64_t>() < m[0]["arena_bytes"].get<int64_t>());
  // 63 steps of batch 32 as 7 chunks each: the same run up to float rounding in the sums.
  CHECK(m[1]["final_loss"].get<double>() == Approx(m[0]["final_loss"].get<double>()).epsilon(1e-4));
  CHECK(m[1]["val_accuracy"].get<double>() == Approx(m[0]["val_accuracy"].get<double>()).margin(0.01));
  const Result bad = attnkit("train reversal --train-chunk -2", dir);
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--train-chunk") != std::string::npos);
}

TEST_CASE("train two layers: rollout.npy, then eval and infer on the checkpoint") {
  const fs::path dir = scratch("induction");
  const std::string run = (dir / "run").string();
  REQUIRE(attnkit("train induction --epochs 1 --train-size 640 --val-size 50 --d-model 32 --out '" + run + "'", dir).code == 0);
  numpy(R"(
a = np.load(d + '/run/attention.npy'); r = np.load(d + '/run/rollout.npy')
assert a.shape == (2, 1, 16, 16) and r.shape == (16, 16), (a.shape, r.shape)
assert np.allclose(r.sum(-1), 1, atol=1e-5)
assert np.allclose(np.triu(a, 1), 0)   # causal
R = np.eye(16)
for A in a.mean(axis=1):
    A = 0.5 * A + 0.5 * np.eye(16); A = A / A.sum(axis=1, keepdims=True); R = A @ R
assert np.allclose(R, r, atol=1e-5)
)", dir);

  Result e = attnkit("eval --checkpoint '" + run + "' --val-size 30", dir);
  CHECK(e.code == 0);
  CHECK(e.out.find("accuracy") != std::string::npos);
  CHECK(e.out.find("30 fresh sequences") != std::string::npos);

  const std::string out = (dir / "infer").string();
  Result i = attnkit("infer --checkpoint '" + run + "/model.safetensors' --tokens '0 1 2 3 4 5 6 7 8 9 10 11 2 3 4 5' --out '" + out + "'", dir);
  REQUIRE(i.code == 0);
  CHECK(i.out.find("predictions") != std::string::npos);
  const auto meta = json_file(fs::path(out) / "meta.json");
  CHECK(meta["targets"][12] == 3);
  CHECK(meta["targets"][0].is_number());
  numpy("a = np.load(d + '/infer/attention.npy'); assert a.shape == (2, 1, 16, 16); np.load(d + '/infer/rollout.npy')", dir);

  expect_usage_error("infer --checkpoint '" + run + "' --tokens '1 2 3'", "--tokens", dir);
  expect_usage_error("infer --checkpoint '" + run + "' --tokens '0 1 2 3 4 5 6 7 8 9 10 11 2 3 4 99'",
                     "--tokens: token 99 is outside the vocabulary [0, 24)", dir);
  // As written, not as strtol clamps it (9223372036854775807).
  expect_usage_error("infer --checkpoint '" + run + "' --tokens '0 1 2 3 4 5 6 7 8 9 10 11 2 3 4 99999999999999999999'",
                     "--tokens: token 99999999999999999999 is outside", dir);
}

TEST_CASE("resume: 2 epochs + resume to 4 equals 4 epochs, bitwise") {
  const fs::path dir = scratch("resume");
  const std::string common = "train neighbor-sum --train-size 300 --val-size 40 --seed 3 --snapshot-steps 0,4,7 ";
  REQUIRE(attnkit(common + "--epochs 4 --out '" + (dir / "full").string() + "'", dir).code == 0);
  REQUIRE(attnkit(common + "--epochs 2 --out '" + (dir / "half").string() + "'", dir).code == 0);
  const Result r = attnkit("train neighbor-sum --epochs 4 --resume '" + (dir / "half").string() + "' --out '" +
                               (dir / "resumed").string() + "'", dir);
  REQUIRE(r.code == 0);
  for (const char* f : {"model.safetensors", "loss.csv", "attention.npy", "snapshots.npy", "meta.json"}) {
    INFO(f);
    CHECK(slurp(dir / "full" / f) == slurp(dir / "resumed" / f));
  }
  CHECK(json_file(dir / "resumed" / "metrics.json")["steps"] == 4 * 5);
  expect_usage_error("train neighbor-sum --epochs 4 --lr 0.1 --resume '" + (dir / "half").string() + "'", "--lr", dir);
  expect_usage_error("train reversal --resume '" + (dir / "half").string() + "'", "neighbor-sum", dir);
}

TEST_CASE("train --shards: the same run on 1 and 2 threads, kept by resume, close to whole batches") {
  const fs::path dir = scratch("shards");
  const std::string common = "train neighbor-sum --train-size 300 --val-size 40 --seed 3 --no-pictures ";
  for (int threads : {1, 2}) {
    const std::string run = (dir / ("t" + std::to_string(threads))).string();
    const Result r = attnkit(common + "--epochs 4 --shards 2 --threads " + std::to_string(threads) + " --out '" + run + "'", dir);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("steps in 2 shards") != std::string::npos);
  }
  for (const char* f : {"model.safetensors", "loss.csv", "attention.npy"}) {
    INFO(f);
    CHECK(slurp(dir / "t1" / f) == slurp(dir / "t2" / f));  // bitwise: --threads never changes a shard run
  }
  const auto m = json_file(dir / "t2" / "metrics.json");
  CHECK(m["train_shards"] == 2);
  CHECK(m["train_chunk_rows"] == 0);
  // Whole batches: the same run up to the order of the sums.
  REQUIRE(attnkit(common + "--epochs 4 --out '" + (dir / "whole").string() + "'", dir).code == 0);
  const auto w = json_file(dir / "whole" / "metrics.json");
  CHECK(w["train_shards"] == 0);
  CHECK(m["final_loss"].get<double>() == Approx(w["final_loss"].get<double>()).epsilon(1e-3));
  // The checkpoint keeps the shard count: 2 epochs + resume to 4 is the 4-epoch run, bitwise.
  REQUIRE(attnkit(common + "--epochs 2 --shards 2 --out '" + (dir / "half").string() + "'", dir).code == 0);
  const Result r = attnkit("train neighbor-sum --epochs 4 --threads 2 --resume '" + (dir / "half").string() + "' --out '" +
                               (dir / "resumed").string() + "'", dir);
  REQUIRE(r.code == 0);
  CHECK(slurp(dir / "t1" / "model.safetensors") == slurp(dir / "resumed" / "model.safetensors"));
  CHECK(slurp(dir / "t1" / "loss.csv") == slurp(dir / "resumed" / "loss.csv"));
  CHECK(json_file(dir / "resumed" / "metrics.json")["train_shards"] == 2);
  expect_usage_error("train neighbor-sum --epochs 4 --shards 3 --resume '" + (dir / "half").string() + "'", "--shards 3 differs", dir);
  expect_usage_error("train neighbor-sum --shards 65", "--shards", dir);
}

TEST_CASE("resume: losses loss.csv lacks are nan, numbering kept, a bare checkpoint resumes, without snapshots.npy a warning") {
  const fs::path dir = scratch("resume_missing");
  const std::string common = "train neighbor-sum --train-size 300 --val-size 40 --seed 3 --snapshot-steps 0,4,7 --no-pictures ";
  REQUIRE(attnkit(common + "--epochs 4 --out '" + (dir / "full").string() + "'", dir).code == 0);
  REQUIRE(attnkit(common + "--epochs 2 --out '" + (dir / "half").string() + "'", dir).code == 0);
  const std::vector<std::string> full_losses = lines(slurp(dir / "full" / "loss.csv"));
  REQUIRE(full_losses.size() == 21);  // header + 20 steps
  // A copy of the 2-epoch run (step 10) without `name`, or with loss.csv cut to its first 3 steps
  // ("short"), and then a fourth line cut off before its newline: "4," ("cut"), or its number
  // missing its last digit ("cut-number").
  auto copy_without = [&](const std::string& name) {
    const fs::path copy = dir / ("no-" + name);
    fs::copy(dir / "half", copy, fs::copy_options::recursive);
    const std::string three = full_losses[0] + "\n" + full_losses[1] + "\n" + full_losses[2] + "\n" + full_losses[3] + "\n";
    if (name == "short") std::ofstream(copy / "loss.csv") << three;
    else if (name == "cut") std::ofstream(copy / "loss.csv") << three << "4,";
    else if (name == "header") std::ofstream(copy / "loss.csv") << "step,loss";
    else if (name == "crlf") {  // saved by a Windows editor: every line ends in \r\n
      std::ofstream crlf(copy / "loss.csv");
      for (size_t n = 0; n <= 10; ++n) crlf << full_losses[n] << "\r\n";
    }
    else if (name == "cut-number") std::ofstream(copy / "loss.csv") << three << full_losses[4].substr(0, full_losses[4].size() - 1);
    else fs::remove(copy / name);
    return copy;
  };
  auto resume = [&](const fs::path& from) {
    return "train neighbor-sum --epochs 4 --no-pictures --resume '" + from.string() + "' --out '" +
           (dir / ("out-" + from.filename().string())).string() + "'";
  };
  // The unknown steps are nan, every later line is the uninterrupted run's (same numbers).
  auto check_losses = [&](const fs::path& out, size_t unknown_from) {
    const std::vector<std::string> got = lines(slurp(out / "loss.csv"));
    REQUIRE(got.size() == full_losses.size());
    for (size_t n = 0; n < got.size(); ++n) {
      INFO("line " << n + 1);
      if (n >= unknown_from && n <= 10) CHECK(got[n] == std::to_string(n) + ",nan");
      else CHECK(got[n] == full_losses[n]);
    }
  };
  const fs::path no_loss = copy_without("loss.csv");
  const Result a = attnkit(resume(no_loss), dir);
  REQUIRE(a.code == 0);
  CHECK(a.err == "warning: " + (no_loss / "loss.csv").string() +
                     ": missing: the losses of steps 1-10 are written as nan\n");
  check_losses(dir / "out-no-loss.csv", 1);
  const Result b = attnkit(resume(copy_without("short")), dir);
  REQUIRE(b.code == 0);
  CHECK(b.err.find("loss.csv: has 3 of the checkpoint's 10 steps: the losses of steps 4-10 are written as nan") !=
        std::string::npos);
  check_losses(dir / "out-no-short", 4);
  CHECK(slurp(dir / "out-no-short" / "model.safetensors") == slurp(dir / "full" / "model.safetensors"));
  // A last line cut off (no newline: "4," or "4,2.3" of a longer number) is a missing loss, not 0 or 2.3.
  for (const char* cut : {"cut", "cut-number"}) {
    const Result c = attnkit(resume(copy_without(cut)), dir);
    REQUIRE(c.code == 0);
    CHECK(c.err.find("loss.csv: has 3 of the checkpoint's 10 steps: the losses of steps 4-10 are written as nan") !=
          std::string::npos);
    check_losses(dir / ("out-no-" + std::string(cut)), 4);
  }
  // Windows line ends read as the same losses: no warning, the uninterrupted run's loss.csv.
  const Result crlf = attnkit(resume(copy_without("crlf")), dir);
  REQUIRE(crlf.code == 0);
  CHECK(crlf.err.empty());
  CHECK(slurp(dir / "out-no-crlf" / "loss.csv") == slurp(dir / "full" / "loss.csv"));
  // The header alone, even without its newline: no losses (all ten nan), not an error.
  const Result h = attnkit(resume(copy_without("header")), dir);
  REQUIRE(h.code == 0);
  CHECK(h.err.find("loss.csv: has 0 of the checkpoint's 10 steps") != std::string::npos);
  check_losses(dir / "out-no-header", 1);

  // A bare checkpoint (the file alone, as README's "rebuild the model from it alone" allows).
  fs::create_directories(dir / "bare");
  fs::copy_file(dir / "half" / "model.safetensors", dir / "bare" / "model.safetensors");
  const Result c = attnkit("train neighbor-sum --epochs 4 --no-pictures --resume '" +
                               (dir / "bare" / "model.safetensors").string() + "' --out '" + (dir / "from-bare").string() + "'",
                           dir);
  REQUIRE(c.code == 0);
  check_losses(dir / "from-bare", 1);
  CHECK(slurp(dir / "from-bare" / "model.safetensors") == slurp(dir / "full" / "model.safetensors"));

  // attention.npy is drawn anew: the resumed run is the uninterrupted one.
  const Result r = attnkit(resume(copy_without("attention.npy")), dir);
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  for (const char* f : {"model.safetensors", "loss.csv", "attention.npy", "snapshots.npy"}) {
    INFO(f);
    CHECK(slurp(dir / "full" / f) == slurp(dir / "out-no-attention.npy" / f));
  }

  // Snapshots are labelled by step: the run goes on with the losses, and says what is lost.
  const fs::path no_snapshots = copy_without("snapshots.npy");
  const Result w = attnkit(resume(no_snapshots), dir);
  REQUIRE(w.code == 0);
  CHECK(w.err == "warning: " + (no_snapshots / "snapshots.npy").string() +
                     ": missing, so the snapshots of steps 0, 4, 7 (before the checkpoint's step 10) are not "
                     "carried over\n");
  CHECK(slurp(dir / "full" / "loss.csv") == slurp(dir / "out-no-snapshots.npy" / "loss.csv"));
  CHECK_FALSE(fs::exists(dir / "out-no-snapshots.npy" / "snapshots.npy"));
}

TEST_CASE("resume: snapshot steps asked for on an earlier resume but never reached give no warning later") {
  const fs::path dir = scratch("resume_steps");
  const std::string common = "train neighbor-sum --train-size 300 --val-size 40 --seed 3 --no-pictures ";
  const std::string a = (dir / "a").string(), b = (dir / "b").string(), c = (dir / "c").string();
  REQUIRE(attnkit(common + "--epochs 2 --snapshot-steps 1 --out '" + a + "'", dir).code == 0);  // step 10
  // Step 3 lies before the checkpoint's step 10: asked for, never taken.
  const Result r1 = attnkit(common + "--epochs 4 --snapshot-steps 1,3,15 --resume '" + a + "' --out '" + b + "'", dir);
  REQUIRE(r1.code == 0);
  const Result r2 = attnkit(common + "--epochs 5 --resume '" + b + "' --out '" + c + "'", dir);
  REQUIRE(r2.code == 0);
  CHECK(r2.err.empty());
  CHECK(json_file(fs::path(c) / "meta.json")["snapshot_steps"] == nlohmann::json::array({1, 15}));
}

TEST_CASE("eval's default seed (the training seed + 1000) stays a seed --seed accepts, for the largest one too") {
  const fs::path dir = scratch("eval_seed");
  const std::string run = (dir / "run").string();
  REQUIRE(attnkit("train reversal --seed 9223372036854775807 --epochs 1 --train-size 64 --val-size 20 --no-pictures "
                  "--quiet --out '" + run + "'", dir).code == 0);
  const Result fresh = attnkit("eval --checkpoint '" + run + "'", dir);
  REQUIRE(fresh.code == 0);
  CHECK(fresh.out.find("20 fresh sequences (seed 999)") != std::string::npos);  // (2^63 − 1 + 1000) mod 2^63
  const Result again = attnkit("eval --checkpoint '" + run + "' --seed 999", dir);
  REQUIRE(again.code == 0);
  CHECK(again.out == fresh.out);

  // A checkpoint without a validation set (a library model may train without one): eval asks
  // for a size instead of drawing none.
  const std::string bare = (dir / "no_val.safetensors").string();
  attnkit::SafetensorsFile f = attnkit::read_safetensors(run + "/model.safetensors");
  f.metadata["config.val_size"] = "0";
  f.metadata["config.sample"] = "0";
  attnkit::write_safetensors(bare, f.tensors, f.metadata);
  expect_usage_error("eval --checkpoint '" + bare + "'", bare + " records no validation set size: give --val-size N", dir);
  const Result sized = attnkit("eval --checkpoint '" + bare + "' --val-size 20 --seed 999", dir);
  REQUIRE(sized.code == 0);
  CHECK(sized.out.substr(sized.out.find("accuracy")) == fresh.out.substr(fresh.out.find("accuracy")));
}

TEST_CASE("train with data from numpy trains on its arrays, and bad arrays are clear errors") {
  const fs::path dir = scratch("data");
  numpy(R"(
rng = np.random.default_rng(0)
def make(n):
    X = rng.integers(0, 12, (n, 10))
    return X, ((X[:, :, None] == X[:, None, :]).sum(axis=-1) > 1).astype(int)
Xt, Yt = make(3000); Xv, Yv = make(500)
np.savez_compressed(d + '/dup.npz', X_train=Xt, Y_train=Yt, X_val=Xv, Y_val=Yv)
np.savez(d + '/float.npz', X_train=Xt.astype(np.float32), Y_train=Yt, X_val=Xv, Y_val=Yv)
np.savez(d + '/names.npz', X=Xt, Y_train=Yt, X_val=Xv, Y_val=Yv)
Xb = Xv.copy(); Xb[2, 3] = 12
np.savez(d + '/token.npz', X_train=Xt, Y_train=Yt, X_val=Xb, Y_val=Yv)
)", dir);
  const std::string run = (dir / "run").string();
  REQUIRE(attnkit("train duplicates --epochs 3 --data '" + (dir / "dup.npz").string() + "' --out '" + run + "'", dir).code == 0);
  const auto metrics = json_file(fs::path(run) / "metrics.json");
  CHECK(metrics["train_size"] == 3000);
  CHECK(metrics["val_accuracy"].get<double>() > 0.85);
  CHECK(metrics["lr"] == 0.003);  // the float the run used, in its shortest decimal form
  CHECK(metrics["model"]["mlp_hidden"] == 64);
  // The lesson's bar: always answering "repeat" scores the share of repeats in Y_val.
  const std::string share = numpy(R"(
Y = np.load(d + '/dup.npz')['Y_val']; print(int(Y.mean() >= 0.5), repr(max(Y.mean(), 1 - Y.mean())))
)", dir);
  CHECK(metrics["val_majority_class"] == std::stoi(share));
  CHECK(metrics["val_majority_accuracy"].get<double>() == Approx(std::stod(share.substr(2))).epsilon(1e-12));
  Result e = attnkit("eval --checkpoint '" + run + "' --data '" + (dir / "dup.npz").string() + "'", dir);
  CHECK(e.code == 0);
  CHECK(e.out.find(fmt_accuracy(metrics["val_accuracy"].get<double>())) != std::string::npos);
  CHECK(e.out.find("(always answering " + share.substr(0, 1) + ", the most common target, would score " +
                   fmt_accuracy(metrics["val_majority_accuracy"].get<double>()).substr(9)) != std::string::npos);

  expect_runtime_error("train duplicates --data '" + (dir / "float.npz").string() + "'", "'X_train' has dtype <f4", dir);
  expect_runtime_error("train duplicates --data '" + (dir / "names.npz").string() + "'", "no array 'X_train'", dir);
  expect_runtime_error("train duplicates --data '" + (dir / "token.npz").string() + "'", "token 12 at [2, 3]", dir);
  expect_runtime_error("train reversal --data '" + (dir / "dup.npz").string() + "'", "length 10", dir);
}

TEST_CASE("resume: --data may name a copy of the checkpoint's arrays, other arrays are an error naming the file") {
  const fs::path dir = scratch("resume_data");
  numpy(R"(
def save(name, seed):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 12, (260, 10))
    Y = ((X[:, :, None] == X[:, None, :]).sum(axis=-1) > 1).astype(int)
    np.savez(d + '/' + name, X_train=X[:200], Y_train=Y[:200], X_val=X[200:], Y_val=Y[200:])
save('a.npz', 0); save('b.npz', 1); save('a_again.npz', 0)
)", dir);
  const std::string a = (dir / "a.npz").string(), b = (dir / "b.npz").string(), run = (dir / "run").string();
  REQUIRE(attnkit("train duplicates --epochs 1 --no-pictures --data '" + a + "' --out '" + run + "'", dir).code == 0);
  const std::string resume = "train duplicates --epochs 2 --no-pictures --resume '" + run + "' ";
  expect_runtime_error(resume + "--data '" + b + "' --out '" + (dir / "other").string() + "'", b + " holds other data", dir);
  CHECK_FALSE(fs::exists(dir / "other"));
  CHECK(attnkit(resume + "--data '" + (dir / "." / "a.npz").string() + "' --out '" + (dir / "same").string() + "'", dir)
            .code == 0);
  // A copy elsewhere (a moved data file) holds the same arrays: it resumes, to the same result.
  CHECK(attnkit(resume + "--data '" + (dir / "a_again.npz").string() + "' --out '" + (dir / "copy").string() + "'", dir)
            .code == 0);
  CHECK(json_file(dir / "copy" / "metrics.json")["final_loss"] == json_file(dir / "same" / "metrics.json")["final_loss"]);
  {  // A checkpoint from before the fingerprint: another file is taken unchecked, with a warning.
    const fs::path old_run = dir / "old_run";
    fs::copy(run, old_run);
    attnkit::SafetensorsFile f = attnkit::read_safetensors((old_run / "model.safetensors").string());
    REQUIRE(f.metadata.erase("config.data_fnv1a") == 1);
    attnkit::write_safetensors((old_run / "model.safetensors").string(), f.tensors, f.metadata);
    const Result r = attnkit("train duplicates --epochs 2 --no-pictures --resume '" + old_run.string() + "' --data '" +
                                 (dir / "a_again.npz").string() + "' --out '" + (dir / "from-old").string() + "'",
                             dir);
    REQUIRE(r.code == 0);
    CHECK(r.err.find("has no fingerprint of its data (an older checkpoint): --data " + (dir / "a_again.npz").string() +
                     " is used unchecked") != std::string::npos);
    CHECK(json_file(dir / "from-old" / "metrics.json")["final_loss"] ==
          json_file(dir / "same" / "metrics.json")["final_loss"]);
  }
  // Another file with the same arrays in place of a.npz resumes; other arrays are refused.
  fs::copy_file(dir / "a_again.npz", dir / "a.npz", fs::copy_options::overwrite_existing);
  CHECK(attnkit(resume + "--out '" + (dir / "again").string() + "'", dir).code == 0);
  fs::copy_file(dir / "b.npz", dir / "a.npz", fs::copy_options::overwrite_existing);
  expect_runtime_error(resume + "--out '" + (dir / "changed").string() + "'", a + " holds other data", dir);
  CHECK_FALSE(fs::exists(dir / "changed"));
  CHECK(json_file(fs::path(run) / "metrics.json")["epochs"] == 1);  // nothing rewritten

  // A checkpoint that names its data by a relative path, resumed from another folder: the error
  // says where the path came from and what to give.
  fs::create_directories(dir / "elsewhere");
  const std::string cli = std::string("'") + ATTNKIT_CLI + "' ";
  REQUIRE(sh("cd '" + dir.string() + "' && " + cli + "train duplicates --epochs 1 --no-pictures --data a_again.npz --out rel",
             dir).code == 0);
  const Result rel = sh("cd '" + (dir / "elsewhere").string() + "' && " + cli + "train duplicates --epochs 2 " +
                            "--no-pictures --resume ../rel --out ../rel2", dir);
  CHECK(rel.code == 1);
  CHECK(rel.err.find("trained on --data a_again.npz (the path as given then)") != std::string::npos);
  CHECK(rel.err.find("give --data PATH") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "rel2"));
  CHECK(sh("cd '" + (dir / "elsewhere").string() + "' && " + cli + "train duplicates --epochs 2 --no-pictures " +
               "--resume ../rel --data ../a_again.npz --out ../rel2", dir).code == 0);
}

TEST_CASE("run folders: infer keeps out of a trained model's folder, render out of another run's, "
          "unreached snapshot steps and data without targets are said") {
  const fs::path dir = scratch("guards");
  const std::string run = (dir / "run").string(), other = (dir / "other").string();
  const std::string common = "train neighbor-sum --epochs 1 --train-size 300 --val-size 40 --no-pictures ";
  const Result t = attnkit(common + "--snapshot-steps 0,3,10000 --out '" + run + "'", dir);
  REQUIRE(t.code == 0);
  CHECK(t.err.find("warning: snapshot step 10000 comes after the run's last step (5): no snapshot of it") !=
        std::string::npos);
  CHECK(json_file(fs::path(run) / "meta.json")["snapshot_steps"] == nlohmann::json({0, 3}));
  REQUIRE(attnkit(common + "--seed 4 --out '" + other + "'", dir).code == 0);
  const std::string model = slurp(fs::path(run) / "model.safetensors");
  const std::string tokens = " --tokens '1 2 3 4 5 6 7 8 9 0' ";
  // infer --out replaces its folder as a whole: never a folder with a trained model.
  for (const std::string& out : {run, other}) {
    expect_usage_error("infer --checkpoint '" + run + "'" + tokens + "--out '" + out + "'", "holds a trained model", dir);
    CHECK(fs::exists(fs::path(out) / "model.safetensors"));
  }
  CHECK(slurp(fs::path(run) / "model.safetensors") == model);
  // --no-pictures: the files without the pictures.
  const Result np = attnkit("infer --checkpoint '" + run + "'" + tokens + "--no-pictures --out '" + (dir / "inf").string() + "'", dir);
  REQUIRE(np.code == 0);
  CHECK(fs::exists(dir / "inf" / "attention.npy"));
  CHECK_FALSE(fs::exists(dir / "inf" / "attention.png"));
  CHECK_FALSE(fs::exists(dir / "inf" / "report.html"));
  // render RUN --out: RUN itself or a new folder, never another run's (two runs' files mixed).
  expect_usage_error("render '" + other + "' --out '" + run + "'", "is another run's folder (it holds model.safetensors)", dir);
  CHECK_FALSE(fs::exists(fs::path(run) / "attention.png"));
  CHECK(attnkit("render '" + other + "' --out '" + other + "'", dir).code == 0);
  CHECK(attnkit("render '" + other + "' --out '" + (dir / "pictures").string() + "'", dir).code == 0);
  CHECK(fs::exists(dir / "pictures" / "attention.png"));
  // Data whose targets are all -1: no accuracy, not an accuracy of 0.
  numpy("X = np.tile(np.arange(10), (4, 1)); np.savez(d + '/none.npz', X_val=X, Y_val=-np.ones_like(X))", dir);
  const Result e = attnkit("eval --checkpoint '" + run + "' --data '" + (dir / "none.npz").string() + "'", dir);
  CHECK(e.code == 0);
  CHECK(e.out.find("no accuracy: none of the 40 positions has a target") != std::string::npos);
  const Result i = attnkit("infer --checkpoint '" + run + "' --data '" + (dir / "none.npz").string() + "' --out '" +
                               (dir / "none").string() + "'", dir);
  CHECK(i.code == 0);
  CHECK(i.out.find("no accuracy: no position has a target") != std::string::npos);
  CHECK(json_file(dir / "none" / "metrics.json")["accuracy"].is_null());
  CHECK(json_file(dir / "none" / "metrics.json")["positions"] == 0);
}

TEST_CASE("usage errors exit 2 naming the flag, missing files exit 1 with one error line") {
  const fs::path dir = scratch("errors");
  expect_usage_error("train no-such-task", "no-such-task", dir);
  expect_usage_error("train reversal --epochs abc", "--epochs", dir);
  expect_usage_error("train reversal --bogus 1", "--bogus", dir);
  expect_usage_error("train reversal --heads 3", "--heads", dir);
  expect_usage_error("train reversal --batch-size 0", "--batch-size", dir);
  expect_usage_error("train reversal --snapshot-steps 1,x", "--snapshot-steps", dir);
  expect_usage_error("train reversal --val-size 5 --sample 9", "--sample", dir);
  expect_usage_error("eval", "--checkpoint", dir);
  expect_usage_error("demo nope", "nope", dir);
  expect_usage_error("", "no subcommand given; choose one of: train, eval", dir);
  expect_usage_error("trian reversal", "unknown subcommand 'trian'; choose one of: train", dir);
  expect_runtime_error("eval --checkpoint '" + (dir / "missing.safetensors").string() + "'", "missing.safetensors", dir);
  expect_runtime_error("train reversal --data '" + (dir / "missing.npz").string() + "'", "missing.npz", dir);
  expect_runtime_error("rollout '" + (dir / "missing.npy").string() + "' --out x.npy", "missing.npy", dir);
  CHECK(attnkit("--help", dir).code == 0);
}

TEST_CASE("sizes beyond memory, data without answers, and .npy outputs named .png are refused, naming them") {
  const fs::path dir = scratch("refused");
  // 10^8 sequences of 4096 tokens: 3.3 TB, refused before anything is allocated.
  expect_usage_error("train neighbor-sum --seq-len 4096 --train-size 100000000 --no-pictures --out '" +
                         (dir / "huge").string() + "'",
                     "--train-size 100000000 and --val-size 500: 100000500 sequences of T = 4096 take", dir);
  CHECK_FALSE(fs::exists(dir / "huge"));
  // A model whose buffers exceed the machine's memory: refused before they are allocated (each
  // allocation alone could succeed under overcommit and the zeroing then meet the OOM killer).
  expect_runtime_error("train reversal --layers 64 --d-model 65536 --no-pictures --out '" + (dir / "big").string() + "'",
                       "cannot allocate the model (batch 32, T = 8, d_model = 65536, heads = 1, layers = 64, vocab = 10): "
                       "the graph needs", dir);
  CHECK_FALSE(fs::exists(dir / "big"));

  numpy(R"(
X = np.random.default_rng(0).integers(0, 12, (50, 10)); Y = np.zeros((50, 10), int)
np.savez(d + '/no_train.npz', X_train=X, Y_train=Y - 1, X_val=X, Y_val=Y)
np.savez(d + '/no_val.npz', X_train=X, Y_train=Y, X_val=X, Y_val=Y - 1)
np.save(d + '/maps.npy', np.full((1, 1, 4, 4), 0.25))
)", dir);
  expect_runtime_error("train duplicates --data '" + (dir / "no_train.npz").string() + "'",
                       "no_train.npz: 'Y_train' has no target to learn or score: all 500 are -1", dir);
  expect_runtime_error("train duplicates --data '" + (dir / "no_val.npz").string() + "'",
                       "no_val.npz: 'Y_val' has no target to learn or score", dir);

  const std::string png = (dir / "r.png").string();
  expect_usage_error("rollout '" + (dir / "maps.npy").string() + "' --out '" + png + "'",
                     "--out: '" + png + "' does not end in .npy", dir);
  expect_usage_error("demo alignment --out '" + png + "'", "--out: '" + png + "' does not end in .npy", dir);
  CHECK_FALSE(fs::exists(png));
}

TEST_CASE("T over 512: links.png and report.html are left out with one warning line, the other pictures drawn") {
  const fs::path dir = scratch("long_t");
  const fs::path run = dir / "run";
  const Result r = attnkit("train reversal --seq-len 600 --vocab 16 --d-model 8 --epochs 1 --train-size 4 --val-size 1 "
                           "--batch-size 4 --snapshot-steps 0,1 --quiet --out '" + run.string() + "'", dir);
  CHECK(r.code == 0);
  CHECK(r.err == "warning: T = 600: links.png not drawn (link diagrams show at most 512 tokens a side); report.html "
                 "not written (a report shows at most 512 tokens a side)\n");
  for (const char* f : {"attention.png", "loss.png", "snapshots.png", "model.safetensors"}) CHECK(fs::exists(run / f));
  CHECK_FALSE(fs::exists(run / "links.png"));
  CHECK_FALSE(fs::exists(run / "report.html"));
  CHECK(json_file(run / "metrics.json")["pictures_written"] == true);
  // render draws the folder again the same way.
  const Result again = attnkit("render '" + run.string() + "'", dir);
  CHECK(again.code == 0);
  CHECK(again.err == r.err);
}

TEST_CASE("version names the SIMD target and ATTNKIT_SIMD_TARGET forces a lower one or is a usage error") {
  const fs::path dir = scratch("version");
  const Result best = attnkit("--version", dir);
  REQUIRE(best.code == 0);
  CHECK(best.out.find("attnkit 0.") == 0);
  CHECK(best.out.find("SIMD target: ") != std::string::npos);
  CHECK(best.out.find("compiled in: ") != std::string::npos);
  // The second target this CPU supports (a lower one), written in lower case.
  const std::string key = "supported by this CPU: ";
  const size_t at = best.out.find(key);
  REQUIRE(at != std::string::npos);
  std::istringstream supported(best.out.substr(at + key.size(), best.out.find('\n', at) - at - key.size()));
  std::vector<std::string> names{std::istream_iterator<std::string>(supported), std::istream_iterator<std::string>()};
  REQUIRE(names.size() >= 2);
  std::string lower = names[1];
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const Result forced = sh("ATTNKIT_SIMD_TARGET=" + lower + " '" + ATTNKIT_CLI + "' --version", dir);
  REQUIRE(forced.code == 0);
  CHECK(forced.out.find("SIMD target: " + names[1] + " (ATTNKIT_SIMD_TARGET)") != std::string::npos);
  // A run on the forced target trains and reports like any other.
  const Result run = sh("ATTNKIT_SIMD_TARGET=" + names[1] + " '" + ATTNKIT_CLI + "' train reversal --epochs 1 --no-pictures --quiet --out '" +
                            (dir / "run").string() + "'", dir);
  CHECK(run.code == 0);
  const Result bad = sh(std::string("ATTNKIT_SIMD_TARGET=avx9 '") + ATTNKIT_CLI + "' --version", dir);
  CHECK(bad.code == 2);
  CHECK(bad.err.find("ATTNKIT_SIMD_TARGET=avx9: unknown SIMD target 'avx9' (compiled in: ") != std::string::npos);
  CHECK(forced.out.find("(unused: the target is not AVX-512)") != std::string::npos);  // a lower target
  // The AVX-512 kernel choices (ATTNKIT_SMALL_GEMM, ATTNKIT_AVX512_WIDTH, ATTNKIT_TEN_COLUMNS):
  // each has its line with this CPU's default, is forced either way in any case, and a bad
  // value is a usage error naming the variable and the choices.
  const std::vector<attnkit::KernelChoice>& choices = attnkit::avx512_kernel_choices();
  CHECK(choices.size() == 3);
  for (const attnkit::KernelChoice& choice : choices) {
    INFO(choice.variable);
    REQUIRE(choice.names.size() == 2);
    const std::string line = std::string(choice.label) + ": ";
    CHECK((best.out.find(line + choice.names[0]) != std::string::npos ||
           best.out.find(line + choice.names[1]) != std::string::npos));
    for (size_t i = 0; i < choice.names.size(); ++i) {
      std::string value = choice.names[i];
      if (i == 0) value[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(value[0])));
      const Result set = sh(std::string(choice.variable) + "=" + value + " '" + ATTNKIT_CLI + "' --version", dir);
      CHECK(set.code == 0);
      CHECK(set.out.find(line + choice.names[i] + " (" + choice.variable + ")") != std::string::npos);
    }
    const Result bad_choice = sh(std::string(choice.variable) + "=sideways '" + ATTNKIT_CLI + "' --version", dir);
    CHECK(bad_choice.code == 2);
    CHECK(bad_choice.err.find(std::string(choice.variable) + "=sideways: unknown " + choice.what + " 'sideways' (choices: " +
                              choice.names[0] + ", " + choice.names[1] + ", best)") != std::string::npos);
  }
  // The wording users see, spelled out once.
  const Result bad_layout = sh(std::string("ATTNKIT_TEN_COLUMNS=pairs '") + ATTNKIT_CLI + "' --version", dir);
  CHECK(bad_layout.code == 2);
  CHECK(bad_layout.err.find("ATTNKIT_TEN_COLUMNS=pairs: unknown layout of the 9/10-column products 'pairs' "
                            "(choices: wide, quads, best)") != std::string::npos);
  CHECK(best.out.find("\nproducts of 9 or 10 columns (AVX-512): ") != std::string::npos);
  CHECK(best.out.find("\nsmall products' A values (AVX-512): ") != std::string::npos);
  CHECK(best.out.find("\nAVX-512 core width (products shaped for it): ") != std::string::npos);
}

TEST_CASE("train --precision bf16: metrics name the precision and kernel, a checkpoint resumes in f32, bad names are usage errors") {
  const fs::path dir = scratch("precision");
  const Result version = attnkit("--version", dir);
  REQUIRE(version.code == 0);
  CHECK(version.out.find("bf16 products (--precision bf16): ") != std::string::npos);
  const bool have_bf16 = version.out.find("bf16 products (--precision bf16): none") == std::string::npos;
  const std::string run = (dir / "run").string();
  const Result r = attnkit("train reversal --epochs 1 --precision bf16 --no-pictures --out '" + run + "'", dir);
  REQUIRE(r.code == 0);
  CHECK(r.out.find(have_bf16 ? "precision: bf16 products on " : "precision: this CPU has no bf16 kernel") !=
        std::string::npos);
  const auto metrics = json_file(fs::path(run) / "metrics.json");
  CHECK(metrics["precision"] == "bf16");
  if (have_bf16) {
    CHECK(metrics["bf16_kernel"] != "none");
    CHECK(metrics["val_accuracy"].get<double>() > 0.5);  // chance is 0.1
  }
  // The checkpoint is float32: it resumes without --precision.
  const Result resumed = attnkit("train reversal --epochs 2 --no-pictures --quiet --resume '" + run + "'", dir);
  CHECK(resumed.code == 0);
  const auto after = json_file(fs::path(run) / "metrics.json");
  CHECK(after["precision"] == "f32");
  CHECK(after["bf16_kernel"].is_null());
  CHECK(after["steps"] == 2 * metrics["steps"].get<int64_t>());
  // eval and infer take the precision too.
  const Result eval = attnkit("eval --checkpoint '" + run + "' --precision bf16", dir);
  CHECK(eval.code == 0);
  CHECK(eval.out.find("accuracy") != std::string::npos);
  const Result infer = attnkit("infer --checkpoint '" + run + "' --tokens '1 2 3 4 5 6 7 8' --precision bf16", dir);
  CHECK(infer.code == 0);
  expect_usage_error("train reversal --precision fp8", "--precision", dir);
  expect_usage_error("eval --checkpoint '" + run + "' --precision half", "--precision", dir);
  const Result bad = sh(std::string("ATTNKIT_BF16=tpu '") + ATTNKIT_CLI + "' --version", dir);
  CHECK(bad.code == 2);
  CHECK(bad.err.find("ATTNKIT_BF16=tpu: unknown bf16 kernel 'tpu' (choices: amx, avx512_bf16, none") !=
        std::string::npos);
  const Result none = sh(std::string("ATTNKIT_BF16=none '") + ATTNKIT_CLI + "' --version", dir);
  CHECK(none.code == 0);
  CHECK(none.out.find("bf16 products (--precision bf16): none (ATTNKIT_BF16)") != std::string::npos);
  // The bf16 kernels are AVX-512 code: asking for one under a SIMD target forced below AVX3 is a
  // contradiction, said as such (on a CPU with AVX512-BF16).
  if (none.out.find("this CPU has: AVX512-BF16") != std::string::npos ||
      none.out.find("this CPU has: AMX-BF16, AVX512-BF16") != std::string::npos) {
    const Result forced =
        sh(std::string("ATTNKIT_SIMD_TARGET=AVX2 ATTNKIT_BF16=avx512_bf16 '") + ATTNKIT_CLI + "' --version", dir);
    CHECK(forced.code == 2);
    CHECK(forced.err.find("ATTNKIT_BF16=avx512_bf16: bf16 kernel AVX512-BF16 needs AVX-512, but the SIMD target in "
                          "use is AVX2") != std::string::npos);
    const Result below = sh(std::string("ATTNKIT_SIMD_TARGET=AVX2 '") + ATTNKIT_CLI + "' --version", dir);
    CHECK(below.code == 0);
    CHECK(below.out.find("bf16 products (--precision bf16): none (the target is not AVX-512)") != std::string::npos);
    // "best" under such a target is the best there is: none (it once switched AVX-512 code back on).
    const Result best = sh(std::string("ATTNKIT_SIMD_TARGET=AVX2 ATTNKIT_BF16=best '") + ATTNKIT_CLI + "' --version", dir);
    CHECK(best.code == 0);
    CHECK(best.out.find("bf16 products (--precision bf16): none (ATTNKIT_BF16) (the target is not AVX-512)") !=
          std::string::npos);
    const std::string below_run = (dir / "bf16_below_avx3").string();
    const Result trained = sh(std::string("ATTNKIT_SIMD_TARGET=AVX2 ATTNKIT_BF16=best '") + ATTNKIT_CLI +
                                  "' train reversal --epochs 1 --precision bf16 --no-pictures --quiet --out '" + below_run + "'",
                              dir);
    REQUIRE(trained.code == 0);
    CHECK(json_file(fs::path(below_run) / "metrics.json")["bf16_kernel"] == "none");
  }
}

TEST_CASE("rollout of a numpy-written [layers, heads, T, T] array equals the lesson's rollout") {
  const fs::path dir = scratch("rollout");
  numpy(R"(
rng = np.random.default_rng(1)
a = rng.random((3, 2, 5, 5)); a /= a.sum(-1, keepdims=True)
np.save(d + '/maps.npy', a)
np.save(d + '/flat.npy', a[0])
)", dir);
  REQUIRE(attnkit("rollout '" + (dir / "maps.npy").string() + "' --out '" + (dir / "r.npy").string() + "'", dir).code == 0);
  numpy(R"(
a = np.load(d + '/maps.npy'); r = np.load(d + '/r.npy')
R = np.eye(5)
for A in a.mean(axis=1):
    A = 0.5 * A + 0.5 * np.eye(5); A = A / A.sum(axis=1, keepdims=True); R = A @ R
assert r.dtype == np.float32 and np.allclose(R, r, atol=1e-6) and np.allclose(r.sum(-1), 1, atol=1e-6)
)", dir);
  expect_runtime_error("rollout '" + (dir / "flat.npy").string() + "' --out x.npy", "[layers, heads, T, T]", dir);
}

TEST_CASE("demos print lesson 000's numbers") {
  const fs::path dir = scratch("demo");
  const Result lookup = attnkit("demo lookup", dir);
  REQUIRE(lookup.code == 0);
  CHECK(lookup.out.find("запрос про еду           : оценки [3.  2.7 0.  0.3], веса [0.54 0.4  0.03 0.04]") !=
        std::string::npos);
  CHECK(lookup.out.find("запрос непонятно про что : оценки [1.5 1.8 1.5 1.5], веса [0.23 0.31 0.23 0.23]") !=
        std::string::npos);
  const Result scaling = attnkit("demo scaling", dir);
  REQUIRE(scaling.code == 0);
  CHECK(std::count(scaling.out.begin(), scaling.out.end(), '\n') == 7);
  const Result masks = attnkit("demo masks", dir);
  REQUIRE(masks.code == 0);
  CHECK(masks.out.find(" [[1.   0.   0.   0.  ]") != std::string::npos);  // causal: the first row sees only itself
  const Result align = attnkit("demo alignment --out '" + (dir / "w.npy").string() + "'", dir);
  REQUIRE(align.code == 0);
  CHECK(align.out.find("сидела") != std::string::npos);
  numpy("w = np.load(d + '/w.npy'); assert w.shape == (5, 7) and abs(w[2, 3] - 0.88) < 1e-6", dir);
}

TEST_CASE("demo attention and demo masks on the lesson's own numpy arrays print the lesson's numbers") {
  const fs::path dir = scratch("demo_arrays");
  // The lesson's code (float64 arrays, numpy's generator), its printout kept for comparison.
  const std::string expected = numpy(R"(
rng = np.random.default_rng(0)
Q, K, V = rng.normal(size=(3, 8)), rng.normal(size=(5, 8)), rng.normal(size=(5, 4))
for name, x in (('Q', Q), ('K', K), ('V', V)): np.save(d + '/' + name + '.npy', x)
def attend(Q, K, V, mask=None):
    s = Q @ K.T / np.sqrt(K.shape[1])
    if mask is not None: s = np.where(mask, -1e9, s)
    w = np.exp(s - s.max(axis=1, keepdims=True)); w /= w.sum(axis=1, keepdims=True)
    return w @ V, w
out, w = attend(Q, K, V)
print("веса:", w.shape, "\n", w.round(2))
print("суммы строк:", w.sum(axis=1).round(6))
print("выход:", out.shape, "\n", out.round(2))
rng = np.random.default_rng(1)
Q4, K4 = rng.normal(size=(4, 8)), rng.normal(size=(4, 8))
np.save(d + '/Q4.npy', Q4); np.save(d + '/K4.npy', K4)
np.save(d + '/pad.npy', np.array([False, False, False, True]))
np.save(d + '/causal.npy', np.triu(np.ones((4, 4), bool), k=1))
_, w = attend(Q4, K4, np.eye(4), np.tile(np.array([False, False, False, True]), (4, 1)))
print("маска паддинга:\n", w.round(2))
_, w = attend(Q4, K4, np.eye(4), np.triu(np.ones((4, 4), bool), k=1))
print("причинная маска (нельзя смотреть вперёд):\n", w.round(2))
)", dir);
  const size_t split = expected.find("маска паддинга");
  const auto f = [&](const std::string& name) { return "'" + (dir / name).string() + "'"; };
  REQUIRE(split != std::string::npos);
  const std::string files = "--q " + f("Q.npy") + " --k " + f("K.npy") + " --v " + f("V.npy");
  const Result attention = attnkit("demo attention " + files + " --out " + f("w.npy"), dir);
  REQUIRE(attention.code == 0);
  CHECK(attention.out.find(expected.substr(0, split)) == 0);  // no "random" note: the user's arrays
  numpy(R"(
Q, K = np.load(d + '/Q.npy'), np.load(d + '/K.npy')
s = Q @ K.T / np.sqrt(8); w = np.exp(s - s.max(axis=1, keepdims=True)); w /= w.sum(axis=1, keepdims=True)
r = np.load(d + '/w.npy')
assert r.dtype == np.float32 and r.shape == (3, 5) and np.allclose(r, w, atol=1e-6), r
)", dir);
  const Result masks = attnkit("demo masks --q " + f("Q4.npy") + " --k " + f("K4.npy"), dir);
  REQUIRE(masks.code == 0);
  CHECK(masks.out == expected.substr(split));
  // The same masks as demo attention's --mask (one row, or [m, n]) and --causal.
  const std::string eye = (numpy("np.save(d + '/I.npy', np.eye(4, dtype=np.float32))", dir), "--v " + f("I.npy"));
  const std::string padded = expected.substr(split, expected.find("причинная") - split);
  const Result pad = attnkit("demo attention --q " + f("Q4.npy") + " --k " + f("K4.npy") + " " + eye + " --mask " + f("pad.npy"), dir);
  REQUIRE(pad.code == 0);
  CHECK(pad.out.find(padded.substr(padded.find('\n') + 1)) != std::string::npos);
  const Result causal = attnkit("demo attention --q " + f("Q4.npy") + " --k " + f("K4.npy") + " " + eye + " --causal", dir);
  const Result causal_mask = attnkit("demo attention --q " + f("Q4.npy") + " --k " + f("K4.npy") + " " + eye + " --mask " + f("causal.npy"), dir);
  REQUIRE(causal.code == 0);
  CHECK(causal.out == causal_mask.out);
  const std::string causal_rows = expected.substr(expected.find("причинная"));
  CHECK(causal.out.find(causal_rows.substr(causal_rows.find('\n') + 1)) != std::string::npos);

  // Without arrays: the lesson's sizes, random, and said so.
  const Result random = attnkit("demo attention", dir);
  REQUIRE(random.code == 0);
  CHECK(random.out.find("random Q, K, V") != std::string::npos);
  CHECK(random.out.find("веса: (3, 5)") != std::string::npos);
  CHECK(random.out.find("суммы строк: [1. 1. 1.]") != std::string::npos);
  CHECK(random.out.find("выход: (3, 4)") != std::string::npos);

  // Bad arrays and flags: named, nothing written.
  expect_usage_error("demo attention --q " + f("Q.npy") + " --k " + f("K.npy"), "give --q, --k and --v together", dir);
  expect_runtime_error("demo attention --q " + f("Q.npy") + " --k " + f("Q4.npy") + " --v " + f("V.npy"), "V.npy has 5 rows, --k ", dir);
  expect_runtime_error("demo attention " + files + " --mask " + f("pad.npy"), "pad.npy: expected shape (3, 5)", dir);
  numpy("np.save(d + '/fmask.npy', np.zeros((3, 5)))", dir);
  expect_runtime_error("demo attention " + files + " --mask " + f("fmask.npy"), "expected booleans or integers", dir);
  numpy("np.save(d + '/flat.npy', np.zeros(8))", dir);
  expect_runtime_error("demo attention --q " + f("flat.npy") + " --k " + f("K.npy") + " --v " + f("V.npy"), "flat.npy: expected a 2-d array", dir);
  numpy("q = np.load(d + '/Q.npy'); q[1, 2] = np.nan; np.save(d + '/nanq.npy', q)", dir);
  expect_runtime_error("demo attention --q " + f("nanq.npy") + " --k " + f("K.npy") + " --v " + f("V.npy"),
                       "nanq.npy: value nan at [1, 2] is not a finite float32", dir);
  // One query: 2-d arrays, as numpy prints them.
  numpy("np.save(d + '/q1.npy', np.load(d + '/Q.npy')[:1])", dir);
  const Result one = attnkit("demo attention --q " + f("q1.npy") + " --k " + f("K.npy") + " --v " + f("V.npy"), dir);
  REQUIRE(one.code == 0);
  CHECK(one.out.find("веса: (1, 5) \n [[0.06 0.28 0.44 0.08 0.14]]\n") != std::string::npos);
  CHECK(one.out.find("суммы строк: [1.]\n") != std::string::npos);
  expect_runtime_error("demo masks --q " + f("Q.npy") + " --k " + f("K4.npy"), "self-attention needs the same shape", dir);
  expect_usage_error("demo masks --q " + f("Q4.npy"), "give --q and --k together", dir);
  expect_usage_error("demo lookup --causal", "only for 'demo attention'", dir);
  expect_usage_error("demo masks --out " + f("m.npy"), "--out is only for", dir);
  CHECK_FALSE(fs::exists(dir / "m.npy"));
}

TEST_CASE("a huge lr stops with one error line naming the step and tensor, earlier run files unchanged") {
  const fs::path dir = scratch("numeric");
  const std::string run = (dir / "run").string();
  REQUIRE(attnkit("train neighbor-sum --epochs 1 --train-size 200 --no-pictures --out '" + run + "'", dir).code == 0);
  const std::string ckpt = slurp(dir / "run" / "model.safetensors"), metrics = slurp(dir / "run" / "metrics.json");
  const std::string csv = slurp(dir / "run" / "loss.csv");
  const Result r = attnkit("train neighbor-sum --lr 1e9 --epochs 3 --train-size 200 --no-pictures --out '" + run + "'", dir);
  INFO(r.err);
  CHECK(r.code == 1);
  CHECK(r.err.rfind("error: step ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK((r.err.find("NaN") != std::string::npos || r.err.find("Inf") != std::string::npos));
  CHECK(r.err.find("'") != std::string::npos);  // a tensor is named in quotes
  CHECK(slurp(dir / "run" / "model.safetensors") == ckpt);
  CHECK(slurp(dir / "run" / "metrics.json") == metrics);
  CHECK(slurp(dir / "run" / "loss.csv") == csv);
  // The kept checkpoint still resumes.
  CHECK(attnkit("train neighbor-sum --epochs 2 --no-pictures --resume '" + run + "'", dir).code == 0);
  // Where the layer norm keeps the head's inputs bounded, lr 1e9 trains to the end, to a useless
  // model: all 63 steps, a finite loss near 6e18, validation accuracy at chance (0.1) — on AVX3
  // and AVX2. The attention before the layer norm is not bounded: under ATTNKIT_SIMD_TARGET=SSE4
  // its sums, in another order, overflowed at step 2, and the run stopped as above. Either way a
  // whole run or the one-line error with nothing written, never a crash.
  const fs::path rev_dir = dir / "rev";
  const Result rev = attnkit("train reversal --lr 1e9 --epochs 1 --no-pictures --out '" + rev_dir.string() + "'", dir);
  INFO(rev.err);
  if (rev.code != 0) {
    CHECK(rev.code == 1);
    CHECK(rev.err.rfind("error: step ", 0) == 0);
    CHECK(std::count(rev.err.begin(), rev.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(rev_dir / "metrics.json"));
    CHECK_FALSE(fs::exists(rev_dir / "model.safetensors"));
    return;
  }
  CHECK(rev.err.empty());
  const auto rev_metrics = json_file(rev_dir / "metrics.json");
  CHECK(rev_metrics["steps"] == 63);
  const double rev_loss = rev_metrics["final_loss"].get<double>();
  CHECK(std::isfinite(rev_loss));
  CHECK(rev_loss > 1e15);
  CHECK(rev_metrics["val_accuracy"].get<double>() < 0.2);
}

TEST_CASE("eight threads on a 2-core machine train to the same loss as one thread") {
  const fs::path dir = scratch("threads");
  std::string losses[2];
  int i = 0;
  for (const char* threads : {"1", "8"}) {
    const std::string run = (dir / threads).string();
    REQUIRE(attnkit(std::string("train neighbor-sum --epochs 1 --train-size 640 --no-pictures --threads ") + threads +
                        " --out '" + run + "'", dir)
                .code == 0);
    losses[i++] = slurp(fs::path(run) / "loss.csv");
  }
  CHECK(losses[0].size() > 20);
  CHECK(losses[0] == losses[1]);
}

TEST_CASE("train --profile writes the per-node times of the training steps and changes no result") {
  const fs::path dir = scratch("profile");
  std::string losses[2];
  for (int profile = 0; profile < 2; ++profile) {
    const std::string run = (dir / std::to_string(profile)).string();
    const Result r = attnkit("train neighbor-sum --epochs 1 --train-size 640 --no-pictures --out '" + run + "'" +
                                 (profile ? " --profile" : ""), dir);
    REQUIRE(r.code == 0);
    losses[profile] = slurp(fs::path(run) / "loss.csv");
    CHECK(fs::exists(fs::path(run) / "profile.txt") == (profile == 1));
    CHECK((r.out.find("profile: 9 runs") != std::string::npos) == (profile == 1));
  }
  CHECK(losses[0] == losses[1]);
  // 10 steps, the first (warm-up) not timed; every node and the optimizer, one per line.
  const std::string text = slurp(dir / "1" / "profile.txt");
  CHECK(text.find("(neighbor-sum, batch 64, 1 thread(s), ") != std::string::npos);
  CHECK(text.find(" nodes): 9 runs") != std::string::npos);
  const size_t nodes = std::stoul(text.substr(text.find("thread(s), ") + 11));
  CHECK(text.find("attention_backward [64, 10, 32]") != std::string::npos);
  CHECK(text.find("adam (all parameters)") != std::string::npos);
  REQUIRE(nodes > 20);
  CHECK(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) == 1 + nodes + 1);  // title, nodes, adam
}

}  // namespace

// Crash-safe checkpoints: a process saving checkpoints over and over is killed (SIGKILL) at
// random moments, many times; the checkpoint on disk must always load, whole and consistent.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/rng.h"
#include "models/lessons.h"

namespace attnkit {
namespace {

TEST_CASE("a checkpoint killed mid-save never damages the previous one") {
  const std::string dir = std::string(ATTNKIT_BINARY_DIR) + "/crash_safety";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";

  Model m = build_model(lesson_config("neighbor-sum"), 8);
  Executor ex(*m.graph, {1, 0});
  Adam adam(ex.param_count(), {});
  TrainingState st;
  st.config["task"] = "neighbor-sum";
  // Version v of the checkpoint: every parameter and moment equals v, step = v.
  auto fill_version = [&](int64_t v) {
    for (int64_t i = 0; i < ex.param_count(); ++i) ex.params()[i] = adam.m()[i] = adam.v()[i] = static_cast<float>(v);
    adam.restore(v);
  };
  fill_version(0);
  save_checkpoint(path, ex, &adam, st);

  Rng rng(7);
  int64_t last_seen = 0, kills_mid_run = 0;
  for (int round = 0; round < 40; ++round) {
    int saved[2];  // the child writes a byte here after each whole save
    REQUIRE(pipe(saved) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // saves newer versions as fast as it can until killed
      close(saved[0]);
      for (int64_t v = last_seen + 1;; ++v) {
        fill_version(v);
        save_checkpoint(path, ex, &adam, st);
        if (write(saved[1], "s", 1) != 1) _exit(1);
      }
    }
    close(saved[1]);
    // Every other round waits for one whole save first, so that saves get through however
    // slow this machine is (an instrumented build under a parallel ctest took longer than the
    // longest delay below for every save of all 40 rounds); the others kill the child at a
    // random moment from its start, its first save included.
    if (round % 2 == 1) {
      char byte = 0;
      ssize_t got;
      do {
        got = read(saved[0], &byte, 1);
      } while (got < 0 && errno == EINTR);
      REQUIRE(got == 1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200 + rng.below(15000)));
    REQUIRE(kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    close(saved[0]);
    kills_mid_run += WIFSIGNALED(status);

    // The file on disk is one whole version: it loads, and everything in it agrees.
    Model m2 = build_model(lesson_config("neighbor-sum"), 8);
    Executor ex2(*m2.graph, {1, 1});
    Adam adam2(ex2.param_count(), {});
    TrainingState st2;
    INFO("round " << round);
    REQUIRE_NOTHROW(load_checkpoint(path, ex2, &adam2, st2));
    const int64_t v = adam2.steps();
    REQUIRE(v >= last_seen);
    for (const ParamInfo& p : m2.graph->params())  // (padding between parameters is not saved)
      for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
        REQUIRE(ex2.params()[i] == static_cast<float>(v));
        REQUIRE(adam2.m()[i] == static_cast<float>(v));
      }
    REQUIRE(st2.config.at("task") == "neighbor-sum");
    last_seen = v;
  }
  REQUIRE(kills_mid_run == 40);
  REQUIRE(last_seen > 0);  // the child did get saves through
  // Killed writers leave model.safetensors.tmp.<pid> behind; the next save removes those of
  // dead processes (and only those).
  const std::string live_tmp = path + ".tmp.1";  // pid 1 is always running
  std::fclose(std::fopen(live_tmp.c_str(), "wb"));
  std::fclose(std::fopen((path + ".tmp.999999999").c_str(), "wb"));  // beyond pid_max: dead
  std::fclose(std::fopen((path + ".tmp.notapid").c_str(), "wb"));
  save_checkpoint(path, ex, &adam, st);
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"model.safetensors", "model.safetensors.tmp.1", "model.safetensors.tmp.notapid"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnkit

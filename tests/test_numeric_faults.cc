// Numeric faults: NaN or Inf in the loss, a gradient or a parameter stops training with a
// message naming the step and the tensor, and the last good checkpoint stays as it was.
// Also: results with more threads than cores.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "models/lessons.h"
#include "models/tasks.h"
#include "models/trainer.h"
#include "ops/finite.h"
#include "file_test_util.h"

using namespace attnkit;
using attnkit::testing::slurp;
namespace fs = std::filesystem;

namespace {

TrainerOptions small_options(const std::string& task, int64_t epochs, int threads = 1) {
  TrainerOptions o;
  o.training = lesson_training(task);
  o.training.epochs = epochs;
  o.training.train_size = 300;
  o.training.val_size = 50;
  o.threads = threads;
  return o;
}

Trainer make_trainer(const std::string& task, const TrainerOptions& o) {
  const ModelConfig c = lesson_config(task);
  return Trainer(c, o, generate_task_data(c, o.training.train_size, o.training.val_size, o.seed));
}

// The message of the NumericError that f throws (fails the test when it throws none).
template <class F>
std::string numeric_error_of(F&& f) {
  try {
    f();
  } catch (const NumericError& e) {
    return e.what();
  }
  FAIL("no NumericError");
  return {};
}

}  // namespace

TEST_CASE("first_nonfinite finds the first NaN or Inf anywhere, and nothing in finite data") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Rng rng(5);
  for (int64_t n : {0, 1, 7, 255, 256, 257, 1000, 4099}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = static_cast<float>(rng.uniform() * 2 - 1) * 1e30f;
    if (n > 2) {
      x[1] = std::numeric_limits<float>::max();
      x[2] = -std::numeric_limits<float>::denorm_min();
    }
    REQUIRE(first_nonfinite(x.data(), n) == -1);
    for (float bad : {nan, inf, -inf, -nan}) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1, int64_t{255}, int64_t{256}}) {
        if (at < 0 || at >= n) continue;
        std::vector<float> y = x;
        y[static_cast<size_t>(at)] = bad;
        if (at + 3 < n) y[static_cast<size_t>(at + 3)] = nan;  // a later one does not matter
        INFO("n " << n << " at " << at << " value " << bad);
        REQUIRE(first_nonfinite(y.data(), n) == at);
      }
    }
  }
}

TEST_CASE("NaN in a parameter stops training at step 1 naming the loss and the gradient") {
  const TrainerOptions o = small_options("neighbor-sum", 2);
  Trainer t = make_trainer("neighbor-sum", o);
  // Poison one weight of the output layer: the loss and every gradient become NaN.
  const ParamInfo* head = nullptr;
  for (const ParamInfo& p : t.executor().graph().params())
    if (p.name.find("weight") != std::string::npos) head = &p;
  REQUIRE(head != nullptr);
  t.executor().params()[head->offset + 3] = std::numeric_limits<float>::quiet_NaN();
  int64_t steps_seen = 0;
  const std::string msg = numeric_error_of([&] { t.train([&](const StepReport&) { ++steps_seen; }); });
  INFO(msg);
  CHECK(steps_seen == 0);  // no step report for the failed step
  CHECK(msg.find("step 1 (epoch 1, batch 1)") == 0);
  CHECK(msg.find("the loss is NaN") != std::string::npos);
  CHECK(msg.find("gradient of '") != std::string::npos);
  CHECK(t.losses().empty());
}

TEST_CASE("Inf in a gradient is named with its parameter and position, and save() then refuses") {
  const fs::path dir = fs::path(ATTNKIT_BINARY_DIR) / "test_numeric_tmp";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string ckpt = (dir / "model.safetensors").string();

  TrainerOptions o = small_options("reversal", 1);
  {
    Trainer good = make_trainer("reversal", o);
    good.train();
    good.save(ckpt);
  }
  const std::string before = slurp(ckpt);
  REQUIRE(before.size() > 100);

  // Resume from the good checkpoint and poison the second step: a huge embedding row for one
  // token overflows the layer norm's variance, so its gradient is not finite.
  o.training.epochs = 2;
  Trainer t = make_trainer("reversal", o);
  t.resume(ckpt);
  const int64_t resumed_at = t.step();
  REQUIRE(resumed_at > 0);
  int64_t reports = 0;
  std::string msg = numeric_error_of([&] {
    t.train([&](const StepReport& r) {
      if (++reports == 1) {
        for (const ParamInfo& p : t.executor().graph().params())
          if (p.name == "tok.weight")
            for (int64_t i = 0; i < p.numel; ++i) t.executor().params()[p.offset + i] = 3e38f;
      }
      (void)r;
    });
  });
  INFO(msg);
  CHECK(reports == 1);
  CHECK(msg.find("step " + std::to_string(resumed_at + 2) + " (epoch 2") == 0);
  CHECK((msg.find("loss is") != std::string::npos || msg.find("gradient of '") != std::string::npos));
  CHECK(msg.find("nothing saved") != std::string::npos);
  // The trainer will not write its broken parameters over the good checkpoint.
  const std::string refused = numeric_error_of([&] { t.save(ckpt); });
  CHECK(refused.find(ckpt) != std::string::npos);
  CHECK(slurp(ckpt) == before);
  // And the good checkpoint still resumes.
  o.training.epochs = 2;
  Trainer again = make_trainer("reversal", o);
  again.resume(ckpt);
  again.train();
  CHECK(std::isfinite(again.last_loss()));
  fs::remove_all(dir);
}

TEST_CASE("a huge learning rate ends with a numeric error naming the step, never a crash") {
  for (float lr : {1e9f, 1e38f}) {
    TrainerOptions o = small_options("neighbor-sum", 3);
    o.training.lr = lr;
    Trainer t = make_trainer("neighbor-sum", o);
    const std::string msg = numeric_error_of([&] { t.train(); });
    INFO("lr " << lr << ": " << msg);
    CHECK(msg.rfind("step ", 0) == 0);
    CHECK((msg.find("NaN") != std::string::npos || msg.find("Inf") != std::string::npos));
  }
  TrainerOptions o = small_options("neighbor-sum", 1);
  o.training.lr = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(make_trainer("neighbor-sum", o), Error);
}

TEST_CASE("the check can be turned off and costs nothing in results") {
  TrainerOptions on = small_options("duplicates", 1), off = on;
  off.check_finite = false;
  Trainer a = make_trainer("duplicates", on), b = make_trainer("duplicates", off);
  a.train();
  b.train();
  REQUIRE(a.losses() == b.losses());
}

TEST_CASE("training with more threads than cores (8) gives bitwise the losses of one thread") {
  for (const std::string task : {"neighbor-sum", "reversal"}) {
    INFO(task);
    Trainer one = make_trainer(task, small_options(task, 1, 1));
    Trainer eight = make_trainer(task, small_options(task, 1, 8));
    one.train();
    eight.train();
    REQUIRE(one.losses().size() == eight.losses().size());
    REQUIRE(std::memcmp(one.losses().data(), eight.losses().data(), one.losses().size() * 4) == 0);
    const Executor& e1 = one.executor();
    const Executor& e8 = eight.executor();
    REQUIRE(std::memcmp(e1.params(), e8.params(), static_cast<size_t>(e1.param_count()) * 4) == 0);
  }
}

// Data-parallel training (TrainerOptions::collective) in one process: threads play the ranks
// through an in-process Collective that adds in rank order like tools/mpi_collective.cc. The
// group must give the single process's losses at the same global batch up to summation order,
// the same bits on every run, and refuse ranks that disagree. tests/test_mpi.cc runs the same
// through mpirun and the attnkit program.
#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "models/trainer.h"

namespace attnkit {
namespace {

class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    const int64_t gen = gen_;
    if (++waiting_ == n_) {
      waiting_ = 0, ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  int64_t gen_ = 0;
};

struct Shared {
  explicit Shared(int n) : size(n), barrier(n), ptrs(static_cast<size_t>(n)), values(static_cast<size_t>(n)) {}
  int size;
  Barrier barrier;
  std::vector<const float*> ptrs;
  std::vector<uint64_t> values;
};

class ThreadRank final : public Collective {
 public:
  ThreadRank(Shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }
  void sum(float* data, int64_t n) override {
    s_.ptrs[static_cast<size_t>(rank_)] = data;
    s_.barrier.wait();
    out_.assign(s_.ptrs[0], s_.ptrs[0] + n);
    for (int k = 1; k < s_.size; ++k)
      for (int64_t i = 0; i < n; ++i) out_[static_cast<size_t>(i)] += s_.ptrs[static_cast<size_t>(k)][i];
    s_.barrier.wait();  // everyone has read everyone's data
    std::memcpy(data, out_.data(), static_cast<size_t>(n) * sizeof(float));
    bytes_ += n * 4;
  }
  std::vector<uint64_t> all_gather(uint64_t v) override {
    s_.values[static_cast<size_t>(rank_)] = v;
    s_.barrier.wait();
    std::vector<uint64_t> all = s_.values;
    s_.barrier.wait();
    return all;
  }
  int64_t bytes_summed() const override { return bytes_; }
  double seconds_summing() const override { return 0; }

 private:
  Shared& s_;
  int rank_;
  std::vector<float> out_;
  int64_t bytes_ = 0;
};

struct RankResult {
  std::vector<float> losses, params;
  double accuracy = -1;
  bool finished = false;
  std::string error;
};

TrainerOptions options_for(const std::string& task, int64_t batch, int64_t epochs, uint64_t seed) {
  TrainerOptions o;
  o.training = lesson_training(task);
  o.training.batch_size = batch;
  o.training.epochs = epochs;
  o.seed = seed;
  return o;
}

// Trains `task` on `ranks` threads (0: alone, no group); customize may change a rank's
// options or data before its Trainer is made.
std::vector<RankResult> train_group(
    const std::string& task, int ranks, int64_t train_size, int64_t batch, int64_t epochs,
    const std::function<void(int, TrainerOptions&, TaskData&)>& customize = {},
    const std::function<bool(int, int64_t)>& stop = {}) {
  const ModelConfig c = lesson_config(task);
  const int n = std::max(ranks, 1);
  Shared shared(n);
  std::vector<std::unique_ptr<ThreadRank>> group;
  for (int r = 0; r < n; ++r) group.push_back(std::make_unique<ThreadRank>(shared, r));
  std::vector<RankResult> results(static_cast<size_t>(n));
  auto run = [&](int r) {
    RankResult& out = results[static_cast<size_t>(r)];
    try {
      TrainerOptions o = options_for(task, batch, epochs, 7);
      if (ranks > 0) o.collective = group[static_cast<size_t>(r)].get();
      TaskData data = generate_task_data(c, train_size, 64, o.seed);
      if (customize) customize(r, o, data);
      Trainer t(c, o, std::move(data));
      out.finished = t.train({}, {}, [&] { return stop && stop(r, t.step()); });
      out.losses = t.losses();
      const Executor& ex = t.executor();
      out.params.assign(ex.params(), ex.params() + ex.param_count());
      out.accuracy = t.evaluate(t.data().val).value();
    } catch (const std::exception& e) {
      out.error = e.what();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(run, r);
  for (auto& th : threads) th.join();
  return results;
}

// Losses of two runs that add the same gradients in a different order: `rel` over the first
// 12 steps (a wrong sum shows at once), then 10× looser every 12 steps, because a rounding
// difference grows as training goes on (neighbor-sum at 4-row batches: 1e-5 by step 35 and
// 1e-3 by step 45 between two graphs that only round differently).
void require_close(const std::vector<float>& a, const std::vector<float>& b, double rel) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = rel * std::pow(10.0, static_cast<double>(i / 12));
    INFO("step " << i + 1 << ": " << a[i] << " vs " << b[i] << " (relative tolerance " << tol << ")");
    REQUIRE(std::abs(double(a[i]) - double(b[i])) <= tol * std::abs(double(b[i])) + 1e-7);
  }
}

}  // namespace

TEST_CASE("a group of 2 or 3 ranks gives the single process's losses at the same global batch") {
  // 100 sequences in batches of 12: the last batch of 4 splits 2/2 or 1/1/2.
  for (const std::string task : {"reversal", "neighbor-sum", "duplicates", "induction"}) {
    const auto alone = train_group(task, 0, 100, 12, 4);
    REQUIRE(alone[0].error.empty());
    REQUIRE(alone[0].losses.size() == 36);
    for (int ranks : {2, 3}) {
      INFO(task << " on " << ranks << " ranks");
      const auto group = train_group(task, ranks, 100, 12, 4);
      for (const RankResult& r : group) {
        REQUIRE(r.error.empty());
        REQUIRE(r.finished);
        require_close(r.losses, alone[0].losses, 1e-5);
        REQUIRE(r.params == group[0].params);  // every rank holds the same parameters, bit for bit
        // The group sums its gradients in another order than one process (the losses agree
        // within require_close's tolerance, not bitwise), so a near-tied prediction of these
        // barely trained models may flip: the validation accuracies agree within 1%.
        REQUIRE(std::abs(r.accuracy - alone[0].accuracy) <= 0.01);
      }
    }
  }
}

TEST_CASE("a group gives the same bits on every run and handles ranks without rows") {
  // 110 sequences in batches of 12: the last batch has 2 rows, so of 3 ranks one has none.
  const auto a = train_group("reversal", 3, 110, 12, 3);
  const auto b = train_group("reversal", 3, 110, 12, 3);
  const auto alone = train_group("reversal", 0, 110, 12, 3);
  for (size_t r = 0; r < 3; ++r) {
    REQUIRE(a[r].error.empty());
    REQUIRE(a[r].losses == b[r].losses);
    REQUIRE(a[r].params == b[r].params);
    require_close(a[r].losses, alone[0].losses, 1e-5);
  }
}

TEST_CASE("a group stops together when one rank is asked to") {
  // A rank's answer travels with the next step's sum: rank 1 first says yes before step 6,
  // and every rank stops after step 6.
  const auto g = train_group("reversal", 2, 200, 16, 5, {}, [](int rank, int64_t step) { return rank == 1 && step >= 5; });
  for (const RankResult& r : g) {
    REQUIRE(r.error.empty());
    REQUIRE_FALSE(r.finished);
    REQUIRE(r.losses.size() == 6);
  }
  REQUIRE(g[0].params == g[1].params);
}

TEST_CASE("ranks that disagree on the options or the data are refused on every rank") {
  SECTION("seed") {
    const auto g = train_group("reversal", 2, 64, 16, 1, [](int r, TrainerOptions& o, TaskData&) { o.seed += r; });
    for (const RankResult& r : g) REQUIRE_THAT(r.error, Catch::Contains("rank 1 of 2 disagrees with rank 0 on the model and training options"));
  }
  SECTION("data") {
    const auto g = train_group("reversal", 3, 64, 12, 1, [](int r, TrainerOptions&, TaskData& d) {
      if (r == 2) d.train.x[5] = (d.train.x[5] + 1) % 10;
    });
    for (const RankResult& r : g) REQUIRE_THAT(r.error, Catch::Contains("rank 2 of 3 disagrees with rank 0 on the training and validation data"));
  }
  SECTION("a batch that does not divide") {
    const auto g = train_group("reversal", 3, 64, 16, 1);
    for (const RankResult& r : g) REQUIRE_THAT(r.error, Catch::Contains("batch size 16 does not divide among 3 processes"));
  }
}

}  // namespace attnkit

// Mixed-precision training (ExecutorOptions::precision = kBf16): the products really run in
// bf16 (the loss differs from float32's, within bf16's rounding), results do not depend on the
// thread count, a steady-state step allocates nothing, the lesson models reach their float32
// accuracy, reversal-large's loss follows float32's, and checkpoints move between precisions.
// On a CPU without AMX-BF16 or AVX512-BF16 these cases report as skipped (bf16 then runs
// float32 products, which the other tests cover).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "allocation_counter.h"
#include "engine/executor.h"
#include "engine/functional.h"
#include "engine/rng.h"
#include "engine/simd_target.h"
#include "file_test_util.h"
#include "models/trainer.h"
#include "ops/gemm_bf16.h"
#include "skip_test_util.h"

namespace attnkit {
namespace {

// (ATTNKIT_SIMD_TARGET below AVX3 leaves no bf16 kernel: applied first, as an Executor would.)
bool have_bf16() {
  apply_simd_target_env();
  return bf16_kernel() != Bf16Kernel::kNone;
}
#define REQUIRE_BF16_KERNEL() \
  if (!have_bf16()) ATTNKIT_SKIP("this CPU has no bf16 kernel (AMX-BF16 or AVX512-BF16)")

// A small pre-LN transformer whose products are large enough to take the bf16 path
// (bf16_product_worth): 32 × 32 = 1024 rows, D = 64, MLP 128, T = 32 attention on the GEMM path.
ModelConfig bf16_config() {
  ModelConfig c = lesson_config("reversal");
  c.task = "reversal";
  c.seq_len = 32;
  c.vocab = 16;
  c.classes = 16;
  c.d_model = 64;
  c.heads = 2;
  c.layers = 2;
  c.pre_norm = true;
  c.block_mlp = 128;
  return c;
}

void fill_batch(const ModelConfig& c, Rng& rng, int64_t batch, std::vector<int32_t>& ids,
                std::vector<int32_t>& targets) {
  ids.resize(static_cast<size_t>(batch * c.seq_len));
  targets.resize(ids.size());
  for (auto& x : ids) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab)));
  for (size_t i = 0; i < ids.size(); ++i) {  // reversal: position t answers token T-1-t
    const size_t row = i / static_cast<size_t>(c.seq_len), t = i % static_cast<size_t>(c.seq_len);
    targets[i] = ids[row * static_cast<size_t>(c.seq_len) + static_cast<size_t>(c.seq_len) - 1 - t];
  }
}

std::vector<float> train_losses(const ModelConfig& c, Precision p, int threads, int steps,
                                int64_t chunk_rows = -1) {
  Model m = build_model(c, 32);
  ExecutorOptions o{threads, 3, false};  // not adaptive: really use them all
  o.precision = p;
  o.train_chunk_rows = chunk_rows;
  Executor ex(*m.graph, o);
  CHECK(ex.bf16_products() == (p == Precision::kBf16));
  Adam adam(ex.param_count(), {0.003f});
  Rng rng(9);
  std::vector<int32_t> ids, targets;
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) {
    fill_batch(c, rng, i % 4 == 3 ? 17 : 32, ids, targets);
    ex.set_batch(static_cast<int64_t>(ids.size()) / c.seq_len);
    std::memcpy(ex.i32(m.ids.id()), ids.data(), ids.size() * 4);
    std::memcpy(ex.i32(m.targets.id()), targets.data(), targets.size() * 4);
    ex.train_step(&adam);
    losses.push_back(ex.f32(m.loss.id())[0]);
  }
  return losses;
}

}  // namespace

TEST_CASE("bf16 training: the products take the bf16 path, losses close to float32's, learning") {
  REQUIRE_BF16_KERNEL();
  const ModelConfig c = bf16_config();
  const auto f32 = train_losses(c, Precision::kF32, 1, 30), bf16 = train_losses(c, Precision::kBf16, 1, 30);
  INFO("kernel " << bf16_kernel_name(bf16_kernel()) << ": first losses " << f32[0] << " / " << bf16[0]
                 << ", last " << f32.back() << " / " << bf16.back());
  CHECK(std::memcmp(f32.data(), bf16.data(), 4) != 0);          // not the float32 products
  CHECK(std::fabs(bf16[0] - f32[0]) <= 0.01f * std::fabs(f32[0]));  // the first step: rounding only
  CHECK(std::fabs(bf16.back() - f32.back()) <= 0.05f * std::fabs(f32.back()));
  CHECK(bf16.back() < 0.9f * bf16[0]);
}

TEST_CASE("bf16 training: bitwise the same losses whatever the thread count") {
  REQUIRE_BF16_KERNEL();
  for (const ModelConfig& c : {bf16_config(), lesson_config("neighbor-sum")}) {
    INFO(c.task << " T " << c.seq_len);
    const auto a = train_losses(c, Precision::kBf16, 1, 8), b = train_losses(c, Precision::kBf16, 1, 8);
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    const auto t2 = train_losses(c, Precision::kBf16, 2, 8), t3 = train_losses(c, Precision::kBf16, 3, 8);
    CHECK(std::memcmp(a.data(), t2.data(), a.size() * 4) == 0);
    CHECK(std::memcmp(a.data(), t3.data(), a.size() * 4) == 0);
  }
}

TEST_CASE("bf16 training in chunks: the weights packed once a step give the same bits as packed per chunk") {
  REQUIRE_BF16_KERNEL();
  const ModelConfig c = bf16_config();
  // Chunks of 8 sequences (256 rows: every Linear still on the bf16 path); the batch-17 steps
  // end in a short chunk.
  std::vector<float> one_thread;
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    const auto kept = train_losses(c, Precision::kBf16, threads, 8, 8);
    if (threads == 1) one_thread = kept;
    CHECK(std::memcmp(kept.data(), one_thread.data(), kept.size() * 4) == 0);  // thread count: no change
    set_bf16_pack_cache(false);
    const auto repacked = train_losses(c, Precision::kBf16, threads, 8, 8);
    set_bf16_pack_cache(true);
    CHECK(std::memcmp(kept.data(), repacked.data(), kept.size() * 4) == 0);
    const auto whole = train_losses(c, Precision::kBf16, threads, 8, 0);
    for (size_t i = 0; i < whole.size(); ++i) CHECK(std::fabs(kept[i] - whole[i]) <= 1e-4f * std::fabs(whole[i]));
  }
}

TEST_CASE("bf16 in chunks: an evaluation after each update multiplies by the updated weights") {
  REQUIRE_BF16_KERNEL();
  const ModelConfig c = bf16_config();
  // train_step then forward, as a training loop with evaluations does: each chunked run must
  // pack the weights it multiplies by, never reuse the tiles of the run before the update.
  auto run = [&](bool kept) {
    set_bf16_pack_cache(kept);
    Model m = build_model(c, 32);
    ExecutorOptions o{1, 0};
    o.precision = Precision::kBf16;
    o.train_chunk_rows = 8;
    Executor ex(*m.graph, o);
    Adam adam(ex.param_count(), {0.003f});
    Rng rng(3);
    std::vector<int32_t> ids, targets;
    std::vector<float> out;
    for (int i = 0; i < 4; ++i) {
      fill_batch(c, rng, 32, ids, targets);
      std::memcpy(ex.i32(m.ids.id()), ids.data(), ids.size() * 4);
      std::memcpy(ex.i32(m.targets.id()), targets.data(), targets.size() * 4);
      ex.train_step(&adam);
      ex.forward();
      const float* logits = ex.f32(m.logits.id());
      out.insert(out.end(), logits, logits + 32 * c.seq_len * c.classes);
    }
    set_bf16_pack_cache(true);
    return out;
  };
  const std::vector<float> kept = run(true), repacked = run(false);
  REQUIRE(kept.size() == repacked.size());
  CHECK(std::memcmp(kept.data(), repacked.data(), kept.size() * 4) == 0);
}

TEST_CASE("bf16 training: every bf16 kernel this CPU has (AMX, AVX512-BF16) gives close losses") {
  REQUIRE_BF16_KERNEL();
  const ModelConfig c = bf16_config();
  const auto best = train_losses(c, Precision::kBf16, 1, 6);
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    if (!set_bf16_kernel(k)) continue;
    INFO(bf16_kernel_name(k));
    const auto other = train_losses(c, Precision::kBf16, 1, 6);
    for (size_t i = 0; i < other.size(); ++i) CHECK(std::fabs(other[i] - best[i]) <= 0.01f * std::fabs(best[i]));
  }
  use_best_bf16_kernel();
}

TEST_CASE("bf16 training: a steady-state step makes no heap allocation") {
  REQUIRE_BF16_KERNEL();
  for (int threads : {1, 2}) for (bool chunks : {false, true}) {
    const ModelConfig c = bf16_config();
    Model m = build_model(c, 32);
    ExecutorOptions o{threads, 0};
    o.precision = Precision::kBf16;
    o.train_chunk_rows = chunks ? 8 : 0;  // in chunks: the weights' packed forms kept
    Executor ex(*m.graph, o);
    Adam adam(ex.param_count(), {0.003f});
    Rng rng(5);
    std::vector<int32_t> ids, targets;
    fill_batch(c, rng, 32, ids, targets);
    std::memcpy(ex.i32(m.ids.id()), ids.data(), ids.size() * 4);
    std::memcpy(ex.i32(m.targets.id()), targets.data(), targets.size() * 4);
    for (int i = 0; i < 3; ++i) ex.train_step(&adam);  // warm-up: thread pools, packing scratch
    const long before = g_allocations.load();
    for (int i = 0; i < 10; ++i) {
      ex.set_batch(i % 5 == 4 ? 20 : 32);
      ex.train_step(&adam);
      ex.forward();
    }
    const long allocations = g_allocations.load() - before;
    INFO(threads << " threads, in chunks " << chunks);
    REQUIRE(allocations == 0);
  }
}

TEST_CASE("bf16 training: the lesson models reach their float32 accuracy") {
  REQUIRE_BF16_KERNEL();
  for (const char* task : {"neighbor-sum", "duplicates", "reversal"}) {
    const ModelConfig c = lesson_config(task);
    double acc[2];
    for (Precision p : {Precision::kF32, Precision::kBf16}) {
      TrainerOptions o;
      o.training = lesson_training(task);
      o.threads = 2;
      o.precision = p;
      Trainer t(c, o, generate_task_data(c, o.training.train_size, o.training.val_size, 0));
      t.train();
      acc[p == Precision::kBf16] = t.evaluate(t.data().val).value();
    }
    INFO(task << ": float32 " << acc[0] << ", bf16 " << acc[1]);
    CHECK(acc[1] >= acc[0] - 0.02);
  }
}

TEST_CASE("bf16 training: reversal-large's loss follows float32's") {
  REQUIRE_BF16_KERNEL();
  const ModelConfig c = lesson_config("reversal-large");
  float loss[2];
  for (Precision p : {Precision::kF32, Precision::kBf16}) {
    TrainerOptions o;
    o.training = lesson_training("reversal-large");
    o.training.train_size = 32 * 12;  // 12 steps
    o.training.val_size = 32;
    o.threads = 2;
    o.precision = p;
    o.seed = 1;
    Trainer t(c, o, generate_task_data(c, o.training.train_size, o.training.val_size, 1));
    t.train();
    REQUIRE(t.losses().size() == 12);
    loss[p == Precision::kBf16] = t.losses().back();
  }
  INFO("loss after 12 steps: float32 " << loss[0] << ", bf16 " << loss[1]);
  CHECK(std::fabs(loss[1] - loss[0]) <= 0.02f * loss[0]);
}

TEST_CASE("bf16 training: checkpoints are float32 and resume in either precision") {
  testing::TempDir dir;
  const ModelConfig c = lesson_config("reversal");
  auto options = [](Precision p, int64_t epochs) {
    TrainerOptions o;
    o.training = lesson_training("reversal");
    o.training.epochs = epochs;
    o.threads = 1;
    o.precision = p;
    return o;
  };
  const TaskData data = generate_task_data(c, 256, 64, 2);
  Trainer bf16(c, options(Precision::kBf16, 1), data);
  bf16.train();
  const std::string path = dir / "bf16.safetensors";
  bf16.save(path);
  Trainer f32(c, options(Precision::kF32, 2), data);
  f32.resume(path);
  CHECK(f32.step() == bf16.step());
  f32.train();
  CHECK(f32.step() == 2 * bf16.step());
  CHECK(std::isfinite(f32.losses().back()));
}

}  // namespace attnkit

// Training steps per second of the lesson models (forward + backward + Adam, one
// Executor::train_step) at each lesson's batch size, 1 and 2 threads.
//
//   bench_train_step [--batch=N] [--models=neighbor-sum,duplicates,reversal,reversal-large,neighbor-sum-003]
//                    [--threads=1,2] [--adaptive=0|1] [--fold=0|1] [--fuse=0|1] [--index-values=0|1]
//                    [--profile=STEPS] [--precision=f32|bf16] [--gemm=attnkit|openblas]
//                    [--train-chunk=-1|0|N] [--pack-cache=0|1]
//                    [Google Benchmark flags, e.g. --benchmark_min_time=0.5]
//
// The default models are the three lessons and "reversal-large", the compute-bound
// configuration (V = 64, T = 128, D = 256, 4 heads, 2 pre-LayerNorm blocks of attention + MLP
// with hidden 4D, batch 32, Adam lr 1e-3, target = the reversed sequence; ~0.1-0.5 s a step).
// --batch overrides every model's batch (64 / 64 / 32 / 32). --adaptive=0 turns off the
// executor's adaptive thread use (ExecutorOptions::adaptive_threads), so that N threads are
// really N threads every step. --fold=0 builds the textbook graph, without folding the
// projections of embedding lookups into the tables (see linear() in engine/modules.h).
// --fuse=0 keeps ReLUs and residual sums as nodes of their own (see Graph::fuse_elementwise).
// --index-values=0 materializes an attention's values instead of reading them from a
// per-(token, position) table (see Graph::index_attention_values).
// --profile=STEPS runs that many steps of each model with the
// executor's per-node timing on and prints the slowest nodes instead of benchmarking, then the
// time per step spent inside the products (every sgemm call of the step, see set_gemm_timing).
// --train-chunk sets ExecutorOptions::train_chunk_rows (-1 automatic, 0 whole batches, N
// batch entries a chunk).
// --shards=N sets ExecutorOptions::train_shards (data-parallel shards of each step's batch, one
// thread each; 0 off).
// --pack-cache=0 makes every bf16 product pack its weights again (set_bf16_pack_cache), as
// before the packed weights were kept for the chunks of a step.
// --gemm=openblas runs every product of the step on OpenBLAS's cblas_sgemm instead of attnkit's
// kernels (float32; with --profile: the large model's products in place, attnkit vs OpenBLAS).
// Token batches (with the task's true targets) are generated before timing; a few distinct
// batches are cycled.
// Reports items_per_second = steps/s and the counter "steps/s".
#include <benchmark/benchmark.h>
#include <cblas.h>  // the openblas-pthread one: declares openblas_set_num_threads

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../engine/executor.h"
#include "../engine/optimizer.h"
#include "../ops/gemm.h"
#include "../ops/gemm_bf16.h"
#include "../examples/lesson003_attention.h"
#include "../models/lessons.h"
#include "../tools/program_env.h"
#include "bench_flags.h"
#include "simd_context.h"

namespace {

using namespace attnkit;

// "neighbor-sum-003": the neighbor-sum model with lesson 003's attention written from primitive
// ops (examples/lesson003_attention.h) in place of the fused MultiHeadAttention.
bool from_primitives(const std::string& task) {
  return task.size() > 4 && task.compare(task.size() - 4, 4, "-003") == 0;
}
std::string base_task(const std::string& task) { return from_primitives(task) ? task.substr(0, task.size() - 4) : task; }

Model build_primitives_model(const ModelConfig& c, int64_t batch) {
  Model m;
  m.config = c;
  m.graph = std::make_unique<Graph>(batch);
  Graph& g = *m.graph;
  const int64_t T = c.seq_len, D = c.d_model;
  m.ids = g.input("ids", {T}, DType::kI32);
  m.targets = g.input("targets", {T}, DType::kI32);
  Embedding tok(g, "tok", c.vocab, D), pos(g, "pos", T, D);
  lesson003::MultiHeadAttention attn(g, "attn", D, c.heads);
  Sequential head{Linear(g, "head.0", D, c.mlp_hidden), ReLU(), Linear(g, "head.2", c.mlp_hidden, c.classes)};
  Tensor h = tok(m.ids) + pos(g.arange(T));
  m.logits = head(h + attn(h, h, h));
  g.keep(m.logits);
  m.loss = cross_entropy(m.logits, m.targets);
  g.backward(m.loss);
  return m;
}

int64_t lesson_batch(const std::string& task) {
  return task == "reversal" || task == "reversal-large" ? 32 : 64;
}
float lesson_lr(const std::string& task) {
  if (task == "neighbor-sum") return 0.01f;
  return task == "reversal-large" ? 0.001f : 0.003f;
}

// The task's true targets for a token row (random targets would time the same).
void targets_for(const ModelConfig& c, const int32_t* x, int32_t* y) {
  const int64_t T = c.seq_len;
  for (int64_t i = 0; i < T; ++i) {
    if (c.task == "neighbor-sum") {
      y[i] = (x[(i + T - 1) % T] + x[(i + 1) % T]) % 10;
    } else if (c.task == "duplicates") {
      int32_t dup = 0;
      for (int64_t j = 0; j < T; ++j) dup |= (j != i && x[j] == x[i]);
      y[i] = dup;
    } else if (c.task == "reversal" || c.task == "reversal-large") {
      y[i] = x[T - 1 - i];
    } else {
      y[i] = static_cast<int32_t>(x[i] % c.classes);
    }
  }
}

constexpr int kDistinctBatches = 4;
bool g_adaptive = true;
bool g_fold = true;
bool g_fuse = true;
bool g_index_values = true;
Precision g_precision = Precision::kF32;
int64_t g_train_chunk = -1;
int g_shards = 0;

// What runs the step's products: attnkit's kernels (and which bf16 ones) or OpenBLAS.
const char* products_name() {
  if (gemm_backend() == GemmBackend::kOpenBLAS) return "OpenBLAS (float32)";
  if (g_precision == Precision::kBf16 && bf16_kernel() != Bf16Kernel::kNone) return bf16_kernel_name(bf16_kernel());
  return "attnkit (float32)";
}

ModelConfig bench_config(const std::string& task) {
  ModelConfig c = lesson_config(base_task(task));
  c.fold_embedding_projections = g_fold;
  c.fuse_elementwise = g_fuse;
  c.index_attention_values = g_index_values;
  return c;
}

// One lesson model ready to train: its executor, Adam, and a few token batches to cycle.
struct StepRunner {
  ModelConfig c;
  Model m;
  std::unique_ptr<Executor> ex;
  std::unique_ptr<Adam> adam;
  std::vector<std::vector<int32_t>> ids, tgt;
  size_t n = 0;
  int b = 0;

  StepRunner(const std::string& task, int threads, int64_t batch)
      : c(bench_config(task)),
        m(from_primitives(task) ? build_primitives_model(c, batch) : build_model(c, batch)) {
    // OpenBLAS's own threads: as many as the executor's, or it would use every core.
    if (gemm_backend() == GemmBackend::kOpenBLAS) openblas_set_num_threads(threads);
    ExecutorOptions options;
    options.threads = threads;
    options.seed = 1;
    options.adaptive_threads = g_adaptive;
    options.precision = g_precision;
    options.train_chunk_rows = g_train_chunk;
    options.train_shards = g_shards;
    ex = std::make_unique<Executor>(*m.graph, options);
    adam = std::make_unique<Adam>(ex->param_count(), AdamOptions{lesson_lr(base_task(task))});
    ex->set_batch(batch);
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab - 1));
    n = static_cast<size_t>(batch * c.seq_len);
    ids.assign(kDistinctBatches, std::vector<int32_t>(n));
    tgt.assign(kDistinctBatches, std::vector<int32_t>(n));
    for (int k = 0; k < kDistinctBatches; ++k) {
      for (auto& x : ids[k]) x = tok(rng);
      for (int64_t r = 0; r < batch; ++r)
        targets_for(c, ids[k].data() + r * c.seq_len, tgt[k].data() + r * c.seq_len);
    }
    // Warm-up: thread pool, first touch, and the adaptive executor's first probe (12 steps
    // from the second on, blocks of 2 and 1 threads), which would otherwise fall into the
    // timed steps.
    for (int i = 0; i < 14; ++i) step();
  }

  void step() {
    // Copying the inputs in is part of a real step (a few hundred bytes).
    std::memcpy(ex->i32(m.ids.id()), ids[b].data(), n * 4);
    std::memcpy(ex->i32(m.targets.id()), tgt[b].data(), n * 4);
    ex->train_step(adam.get());
    b = (b + 1) % kDistinctBatches;
  }
};

void BM_TrainStep(benchmark::State& state, std::string task, int threads, int64_t batch) {
  StepRunner run(task, threads, batch);
  Executor& ex = *run.ex;
  const Model& m = run.m;
  const int64_t steps0 = ex.training_steps(), parallel0 = ex.parallel_training_steps();
  for (auto _ : state) {
    run.step();
    benchmark::DoNotOptimize(ex.f32(m.loss.id())[0]);
  }
  const float loss = ex.f32(m.loss.id())[0];
  state.SetItemsProcessed(state.iterations());
  state.counters["steps/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["batch"] = static_cast<double>(batch);
  state.counters["threads"] = threads;
  // Share of the timed steps the (adaptive) executor ran on more than one thread.
  const int64_t timed = ex.training_steps() - steps0;
  state.counters["parallel_share"] =
      timed > 0 ? static_cast<double>(ex.parallel_training_steps() - parallel0) / timed : 0.0;
  state.counters["loss"] = loss;
  std::ostringstream label;
  label << task << " batch " << batch << " threads " << threads;
  state.SetLabel(label.str());
}

using bench::parse_int_list;
using bench::parse_switch;
using bench::split;
using bench::take_flag;

// A 0/1 flag given something else: a usage error (exit 2).
int bad_switch(const char* flag, const std::string& value) {
  std::fprintf(stderr, "bench_train_step: %s must be 0 or 1, got '%s'\n", flag, value.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<char*> original_argv(argv, argv + argc + 1);  // take_flag removes flags
  if (!attnkit::bench::apply_simd_target("bench_train_step")) return 2;
  int64_t batch_override = 0;
  std::vector<std::string> models = {"neighbor-sum", "duplicates", "reversal", "reversal-large"};
  std::vector<int> thread_counts = {1, 2};
  int profile_steps = 0;
  for (int i = 1; i < argc;) {
    std::string v;
    if (take_flag(argc, argv, i, "--batch", &v)) {
      batch_override = std::atoll(v.c_str());
      if (batch_override <= 0) {
        std::fprintf(stderr, "bench_train_step: --batch must be a positive integer\n");
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--adaptive", &v)) {
      if (!parse_switch(v, &g_adaptive)) return bad_switch("--adaptive", v);
    } else if (take_flag(argc, argv, i, "--fold", &v)) {
      if (!parse_switch(v, &g_fold)) return bad_switch("--fold", v);
    } else if (take_flag(argc, argv, i, "--precision", &v)) {
      try {
        g_precision = parse_precision(v);
      } catch (const Error& e) {
        std::fprintf(stderr, "bench_train_step: --precision: %s\n", e.what());
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--gemm", &v)) {
      if (v != "attnkit" && v != "openblas") {
        std::fprintf(stderr, "bench_train_step: --gemm must be attnkit or openblas, got '%s'\n", v.c_str());
        return 2;
      }
      try {
        set_gemm_backend(v == "openblas" ? GemmBackend::kOpenBLAS : GemmBackend::kAttnkit);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train_step: --gemm %s: %s\n", v.c_str(), e.what());
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--train-chunk", &v)) {
      char* end = nullptr;
      g_train_chunk = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || g_train_chunk < -1) {
        std::fprintf(stderr, "bench_train_step: --train-chunk must be -1, 0 or a positive number of batch entries, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--shards", &v)) {
      char* end = nullptr;
      const long shards = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || shards < 0 || shards > ExecutorOptions::kMaxTrainShards) {
        std::fprintf(stderr, "bench_train_step: --shards must be 0 (off) to %d, got '%s'\n",
                     ExecutorOptions::kMaxTrainShards, v.c_str());
        return 2;
      }
      g_shards = static_cast<int>(shards);
    } else if (take_flag(argc, argv, i, "--pack-cache", &v)) {
      bool on = true;
      if (!parse_switch(v, &on)) return bad_switch("--pack-cache", v);
      set_bf16_pack_cache(on);
    } else if (take_flag(argc, argv, i, "--fuse", &v)) {
      if (!parse_switch(v, &g_fuse)) return bad_switch("--fuse", v);
    } else if (take_flag(argc, argv, i, "--index-values", &v)) {
      if (!parse_switch(v, &g_index_values)) return bad_switch("--index-values", v);
    } else if (take_flag(argc, argv, i, "--profile", &v)) {
      profile_steps = std::atoi(v.c_str());
      if (profile_steps <= 0) {
        std::fprintf(stderr, "bench_train_step: --profile must be a positive number of steps\n");
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--models", &v)) {
      models = split(v);
    } else if (take_flag(argc, argv, i, "--threads", &v)) {
      if (!parse_int_list(v, 1, 256, &thread_counts)) {
        std::fprintf(stderr, "bench_train_step: --threads must be a comma-separated list of counts in [1, 256], got '%s'\n",
                     v.c_str());
        return 2;
      }
    } else {
      ++i;
    }
  }
  // Idle OpenMP workers sleep between runs, as in the attnkit program (see tools/program_env.h).
  // Not huge pages: steady-state steps take no page faults, and the figures stay comparable
  // with those measured before the program asked for them.
  if (!thread_counts.empty())
    prefer_program_environment(*std::max_element(thread_counts.begin(), thread_counts.end()),
                               original_argv.data(), /*hugepages=*/false);
  for (const auto& task : models) {
    try {
      (void)lesson_config(base_task(task));
      if (from_primitives(task) && base_task(task) != "neighbor-sum")
        throw Error("the -003 variant (lesson 003's attention from primitives) exists for neighbor-sum");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_train_step: %s\n", e.what());
      return 2;
    }
    const int64_t batch = batch_override > 0 ? batch_override : lesson_batch(base_task(task));
    for (int threads : thread_counts) {
      if (profile_steps > 0) {  // per-node times instead of benchmarks
        StepRunner run(task, threads, batch);
        run.ex->set_profiling(true);
        run.step();  // the first step's one-time work stays out of the product times
        reset_gemm_timing();
        set_gemm_timing(true);
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < profile_steps; ++k) run.step();
        const double step_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / profile_steps;
        set_gemm_timing(false);
        const GemmTiming products = gemm_timing();
        std::printf("== %s, batch %lld (%s), %d thread(s), SIMD target %s, products on %s, %zu nodes, %lld barriers "
                    "per step: ",
                    task.c_str(), static_cast<long long>(batch),
                    (run.ex->train_shards() > 0
                         ? "in " + std::to_string(run.ex->train_shards()) + " shards (no barriers inside a shard)"
                     : run.ex->chunk_rows() > 0 ? "in chunks of " + std::to_string(run.ex->chunk_rows())
                                                : std::string("whole"))
                        .append(", arena " + std::to_string(run.ex->plan().arena_bytes) + " bytes")
                        .c_str(),
                    threads, simd_target_name(), products_name(), run.m.graph->nodes().size(),
                    static_cast<long long>(run.ex->barriers_per_step()));
        std::fputs(run.ex->profile_report(1000).c_str(), stdout);
        std::printf("products: %.3f ms per step (summed over threads) in %.0f calls; the step %.3f ms (with "
                    "per-node timing on)\n",
                    static_cast<double>(products.ns) / 1e6 / profile_steps,
                    static_cast<double>(products.calls) / profile_steps, step_ms);
        continue;
      }
      const std::string name = "BM_TrainStep/" + task + "/threads:" + std::to_string(threads) +
                               "/batch:" + std::to_string(batch) +
                               (g_precision == Precision::kBf16 ? "/precision:bf16" : "") +
                               (gemm_backend() == GemmBackend::kOpenBLAS ? "/gemm:openblas" : "");
      benchmark::RegisterBenchmark(name.c_str(), BM_TrainStep, task, threads, batch)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  if (profile_steps > 0) return 0;
  benchmark::AddCustomContext("precision", precision_name(g_precision));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

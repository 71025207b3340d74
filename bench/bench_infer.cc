// Inference speed of the lesson models: single-sequence latency (batch 1) and throughput
// (batches of 500 and 10 000 sequences), forward-only graphs optimized for inference
// (Graph::optimize_for_inference), at 1 and 2 threads.
//
//   bench_infer [--models=neighbor-sum,duplicates,reversal,reversal-large] [--batches=1,500,10000]
//               [--threads=1,2] [--adaptive=0|1] [--profile=CALLS] [Google Benchmark flags]
//
// Counters: seqs/s (sequences per second), time/call (the time of one forward call, printed
// with its unit: "4.23us", "1.18ms"; seconds in the JSON output), arena_MB, chunk_rows (the
// sequences of one chunk, each thread taking whole chunks: the batch itself when it fits one;
// 0 for a graph that cannot run in chunks, its threads sharing each node) and parallel (the
// share of calls the executor ran on more than one thread: with adaptive thread use, the
// default, it runs on one where its probes found more threads slower; --adaptive=0 makes
// every call take all of them). The parameters
// are random (the checkpoint's values do not change the time); bench/compare_pytorch.py
// --infer runs PyTorch's torch.inference_mode() on the same models and shapes beside it.
// --profile=CALLS runs that many forward calls of each (model, batch, threads) with the
// executor's per-node timing on and prints the slowest nodes instead of benchmarking.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../models/lessons.h"
#include "../models/trainer.h"
#include "bench_flags.h"
#include "simd_context.h"

namespace {

using namespace attnkit;

using bench::parse_int_list;
using bench::split;
using bench::take_flag;

bool g_adaptive = true;  // --adaptive

// One model's inference graph at one batch, fed random tokens.
struct InferRunner {
  ModelConfig c;
  ModelRunner runner;
  std::vector<int32_t> ids;
  InferRunner(const std::string& task, int threads, int64_t batch)
      : c(lesson_config(task)), runner(c, batch, threads, 1, /*with_backward=*/false) {
    runner.executor().set_adaptive_threads(g_adaptive);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab - 1));
    ids.resize(static_cast<size_t>(batch * c.seq_len));
    for (auto& x : ids) x = tok(rng);
    Executor& ex = runner.executor();
    ex.set_batch(batch);
    std::fill(ex.i32(runner.model().targets.id()), ex.i32(runner.model().targets.id()) + batch * c.seq_len, -1);
  }
  void call() {
    Executor& ex = runner.executor();
    std::memcpy(ex.i32(runner.model().ids.id()), ids.data(), ids.size() * 4);
    ex.forward();
    benchmark::DoNotOptimize(ex.f32(runner.model().logits.id())[0]);
  }
};

void BM_Infer(benchmark::State& state, std::string task, int threads, int64_t batch) {
  InferRunner r(task, threads, batch);
  Executor& ex = r.runner.executor();
  for (int i = 0; i < 3; ++i) r.call();  // threads start, memory is touched
  int64_t parallel = 0;
  for (auto _ : state) {
    parallel += ex.threads_in_use() > 1;
    r.call();
  }
  const double calls = static_cast<double>(state.iterations());
  state.counters["parallel"] = static_cast<double>(parallel) / calls;
  state.counters["seqs/s"] = benchmark::Counter(calls * static_cast<double>(batch), benchmark::Counter::kIsRate);
  // seconds / calls, printed as a time ("4.23us"): the rate formatting of an inverted rate.
  state.counters["time/call"] = benchmark::Counter(calls, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["arena_MB"] = static_cast<double>(ex.plan().arena_bytes) / 1e6;
  state.counters["chunk_rows"] = static_cast<double>(ex.chunk_rows());  // the batch itself when it fits one chunk
  state.SetLabel(task + " batch " + std::to_string(batch) + " threads " + std::to_string(threads));
}

}  // namespace

int main(int argc, char** argv) {
  if (!attnkit::bench::apply_simd_target("bench_infer")) return 2;
  std::vector<std::string> models = {"neighbor-sum", "duplicates", "reversal", "reversal-large"};
  std::vector<int64_t> batches = {1, 500, 10000};
  std::vector<int> threads = {1, 2};
  int profile_calls = 0;
  for (int i = 1; i < argc;) {
    std::string v;
    if (take_flag(argc, argv, i, "--profile", &v)) {
      profile_calls = std::atoi(v.c_str());
      if (profile_calls <= 0) {
        std::fprintf(stderr, "bench_infer: --profile must be a positive number of calls\n");
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--adaptive", &v)) {
      if (!bench::parse_switch(v, &g_adaptive)) {
        std::fprintf(stderr, "bench_infer: --adaptive must be 0 or 1, got '%s'\n", v.c_str());
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--models", &v)) {
      models = split(v);
    } else if (take_flag(argc, argv, i, "--batches", &v)) {
      if (!parse_int_list(v, 1, 100000, &batches)) {
        std::fprintf(stderr, "bench_infer: --batches must be a comma-separated list of sizes in [1, 100000], got '%s'\n",
                     v.c_str());
        return 2;
      }
    } else if (take_flag(argc, argv, i, "--threads", &v)) {
      if (!parse_int_list(v, 1, 256, &threads)) {
        std::fprintf(stderr, "bench_infer: --threads must be a comma-separated list of counts in [1, 256], got '%s'\n",
                     v.c_str());
        return 2;
      }
    } else {
      ++i;
    }
  }
  for (const auto& task : models) {
    try {
      (void)lesson_config(task);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_infer: --models: %s\n", e.what());
      return 2;
    }
  }
  for (const auto& task : models)
    for (int64_t batch : batches) {
      if (task == "reversal-large" && batch > 500) continue;  // 1.3 GB of maps at 10 000
      for (int t : threads) {
        if (profile_calls > 0) {  // per-node times instead of benchmarks
          InferRunner r(task, t, batch);
          for (int k = 0; k < 3; ++k) r.call();
          Executor& ex = r.runner.executor();
          ex.set_profiling(true);
          for (int k = 0; k < profile_calls; ++k) r.call();
          std::printf("== %s, batch %lld, %d thread(s), SIMD target %s, %zu nodes, arena %.2f MB: ", task.c_str(),
                      static_cast<long long>(batch), t, simd_target_name(), r.runner.model().graph->nodes().size(),
                      static_cast<double>(ex.plan().arena_bytes) / 1e6);
          std::fputs(ex.profile_report(1000).c_str(), stdout);
          continue;
        }
        const std::string name = "BM_Infer/" + task + "/batch:" + std::to_string(batch) + "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(), BM_Infer, task, t, batch)->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  if (profile_calls > 0) return 0;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Inference speed of the lesson models: single-sequence latency (batch 1) and throughput
// (batches of 500 and 10 000 sequences), forward-only graphs optimized for inference
// (Graph::optimize_for_inference), at 1 and 2 threads.
//
//   bench_infer [--models=neighbor-sum,duplicates,reversal,reversal-large] [--batches=1,500,10000]
//               [--threads=1,2] [Google Benchmark flags]
//
// Counters: seqs/s (sequences per second) and us/call. The parameters are random (the
// checkpoint's values do not change the time); bench/compare_pytorch.py --infer runs PyTorch's
// torch.inference_mode() on the same models and shapes beside it.
#include <benchmark/benchmark.h>

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

using bench::split;
using bench::take_flag;

void BM_Infer(benchmark::State& state, std::string task, int threads, int64_t batch) {
  const ModelConfig c = lesson_config(task);
  ModelRunner runner(c, batch, threads, 1, /*with_backward=*/false);
  Executor& ex = runner.executor();
  const Model& m = runner.model();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(batch * c.seq_len));
  for (auto& x : ids) x = tok(rng);
  ex.set_batch(batch);
  std::fill(ex.i32(m.targets.id()), ex.i32(m.targets.id()) + batch * c.seq_len, -1);
  auto call = [&] {
    std::memcpy(ex.i32(m.ids.id()), ids.data(), ids.size() * 4);
    ex.forward();
    benchmark::DoNotOptimize(ex.f32(m.logits.id())[0]);
  };
  for (int i = 0; i < 3; ++i) call();  // threads start, memory is touched
  for (auto _ : state) call();
  const double calls = static_cast<double>(state.iterations());
  state.counters["seqs/s"] = benchmark::Counter(calls * static_cast<double>(batch), benchmark::Counter::kIsRate);
  state.counters["us/call"] =
      benchmark::Counter(calls * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["arena_MB"] = static_cast<double>(ex.plan().arena_bytes) / 1e6;
  state.SetLabel(task + " batch " + std::to_string(batch) + " threads " + std::to_string(threads));
}

}  // namespace

int main(int argc, char** argv) {
  if (!attnkit::bench::apply_simd_target("bench_infer")) return 2;
  std::vector<std::string> models = {"neighbor-sum", "duplicates", "reversal", "reversal-large"};
  std::vector<int64_t> batches = {1, 500, 10000};
  std::vector<int> threads = {1, 2};
  for (int i = 1; i < argc;) {
    std::string v;
    if (take_flag(argc, argv, i, "--models", &v)) {
      models = split(v);
    } else if (take_flag(argc, argv, i, "--batches", &v)) {
      batches.clear();
      for (const auto& b : split(v)) batches.push_back(std::stoll(b));
    } else if (take_flag(argc, argv, i, "--threads", &v)) {
      threads.clear();
      for (const auto& t : split(v)) threads.push_back(std::stoi(t));
    } else {
      ++i;
    }
  }
  for (const auto& task : models)
    for (int64_t batch : batches) {
      if (task == "reversal-large" && batch > 500) continue;  // 1.3 GB of maps at 10 000
      for (int t : threads) {
        const std::string name = "BM_Infer/" + task + "/batch:" + std::to_string(batch) + "/threads:" + std::to_string(t);
        benchmark::RegisterBenchmark(name.c_str(), BM_Infer, task, t, batch)->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

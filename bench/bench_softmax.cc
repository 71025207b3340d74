// Row softmax: attnkit's Highway kernel against a plain scalar std::exp loop, side by side.
//   bench_softmax --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/cross_entropy.h"
#include "ops/softmax.h"
#include "simd_context.h"

namespace {

// Row count per iteration: rows of 10 as in attention over 10 tokens with batch 128 and 2
// heads (128·2·10 rows); longer rows about 256K scores per iteration.
int64_t rows_for(int64_t tk) { return tk <= 16 ? 128 * 2 * tk : std::max<int64_t>(1, (1 << 18) / tk); }

struct Scores {
  int64_t batch, heads, tq, tk;
  std::vector<float> x, y;
  std::vector<uint8_t> padding;  // [batch, tq, tk], non-zero = forbidden
  Scores(int64_t tk, bool attention_shape) : batch(0), heads(2), tq(0), tk(tk) {
    const int64_t rows = rows_for(tk);
    tq = attention_shape ? tk : 1;
    batch = rows / (heads * tq);
    const int64_t n = batch * heads * tq * tk;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-4, 4);
    x.resize(n);
    for (auto& v : x) v = u(rng);
    y.resize(n);
    padding.assign(batch * tq * tk, 0);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = 1 + int64_t(rng() % tk);
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t j = len; j < tk; ++j) padding[(b * tq + i) * tk + j] = 1;
    }
  }
  int64_t groups() const { return batch * heads; }
  int64_t size() const { return int64_t(x.size()); }
};

// The plain loop: scale (and mask), max, exp, sum, divide.
void scalar_softmax(const float* x, float* y, int64_t rows, int64_t tk, float scale,
                    const uint8_t* forbidden_of_row(int64_t r, const void*), const void* ctx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * tk;
    float* yr = y + r * tk;
    const uint8_t* forbidden = forbidden_of_row ? forbidden_of_row(r, ctx) : nullptr;
    float mx = -HUGE_VALF;
    for (int64_t j = 0; j < tk; ++j) {
      yr[j] = forbidden && forbidden[j] ? -1e9f : xr[j] * scale;
      mx = std::max(mx, yr[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < tk; ++j) sum += (yr[j] = std::exp(yr[j] - mx));
    for (int64_t j = 0; j < tk; ++j) yr[j] /= sum;
  }
}

constexpr float kScale = 0.25f;

void BM_softmax_attnkit(benchmark::State& state) {
  Scores s(state.range(0), false);
  for (auto _ : state) {
    attnkit::softmax_forward(s.x.data(), s.y.data(), s.groups(), s.tq, s.tk, kScale, {});
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * s.size());
}

void BM_softmax_scalar(benchmark::State& state) {
  Scores s(state.range(0), false);
  for (auto _ : state) {
    scalar_softmax(s.x.data(), s.y.data(), s.groups() * s.tq, s.tk, kScale, nullptr, nullptr);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * s.size());
}

// Padding mask [batch, tq, tk] shared by the heads, plus causal, as in decoder attention.
void BM_softmax_masked_causal_attnkit(benchmark::State& state) {
  Scores s(state.range(0), true);
  attnkit::SoftmaxMask mask;
  mask.data = s.padding.data();
  mask.group_div = s.heads;
  mask.causal = true;
  for (auto _ : state) {
    attnkit::softmax_forward(s.x.data(), s.y.data(), s.groups(), s.tq, s.tk, kScale, mask);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * s.size());
}

void BM_softmax_masked_causal_scalar(benchmark::State& state) {
  Scores s(state.range(0), true);
  // The scalar loop reads a combined padding+causal mask, built once outside the timing.
  std::vector<uint8_t> combined(s.groups() * s.tq * s.tk);
  for (int64_t g = 0; g < s.groups(); ++g)
    for (int64_t i = 0; i < s.tq; ++i)
      for (int64_t j = 0; j < s.tk; ++j)
        combined[(g * s.tq + i) * s.tk + j] =
            j > i || s.padding[((g / s.heads) * s.tq + i) * s.tk + j] != 0;
  struct Ctx { const uint8_t* m; int64_t tk; } ctx{combined.data(), s.tk};
  auto row = [](int64_t r, const void* c) {
    auto* cx = static_cast<const Ctx*>(c);
    return cx->m + r * cx->tk;
  };
  for (auto _ : state) {
    scalar_softmax(s.x.data(), s.y.data(), s.groups() * s.tq, s.tk, kScale, row, &ctx);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * s.size());
}

// Inputs of a softmax backward: the forward's output with the padding + causal mask
// (masked = true) or none, dy, and room for dx.
struct BackwardInputs {
  Scores s;
  attnkit::SoftmaxMask mask;
  std::vector<float> dy, dx;
  BackwardInputs(int64_t tk, bool masked) : s(tk, true) {
    if (masked) {
      mask.data = s.padding.data();
      mask.group_div = s.heads;
      mask.causal = true;
    }
    attnkit::softmax_forward(s.x.data(), s.y.data(), s.groups(), s.tq, s.tk, kScale, mask);
    dy = s.x;
    dx.resize(s.x.size());
  }
};

// Backward (dx = scale·y⊙(dy − Σ dy⊙y), 0 at forbidden scores), with the padding + causal
// mask (range(1) = 1) or none, given the forward's output.
void BM_softmax_backward_attnkit(benchmark::State& state) {
  BackwardInputs in(state.range(0), state.range(1) != 0);
  const Scores& s = in.s;
  for (auto _ : state) {
    attnkit::softmax_backward(s.y.data(), in.dy.data(), in.dx.data(), s.groups(), s.tq, s.tk,
                              kScale, in.mask, false);
    benchmark::DoNotOptimize(in.dx.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * s.size());
}

// The plain loop of the same backward (the mask is seen through y, which is 0 there).
void BM_softmax_backward_scalar(benchmark::State& state) {
  BackwardInputs in(state.range(0), state.range(1) != 0);
  const Scores& s = in.s;
  const int64_t rows = s.groups() * s.tq, tk = s.tk;
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* y = s.y.data() + r * tk;
      const float* g = in.dy.data() + r * tk;
      float dot = 0;
      for (int64_t j = 0; j < tk; ++j) dot += y[j] * g[j];
      for (int64_t j = 0; j < tk; ++j) in.dx[r * tk + j] = kScale * y[j] * (g[j] - dot);
    }
    benchmark::DoNotOptimize(in.dx.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * s.size());
}

// Cross-entropy over the logits of a lesson step (640 rows = batch 64 × T 10) with `classes`
// classes: the forward (loss per row and the probabilities), then the backward from them, or
// (accumulate = 2) the backward from the logits, added to the gradient.
void BM_cross_entropy(benchmark::State& state) {
  const int64_t rows = 640, classes = state.range(0), mode = state.range(1);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-4, 4);
  std::vector<float> logits(static_cast<size_t>(rows * classes)), probs(logits.size()), grad(logits.size());
  for (auto& v : logits) v = u(rng);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (auto& t : targets) t = static_cast<int32_t>(rng() % classes);
  std::vector<float> loss(static_cast<size_t>(rows));
  for (auto _ : state) {
    if (mode == 2) {
      attnkit::cross_entropy_backward(logits.data(), targets.data(), grad.data(), rows, classes, 1.0f / rows, true,
                                      attnkit::Slice{});
    } else {
      attnkit::cross_entropy_forward(logits.data(), targets.data(), loss.data(), rows, classes, attnkit::Slice{},
                                     probs.data());
      attnkit::cross_entropy_backward_from_probs(probs.data(), targets.data(), grad.data(), rows, classes,
                                                 1.0f / rows, false, attnkit::Slice{});
    }
    benchmark::DoNotOptimize(grad.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows * classes);
}

}  // namespace

BENCHMARK(BM_cross_entropy)->Args({2, 0})->Args({10, 0})->Args({24, 0})->Args({33, 0})->Args({64, 0})->Args({10, 2})->Args({64, 2});
BENCHMARK(BM_softmax_attnkit)->Arg(8)->Arg(10)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_softmax_scalar)->Arg(8)->Arg(10)->Arg(64)->Arg(1024)->Arg(4096);
BENCHMARK(BM_softmax_masked_causal_attnkit)->Arg(8)->Arg(10);
BENCHMARK(BM_softmax_masked_causal_scalar)->Arg(8)->Arg(10);
BENCHMARK(BM_softmax_backward_attnkit)->Args({8, 0})->Args({10, 0})->Args({8, 1})->Args({10, 1});
BENCHMARK(BM_softmax_backward_scalar)->Args({8, 0})->Args({10, 0})->Args({8, 1})->Args({10, 1});

int main(int argc, char** argv) {
  if (!attnkit::bench::apply_simd_target("bench_softmax")) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// attnkit sgemm vs OpenBLAS cblas_sgemm (vs a naive loop for small sizes), GFLOP/s.
// Benchmarks of one shape and thread count run side by side, e.g.
//   bench_gemm --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//              --benchmark_min_time=0.2 --benchmark_filter='/1t'
#include <benchmark/benchmark.h>
#include <cblas.h>  // the openblas-pthread one: declares openblas_set_num_threads
#include <omp.h>

#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "simd_context.h"

namespace {

// Operands on 64-byte boundaries, where the engine's planner puts every tensor of its arena
// (engine/arena.h): a std::vector of a few hundred KB comes from mmap 16 bytes past a page
// boundary, and every vector load of it would then straddle two cache lines.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <class U>
  bool operator==(const Aligned64<U>&) const { return true; }
  template <class U>
  bool operator!=(const Aligned64<U>&) const { return false; }
};
using FloatVec = std::vector<float, Aligned64<float>>;

struct Operands {
  FloatVec a, b, c;
  Operands(int64_t a_size, int64_t b_size, int64_t c_size)
      : a(static_cast<size_t>(a_size)), b(static_cast<size_t>(b_size)),
        c(static_cast<size_t>(c_size)) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : a) x = u(rng);
    for (auto& x : b) x = u(rng);
    for (auto& x : c) x = u(rng);
  }
};

void set_threads(int threads) {
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

void report(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOPS"] = benchmark::Counter(
      flops_per_iteration * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

enum class Impl { kAttnkit, kOpenBLAS, kNaive, kBf16 };

// C (m×n) = A (m×k) · B (k×n), all row-major without transposes.
void BM_gemm(benchmark::State& state, Impl impl, int64_t m, int64_t k, int64_t n, int threads) {
  set_threads(threads);
  Operands x(m * k, k * n, m * n);
  for (auto _ : state) {
    switch (impl) {
      case Impl::kAttnkit:
        attnkit::sgemm(false, false, m, n, k, 1.0f, x.a.data(), k, x.b.data(), n, 0.0f,
                       x.c.data(), n);
        break;
      case Impl::kBf16:
        attnkit::bf16_gemm(false, false, m, n, k, 1.0f, x.a.data(), k, x.b.data(), n, 0.0f,
                           x.c.data(), n);
        break;
      case Impl::kOpenBLAS:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(n), static_cast<int>(k), 1.0f, x.a.data(),
                    static_cast<int>(k), x.b.data(), static_cast<int>(n), 0.0f, x.c.data(),
                    static_cast<int>(n));
        break;
      case Impl::kNaive:
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            float sum = 0;
            for (int64_t kk = 0; kk < k; ++kk) sum += x.a[i * k + kk] * x.b[kk * n + j];
            x.c[i * n + j] = sum;
          }
        break;
    }
    benchmark::DoNotOptimize(x.c.data());
    benchmark::ClobberMemory();
  }
  report(state, 2.0 * m * n * k);
}

// `count` independent tiny products C_i = op(A_i)·op(B_i) (the attention matmuls).
void BM_batched(benchmark::State& state, bool use_openblas, bool trans_a, bool trans_b,
                int64_t m, int64_t k, int64_t n, int64_t count, int threads) {
  set_threads(threads);
  Operands x(count * m * k, count * k * n, count * m * n);
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  for (auto _ : state) {
    if (use_openblas) {
      for (int64_t i = 0; i < count; ++i)
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(n), static_cast<int>(k), 1.0f, x.a.data() + i * m * k,
                    static_cast<int>(lda), x.b.data() + i * k * n, static_cast<int>(ldb), 0.0f,
                    x.c.data() + i * m * n, static_cast<int>(n));
    } else {
      attnkit::sgemm_strided_batched(trans_a, trans_b, m, n, k, 1.0f, x.a.data(), lda, m * k,
                                     x.b.data(), ldb, k * n, 0.0f, x.c.data(), n, m * n, count);
    }
    benchmark::DoNotOptimize(x.c.data());
    benchmark::ClobberMemory();
  }
  report(state, 2.0 * m * n * k * count);
}

// One GEMM call of a lesson model's training step, exactly as the engine makes it (1 thread,
// sgemm_slice on the whole product): Linear forward x·W (nn), dx = dy·Wᵀ (nt), dW = xᵀ·dy
// (tn), and the attention products over interleaved heads ([B, T, H·dh] activations, one call
// per (batch, head) product).
struct StepGemm {
  std::string name;
  bool ta, tb;
  int64_t m, k, n;
  float beta;
  bool bias = false;  // a Linear's forward: + bias in the store (OpenBLAS: a loop after it)
  // A Linear–ReLU's dx (the Linear's input is a ReLU's output x): dx where x > 0, else 0 — in
  // the store (GemmEpilogue::mask, as the engine runs it), for OpenBLAS a pass after the product.
  bool mask = false;
  // Attention: `count` products; A/B/C of product p = (b, h) at b·x_batch + h·x_head.
  int64_t heads = 1, count = 1, lda = 0, ldb = 0, ldc = 0;
  int64_t a_batch = 0, a_head = 0, b_batch = 0, b_head = 0, c_batch = 0, c_head = 0;
};

// A step product's leading dimensions: as given, or its operands' row lengths.
struct Leading {
  int64_t lda, ldb, ldc;
  explicit Leading(const StepGemm& s)
      : lda(s.lda ? s.lda : (s.ta ? s.m : s.k)), ldb(s.ldb ? s.ldb : (s.tb ? s.k : s.n)), ldc(s.ldc ? s.ldc : s.n) {}
};

// The operands of one step product, sized by its leading dimensions and batch strides.
Operands operands_for(const StepGemm& s) {
  const auto [lda, ldb, ldc] = Leading(s);
  const int64_t batches = s.count / s.heads;
  const int64_t a_size = s.count == 1 ? (s.ta ? s.k : s.m) * lda : batches * s.a_batch;
  const int64_t b_size = s.count == 1 ? (s.tb ? s.n : s.k) * ldb : batches * s.b_batch;
  const int64_t c_size = s.count == 1 ? s.m * ldc : batches * s.c_batch;
  return Operands(a_size, b_size, c_size);
}

// One step product on the calling thread, the engine's way (attnkit) or one cblas_sgemm per
// product plus a bias loop or a mask pass (OpenBLAS).
void run_one_thread(Impl impl, const StepGemm& s, Operands& x, const FloatVec& bias, const FloatVec& mask) {
  const bool use_openblas = impl == Impl::kOpenBLAS;
  attnkit::Slice one;
  one.bf16 = impl == Impl::kBf16;
  const auto [lda, ldb, ldc] = Leading(s);
  for (int64_t p = 0; p < s.count; ++p) {
    const int64_t bi = p / s.heads, hi = p % s.heads;
    const float* a = x.a.data() + bi * s.a_batch + hi * s.a_head;
    const float* b = x.b.data() + bi * s.b_batch + hi * s.b_head;
    float* c = x.c.data() + bi * s.c_batch + hi * s.c_head;
    if (use_openblas) {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans,
                  s.tb ? CblasTrans : CblasNoTrans, static_cast<int>(s.m),
                  static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a, static_cast<int>(lda),
                  b, static_cast<int>(ldb), s.beta, c, static_cast<int>(ldc));
      if (s.bias)
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) c[i * ldc + j] += bias[static_cast<size_t>(j)];
      if (s.mask) {  // the separate pass an engine without the fused store runs (vectorized)
        if (ldc == s.n) {
          attnkit::relu_backward(mask.data(), c, c, s.m * s.n, false);
        } else {
          for (int64_t i = 0; i < s.m; ++i)
            attnkit::relu_backward(mask.data() + i * ldc, c + i * ldc, c + i * ldc, s.n, false);
        }
      }
    } else if (s.mask) {
      attnkit::GemmEpilogue e;
      e.mask = mask.data();
      e.ldm = ldc;
      attnkit::sgemm_epilogue_slice(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, s.beta, c, ldc, e, one);
    } else if (s.bias) {
      attnkit::GemmEpilogue e;
      e.bias = bias.data();
      attnkit::sgemm_epilogue_slice(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, s.beta, c, ldc, e, one);
    } else {
      attnkit::sgemm_slice(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a, lda, b, ldb, s.beta, c, ldc, one);
    }
  }
}

// threads > 1: attnkit runs sgemm's own parallel region (one product) or the engine's way, a
// parallel region over sgemm_batched_slice (attention); OpenBLAS its own threads per call.
// impl kBf16: attnkit's products in mixed precision, through the same calls with the engine's
// Slice::bf16 set (bf16_gemm for one product on several threads).
void BM_step(benchmark::State& state, Impl impl, StepGemm s, int threads) {
  set_threads(threads);
  const bool use_openblas = impl == Impl::kOpenBLAS, bf16 = impl == Impl::kBf16;
  const auto [lda, ldb, ldc] = Leading(s);
  const int64_t batches = s.count / s.heads;
  Operands x = operands_for(s);
  const FloatVec bias(static_cast<size_t>(s.n), 0.25f);
  // A ReLU's output: about half of it zero, in no pattern a branch predictor learns.
  FloatVec mask(s.mask ? static_cast<size_t>(s.m * ldc) : 0);
  uint32_t state_bits = 12345;
  for (float& v : mask) {
    state_bits = state_bits * 1664525u + 1013904223u;
    v = (state_bits >> 31) ? 0.5f : 0.0f;
  }
  for (auto _ : state) {
    if (threads > 1 && !use_openblas) {
      if (s.count == 1 && bf16) {
        attnkit::bf16_gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, x.a.data(), lda, x.b.data(), ldb, s.beta,
                           x.c.data(), ldc);
      } else if (s.count == 1) {
        attnkit::sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, x.a.data(), lda, x.b.data(), ldb, s.beta,
                       x.c.data(), ldc);
      } else {
        const attnkit::GemmBatch batch{batches,  s.heads,   s.a_batch, s.a_head,
                                       s.b_batch, s.b_head, s.c_batch, s.c_head};
#pragma omp parallel
        attnkit::sgemm_batched_slice(s.ta, s.tb, s.m, s.n, s.k, 1.0f, x.a.data(), lda,
                                     x.b.data(), ldb, s.beta, x.c.data(), ldc, batch,
                                     attnkit::Slice{omp_get_thread_num(), omp_get_num_threads(), nullptr, bf16});
      }
      benchmark::DoNotOptimize(x.c.data());
      benchmark::ClobberMemory();
      continue;
    }
    run_one_thread(impl, s, x, bias, mask);
    benchmark::DoNotOptimize(x.c.data());
    benchmark::ClobberMemory();
  }
  report(state, 2.0 * s.m * s.n * s.k * s.count);
}

// The products of one training step of the lesson models (see bench_train_step.cc), e.g.
//   bench_gemm --benchmark_filter='^(attnkit|openblas)/step_'
std::vector<StepGemm> step_gemms() {
  std::vector<StepGemm> out;
  // Linear(in → out) over `rows` rows: forward, dx (beta 1), dW; relu_input: its input is a
  // ReLU's output, and the lesson's dx (beta 0) carries the ReLU's backward mask too.
  auto linear = [&](const std::string& model, int64_t rows, int64_t in, int64_t outf, bool relu_input = false) {
    const std::string sh = std::to_string(rows) + "x" + std::to_string(in) + "x" +
                           std::to_string(outf);
    out.push_back({model + "_fwd_nn_" + sh, false, false, rows, in, outf, 0.0f});
    out.push_back({model + "_fwd_bias_nn_" + sh, false, false, rows, in, outf, 0.0f, true});
    out.push_back({model + "_dx_nt_" + sh, false, true, rows, outf, in, 1.0f});
    if (relu_input) {
      StepGemm dx_mask{model + "_dx_mask_nt_" + sh, false, true, rows, outf, in, 0.0f};
      dx_mask.mask = true;
      out.push_back(dx_mask);
    }
    out.push_back({model + "_dW_tn_" + sh, true, false, in, rows, outf, 0.0f});
  };
  // Attention over [B, T, H·dh]: scores (nt), P·V and dS·K (nn), Pᵀ·dY and dSᵀ·Q (tn).
  auto attention = [&](const std::string& model, int64_t B, int64_t T, int64_t H, int64_t dh) {
    const int64_t d = H * dh, tt = T * T;
    const std::string sh = "_b" + std::to_string(B) + "h" + std::to_string(H) + "t" +
                           std::to_string(T) + "d" + std::to_string(dh);
    StepGemm qk{model + "_attn_QKt_nt" + sh, false, true, T, dh, T, 0.0f};
    qk.heads = H, qk.count = B * H, qk.lda = d, qk.ldb = d, qk.ldc = T;
    qk.a_batch = T * d, qk.a_head = dh, qk.b_batch = T * d, qk.b_head = dh;
    qk.c_batch = H * tt, qk.c_head = tt;
    out.push_back(qk);
    StepGemm pv{model + "_attn_PV_nn" + sh, false, false, T, T, dh, 0.0f};
    pv.heads = H, pv.count = B * H, pv.lda = T, pv.ldb = d, pv.ldc = d;
    pv.a_batch = H * tt, pv.a_head = tt, pv.b_batch = T * d, pv.b_head = dh;
    pv.c_batch = T * d, pv.c_head = dh;
    out.push_back(pv);
    StepGemm ptdy = pv;
    ptdy.name = model + "_attn_PtdY_tn" + sh;
    ptdy.ta = true;
    out.push_back(ptdy);
    // The backward's other three: dP = dY·Vᵀ (the scores' shape), and dQ = dS·K, dK = dSᵀ·Q
    // accumulated into gradients that already hold a contribution (beta 1).
    StepGemm dpv = qk;
    dpv.name = model + "_attn_dYVt_nt" + sh;
    out.push_back(dpv);
    StepGemm dsk = pv;
    dsk.name = model + "_attn_dSK_nn_beta1" + sh;
    dsk.beta = 1.0f;
    out.push_back(dsk);
    StepGemm dstq = ptdy;
    dstq.name = model + "_attn_dStQ_tn_beta1" + sh;
    dstq.beta = 1.0f;
    out.push_back(dstq);
  };
  linear("ns", 640, 32, 32);
  linear("ns", 640, 32, 128);
  linear("ns", 640, 128, 10, true);
  attention("ns", 64, 10, 2, 16);
  linear("dup", 640, 32, 64);
  linear("dup", 640, 64, 2, true);
  attention("dup", 64, 10, 1, 32);
  linear("rev", 256, 32, 32);
  linear("rev", 256, 32, 10);
  attention("rev", 32, 8, 1, 32);
  // The compute-bound model: batch 32 × T 128 = 4096 rows, D 256 (4 heads of 64), MLP 1024.
  linear("big", 4096, 256, 256);
  linear("big", 4096, 256, 1024);
  linear("big", 4096, 1024, 256);
  linear("big", 4096, 256, 64);  // the head's first layer
  attention("big", 32, 128, 4, 64);
  return out;
}

// "The large model's products" as one figure: every product of one reversal-large training
// step at one thread, each on its own operands (the step's working set), in the step's
// proportions: per layer (2) the Q, K, V, O Linear(256, 256) and the MLP's Linear(256, 1024)
// and Linear(1024, 256), each forward with bias, dx and dW, and the attention's six batched
// products; once, the head's Linear(256, 64). OpenBLAS does the same list with cblas_sgemm.
void BM_big_step_products(benchmark::State& state, Impl impl, std::vector<StepGemm> products) {
  set_threads(1);
  std::vector<Operands> operands;
  operands.reserve(products.size());
  double flops = 0;
  for (const StepGemm& s : products) {
    operands.push_back(operands_for(s));
    flops += 2.0 * s.m * s.n * s.k * s.count;
  }
  const FloatVec bias(1024, 0.25f), no_mask;  // (the large model's products carry no mask)
  for (auto _ : state) {
    for (size_t i = 0; i < products.size(); ++i) run_one_thread(impl, products[i], operands[i], bias, no_mask);
    benchmark::ClobberMemory();
  }
  report(state, flops);
  state.counters["products"] = static_cast<double>(products.size());
}

std::vector<StepGemm> big_step_products(const std::vector<StepGemm>& all) {
  std::vector<StepGemm> out;
  for (const StepGemm& s : all) {
    if (s.name.rfind("big_", 0) != 0 || s.name.rfind("big_fwd_nn_", 0) == 0) continue;  // forwards: with bias
    int copies = 2;                                                                   // per layer
    if (s.name.find("4096x256x256") != std::string::npos) copies = 8;                 // Q, K, V, O
    if (s.name.find("4096x256x64") != std::string::npos) copies = 1;                  // the head
    for (int i = 0; i < copies; ++i) out.push_back(s);
  }
  return out;
}

void register_all() {
  const std::vector<StepGemm> all = step_gemms();
  for (Impl impl : {Impl::kAttnkit, Impl::kOpenBLAS, Impl::kBf16}) {
    const char* lib = impl == Impl::kAttnkit ? "attnkit" : impl == Impl::kOpenBLAS ? "openblas" : "attnkit_bf16";
    benchmark::RegisterBenchmark((std::string(lib) + "/step_big_all_products/1t").c_str(), BM_big_step_products,
                                 impl, big_step_products(all))
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  for (const StepGemm& s : all) {
    // The big model's products also at 2 threads (the lesson models' are too small to share).
    for (int threads : {1, 2}) {
      if (threads == 2 && (s.name.rfind("big_", 0) != 0 || s.bias)) continue;  // (bias rows: one thread)
      const std::string t = s.name.rfind("big_", 0) == 0 ? "/" + std::to_string(threads) + "t" : "";
      benchmark::RegisterBenchmark(("attnkit/step_" + s.name + t).c_str(), BM_step, Impl::kAttnkit, s,
                                   threads)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("openblas/step_" + s.name + t).c_str(), BM_step, Impl::kOpenBLAS, s,
                                   threads)
          ->UseRealTime();
      // Mixed precision where the engine uses it (the big model's products; the lessons'
      // attention stays on its fused float32 path).
      if (s.name.rfind("big_", 0) == 0)
        benchmark::RegisterBenchmark(("attnkit_bf16/step_" + s.name + t).c_str(), BM_step, Impl::kBf16, s,
                                     threads)
            ->UseRealTime();
    }
  }
  struct Shape {
    int64_t m, k, n;
  };
  std::vector<Shape> shapes;
  for (int64_t s : {64, 128, 256, 512, 1024, 2048}) shapes.push_back({s, s, s});
  for (Shape s : {Shape{640, 32, 96}, Shape{640, 32, 32}, Shape{640, 32, 128},
                  Shape{640, 128, 10}})
    shapes.push_back(s);
  for (int threads : {1, 2}) {
    const std::string t = "/" + std::to_string(threads) + "t";
    for (const Shape& s : shapes) {
      const std::string name = std::to_string(s.m) + "x" + std::to_string(s.k) + "x" +
                               std::to_string(s.n) + t;
      const double work = static_cast<double>(s.m) * s.n * s.k;
      const double min_time = work > 1e9 ? 1.0 : 0.0;  // big squares: a few iterations suffice
      auto* ours = benchmark::RegisterBenchmark(("attnkit/" + name).c_str(), BM_gemm,
                                                Impl::kAttnkit, s.m, s.k, s.n, threads);
      auto* theirs = benchmark::RegisterBenchmark(("openblas/" + name).c_str(), BM_gemm,
                                                  Impl::kOpenBLAS, s.m, s.k, s.n, threads);
      auto* bf16 = benchmark::RegisterBenchmark(("attnkit_bf16/" + name).c_str(), BM_gemm,
                                                Impl::kBf16, s.m, s.k, s.n, threads);
      for (auto* b : {ours, theirs, bf16}) {
        b->UseRealTime();
        if (min_time > 0) b->MinTime(min_time);
      }
      if (threads == 1 && work <= 256.0 * 256 * 256)
        benchmark::RegisterBenchmark(("naive/" + name).c_str(), BM_gemm, Impl::kNaive, s.m, s.k,
                                     s.n, threads)
            ->UseRealTime();
    }
    // Attention matmuls of 128 (batch·head) pairs: S = Q·Kᵀ (10×16·16×10), O = P·V
    // (10×10·10×16), and the backward's dQ-style (P·K) and dV-style (Pᵀ·dO) products.
    struct Tiny {
      const char* name;
      bool ta, tb;
      int64_t m, k, n;
    };
    for (Tiny s : {Tiny{"10x16x10", false, false, 10, 16, 10},
                   Tiny{"10x16x10_QKt", false, true, 10, 16, 10},
                   Tiny{"10x10x16", false, false, 10, 10, 16},
                   Tiny{"10x10x16_PtdO", true, false, 10, 10, 16}}) {
      const std::string name = std::string("batched128_") + s.name + t;
      benchmark::RegisterBenchmark(("attnkit/" + name).c_str(), BM_batched, false, s.ta, s.tb,
                                   s.m, s.k, s.n, 128, threads)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("openblas/" + name).c_str(), BM_batched, true, s.ta, s.tb,
                                   s.m, s.k, s.n, 128, threads)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!attnkit::bench::apply_simd_target("bench_gemm")) return 2;
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

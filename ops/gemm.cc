// sgemm and its batched forms: Highway kernels with runtime dispatch (ops/gemm_kernels-inl.h),
// OpenMP over blocks of C, and an OpenBLAS backend for comparison.
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gemm.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/gemm_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {

// The products of span, each computed whole (block rows [i0, i1), all columns).
void GemmProductsTarget(const gemm_detail::GemmArgs& g, const gemm_detail::ProductSpan& span,
                        int64_t i0, int64_t i1) {
  GemmBlock(g, i0, i1, 0, g.n, span);
}

void GemmBlockTarget(const gemm_detail::GemmArgs& g, int64_t i0, int64_t i1, int64_t j0,
                     int64_t j1) {
  GemmBlock(g, i0, i1, j0, j1);
}

// One whole small product (sgemm_slice's per-call path): the small path's layers inlined into
// one function, whose only calls are to the kernel.
#if ATTNKIT_HAVE_SMALL_GEMM
__attribute__((noinline, flatten)) void GemmSmallWhole(const gemm_detail::GemmArgs& g) {
  GemmSmall(g, 0, g.m, 0, g.n);
}
#endif
// The rest of sgemm_slice's per-call path, out of line: its frame and spills were paid by
// every small call.
HWY_NOINLINE void GemmSmallProductRest(const gemm_detail::GemmArgs& g) {
#if ATTNKIT_HAVE_SMALL_GEMM
  if (ShapePathRows(g, 0, g.m, 0, g.n, gemm_detail::ProductSpan{})) return;
  if (TakesSmallPath(g, 0, g.m, 0, g.n)) {
    GemmSmallWhole(g);
    return;
  }
#endif
  GemmBlock(g, 0, g.m, 0, g.n);
}

void GemmSmallProductTarget(const gemm_detail::GemmArgs& g) {
#if ATTNKIT_HAVE_SMALL_GEMM
  if (SmallOneTileNN(g) || PairOneTileNT(g) || QuadOneTileNT(g) || SmallOneTileNT(g)) return;
#endif
  GemmSmallProductRest(g);
}

void GemmPackedDynamicTarget(const gemm_detail::GemmArgs& g, std::atomic<int64_t>* next,
                             int64_t task_rows) {
  GemmPackedDynamic(g, next, task_rows);
}

void GemmRowsDynamicTarget(const gemm_detail::GemmArgs& g, std::atomic<int64_t>* next,
                           int64_t rows) {
  GemmRowsDynamic(g, next, rows);
}

void EpilogueTarget(const gemm_detail::GemmArgs& g, int64_t i0, int64_t i1, int64_t j0,
                    int64_t j1) {
  Epilogue(g, i0, i1, j0, j1);
}

int64_t CurrentTarget() { return HWY_TARGET; }

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <dlfcn.h>
#include <omp.h>
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "engine/error.h"

namespace attnkit {
HWY_EXPORT(GemmProductsTarget);
HWY_EXPORT(GemmBlockTarget);
HWY_EXPORT(GemmSmallProductTarget);
HWY_EXPORT(GemmPackedDynamicTarget);
HWY_EXPORT(GemmRowsDynamicTarget);
HWY_EXPORT(EpilogueTarget);
HWY_EXPORT(CurrentTarget);

namespace gemm_detail {

float* thread_scratch(int slot, size_t floats) {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  struct Buffers {
    std::unique_ptr<float, Free> data[2];
    size_t capacity[2] = {0, 0};
  };
  thread_local Buffers buffers;
  if (floats > buffers.capacity[slot]) {
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buffers.data[slot].reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!buffers.data[slot]) throw std::bad_alloc();
    buffers.capacity[slot] = bytes / sizeof(float);
  }
  return buffers.data[slot].get();
}

}  // namespace gemm_detail

namespace {
using gemm_detail::GemmArgs;

std::atomic<GemmBackend> g_backend{GemmBackend::kAttnkit};

// OpenBLAS's cblas_sgemm, loaded by load_openblas (the library does not link OpenBLAS: only the
// comparison backend wants it, and a linked OpenBLAS starts its thread pool in every program).
// The enum values are CBLAS's own, fixed by the interface.
using CblasSgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;
std::atomic<CblasSgemm> g_cblas_sgemm{nullptr};
std::mutex g_openblas_mutex;
std::string g_openblas_name;  // the library g_cblas_sgemm came from

// Product timing (see set_gemm_timing): only the outermost product call of a thread counts,
// so that sgemm → sgemm_slice → sgemm_epilogue_slice is timed once.
std::atomic<bool> g_timing{false};
std::atomic<int64_t> g_timed_ns{0}, g_timed_calls{0};
thread_local int t_timing_depth = 0;

class ProductTimer {
 public:
  ProductTimer() {
    if (!g_timing.load(std::memory_order_relaxed)) return;
    counted_ = true;
    if (t_timing_depth++ == 0) start_ = std::chrono::steady_clock::now(), outer_ = true;
  }
  ~ProductTimer() {
    if (!counted_) return;
    --t_timing_depth;
    if (!outer_) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_);
    g_timed_ns.fetch_add(ns.count(), std::memory_order_relaxed);
    g_timed_calls.fetch_add(1, std::memory_order_relaxed);
  }
  ProductTimer(const ProductTimer&) = delete;
  ProductTimer& operator=(const ProductTimer&) = delete;

 private:
  bool counted_ = false, outer_ = false;
  std::chrono::steady_clock::time_point start_;
};

// In a product's own parallel region: each thread's share is part of the product the calling
// thread times, not a product of its own.
struct InsideProduct {
  InsideProduct() { ++t_timing_depth; }
  ~InsideProduct() { --t_timing_depth; }
  InsideProduct(const InsideProduct&) = delete;
  InsideProduct& operator=(const InsideProduct&) = delete;
};

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelWork = int64_t{1} << 18;

// Block of C computed by slice s: rows (grain MR) for tall C or the OpenBLAS backend, columns
// otherwise. Depends only on the shape, so every element's owner is well defined.
struct Block {
  int64_t i0, i1, j0, j1;
};
Block block_of_slice(int64_t m, int64_t n, Slice s, bool rows_only) {
  if (s.count <= 1) return {0, m, 0, n};
  if (rows_only || m >= n) {
    auto [i0, i1] = slice_range_grain(m, gemm_detail::kMR, s);
    return {i0, i1, 0, n};
  }
  auto [j0, j1] = slice_range_grain(n, 16, s);
  return {0, m, j0, j1};
}

// C[i0..i1, j0..j1] = beta·C (+ bias), without reading C when beta == 0 (k == 0 or
// alpha == 0).
void scale_block(const GemmArgs& g, const Block& blk) {
  for (int64_t i = blk.i0; i < blk.i1; ++i) {
    float* row = g.c + i * g.ldc;
    if (g.beta == 0.0f) {
      std::fill(row + blk.j0, row + blk.j1, 0.0f);
    } else if (g.beta != 1.0f) {
      for (int64_t j = blk.j0; j < blk.j1; ++j) row[j] *= g.beta;
    }
    if (g.bias) {
      for (int64_t j = blk.j0; j < blk.j1; ++j) row[j] += g.bias[j];
    }
  }
}

// C[i0..i1, all columns] += bias (the OpenBLAS backend's epilogue).
void add_bias_rows(const GemmArgs& g, int64_t i0, int64_t i1) {
  if (!g.bias) return;
  for (int64_t i = i0; i < i1; ++i) {
    float* row = g.c + i * g.ldc;
    for (int64_t j = 0; j < g.n; ++j) row[j] += g.bias[j];
  }
}

void openblas_rows(const GemmArgs& g, int64_t i0, int64_t i1) {
  if (i0 >= i1) return;
  const float* a = g.a + (g.trans_a ? i0 : i0 * g.lda);
  // set_gemm_backend(kOpenBLAS) loaded it: the backend is never OpenBLAS without it.
  const CblasSgemm sgemm_fn = g_cblas_sgemm.load(std::memory_order_acquire);
  sgemm_fn(kCblasRowMajor, g.trans_a ? kCblasTrans : kCblasNoTrans,
           g.trans_b ? kCblasTrans : kCblasNoTrans, static_cast<int>(i1 - i0),
           static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, a, static_cast<int>(g.lda), g.b,
           static_cast<int>(g.ldb), g.beta, g.c + i0 * g.ldc, static_cast<int>(g.ldc));
}

// Rows [i0, i1) of products [p0, p1) of a batch.
void products(const GemmArgs& g, const GemmBatch& batch, int64_t p0, int64_t p1, int64_t i0,
              int64_t i1, bool bf16) {
  if (p0 >= p1 || i0 >= i1 || g.n == 0) return;
  const gemm_detail::ProductSpan span{p0,          p1,          batch.heads,   batch.a_batch,
                                      batch.a_head, batch.b_batch, batch.b_head, batch.c_batch,
                                      batch.c_head};
  if (g.k == 0 || g.alpha == 0.0f) {
    span.for_each(g, [&](const GemmArgs& gp) { scale_block(gp, {i0, i1, 0, g.n}); });
    return;
  }
  if (g_backend.load(std::memory_order_relaxed) == GemmBackend::kOpenBLAS) {
    span.for_each(g, [&](const GemmArgs& gp) { openblas_rows(gp, i0, i1); });
    return;
  }
  if (bf16 && bf16_product_worth(g.m, g.n, g.k)) {
    span.for_each(g, [&](const GemmArgs& gp) {
      bf16_gemm_block(gp.trans_a, gp.trans_b, gp.m, gp.n, gp.k, gp.alpha, gp.a, gp.lda, gp.b, gp.ldb, gp.beta,
                      gp.c, gp.ldc, i0, i1, 0, gp.n);
    });
    return;
  }
  HWY_DYNAMIC_DISPATCH(GemmProductsTarget)(g, span, i0, i1);
}

// Rows of a dynamic task: about 4 tasks per thread (a thread slowed down by other work
// leaves few rows behind), whole micro-tiles, between half a packed row block and one.
int64_t dynamic_task_rows(int64_t m, int threads) {
  const int64_t want = (m + 4 * threads - 1) / (4 * threads);
  const int64_t rows = (want + gemm_detail::kMR - 1) / gemm_detail::kMR * gemm_detail::kMR;
  return std::clamp<int64_t>(rows, gemm_detail::kMC / 2, gemm_detail::kMC);
}

// The whole product on the threads of a dynamic slice (s.dynamic()) by row blocks, for the
// direct paths when C is at least as tall as wide; false (nothing done) when the product
// keeps its static split. Packed products keep theirs: each thread then packs op(A) once
// and streams each packed slab of op(B) over all its rows, which (row block, column chunk)
// tasks would repack per task and per chunk.
bool dynamic_product(const GemmArgs& g, Slice s) {
  if (gemm_detail::use_packed_path(g.m, g.n, g.k, g.trans_b)) return false;
  if (g.m < g.n || g.m < 4 * gemm_detail::kMR * s.count) return false;
  HWY_DYNAMIC_DISPATCH(GemmRowsDynamicTarget)(g, &s.tasks->next, dynamic_task_rows(g.m, s.count));
  return true;
}

// The mixed-precision form of sgemm_epilogue_slice: this slice's block of C from bf16
// operands (ops/gemm_bf16.h), then the epilogue on it, and the column sums B's owner of row 0
// computes in k order (bitwise bias_backward's, as the float32 path's).
void bf16_product(const GemmArgs& g, const GemmEpilogue& e, Slice s) {
  const Block blk = block_of_slice(g.m, g.n, s, false);
  if (blk.i0 >= blk.i1 || blk.j0 >= blk.j1) return;
  GemmEpilogue be = e;  // applied as each block of C is stored
  // The column sums of B (a bias gradient) while B is packed, by the block holding row 0, where
  // the float32 path would sum them (op_linear asks sgemm_fuses_colsum).
  if (!(sgemm_fuses_colsum(g.trans_b, g.m, g.n, g.k) && blk.i0 == 0)) be.colsum = nullptr;
  const bool any = be.bias || be.relu || be.mask || be.addend || be.colsum;
  bf16_gemm_block(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc,
                  blk.i0, blk.i1, blk.j0, blk.j1, any ? &be : nullptr, e.b_stamp);
}

bool worth_threads(int64_t work) {
  return work >= kParallelWork && !omp_in_parallel() && omp_get_max_threads() > 1;
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  const ProductTimer timer;
  if (g_backend.load(std::memory_order_relaxed) == GemmBackend::kOpenBLAS && m > 0 && n > 0 &&
      k > 0 && alpha != 0.0f && !omp_in_parallel()) {
    // OpenBLAS runs its own threads.
    openblas_rows({trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc}, 0, m);
    return;
  }
  if (!worth_threads(m * n * k)) {
    sgemm_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, Slice{});
    return;
  }
  if (k > 0 && alpha != 0.0f && gemm_detail::use_packed_path(m, n, k, trans_b)) {
    // Packed path: blocks of C handed out to the threads as they go (see GemmPackedDynamic).
    const GemmArgs g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
    std::atomic<int64_t> next{0};
#pragma omp parallel
    HWY_DYNAMIC_DISPATCH(GemmPackedDynamicTarget)(g, &next, gemm_detail::kMC);
    return;
  }
#pragma omp parallel
  {
    const InsideProduct inside;
    const Slice s{omp_get_thread_num(), omp_get_num_threads()};
    sgemm_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, s);
  }
}

void sgemm_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc, Slice s) {
  const ProductTimer timer;
  // Small whole products (one call per attention head): straight to the kernels, without the
  // epilogue and slicing layers, whose cost is a quarter of a 10 × 10 × 16 product's.
  if (s.count <= 1 && m > 0 && n > 0 && k > 0 && m <= 32 && n <= 64 && alpha != 0.0f &&
      g_backend.load(std::memory_order_relaxed) == GemmBackend::kAttnkit &&
      !(s.bf16 && bf16_product_worth(m, n, k))) {
    GemmArgs g;  // field by field: the aggregate's zero fill is a `rep stos` of ~30 cycles
    g.trans_a = trans_a, g.trans_b = trans_b;
    g.m = m, g.n = n, g.k = k;
    g.alpha = alpha, g.beta = beta;
    g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc;
    HWY_DYNAMIC_DISPATCH(GemmSmallProductTarget)(g);
    return;
  }
  sgemm_bias_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nullptr, s);
}

void sgemm_bias_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc, const float* bias, Slice s) {
  GemmEpilogue e;
  e.bias = bias;
  sgemm_epilogue_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e, s);
}

void sgemm_epilogue_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                          float beta, float* c, int64_t ldc, const GemmEpilogue& e, Slice s) {
  const ProductTimer timer;
  if (m <= 0 || n <= 0) return;
  GemmArgs g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e.bias};
  g.relu = e.relu;
  g.relu_last = e.relu_last;
  g.mask = e.mask;
  g.ldm = e.ldm;
  g.addend = e.addend;
  g.ld_addend = e.ld_addend;
  if (sgemm_fuses_colsum(trans_b, m, n, k)) {
    g.colsum = e.colsum;
    g.colsum_accumulate = e.colsum_accumulate;
  }
  const bool openblas = g_backend.load(std::memory_order_relaxed) == GemmBackend::kOpenBLAS;
  if (s.bf16 && !openblas && k > 0 && alpha != 0.0f && bf16_product_worth(m, n, k)) {
    bf16_product(g, e, s);
    return;
  }
  if (s.dynamic() && !openblas && k > 0 && alpha != 0.0f && dynamic_product(g, s)) return;
  const Block blk = block_of_slice(m, n, s, openblas);
  if (blk.i0 >= blk.i1 || blk.j0 >= blk.j1) return;
  if (k <= 0 || alpha == 0.0f) {
    scale_block(g, blk);
    if (g.has_epilogue()) HWY_DYNAMIC_DISPATCH(EpilogueTarget)(g, blk.i0, blk.i1, blk.j0, blk.j1);
    if (g.colsum && blk.i0 == 0) {  // alpha == 0: nothing packs B, the sums still wanted
      for (int64_t j = blk.j0; j < blk.j1; ++j) {
        float sum = g.colsum_accumulate ? g.colsum[j] : 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) sum += b[kk * ldb + j];
        g.colsum[j] = sum;
      }
    }
  } else if (openblas) {
    openblas_rows(g, blk.i0, blk.i1);
    add_bias_rows(g, blk.i0, blk.i1);
    if (g.has_epilogue()) HWY_DYNAMIC_DISPATCH(EpilogueTarget)(g, blk.i0, blk.i1, 0, n);
  } else {
    HWY_DYNAMIC_DISPATCH(GemmBlockTarget)(g, blk.i0, blk.i1, blk.j0, blk.j1);
  }
}

bool sgemm_fuses_colsum(bool trans_b, int64_t m, int64_t n, int64_t k) {
  return !trans_b && m > 0 && n > 0 && k > 0 &&
         g_backend.load(std::memory_order_relaxed) == GemmBackend::kAttnkit &&
         gemm_detail::use_packed_path(m, n, k, trans_b);
}

void sgemm_batched_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                         float beta, float* c, int64_t ldc, const GemmBatch& batch, Slice s) {
  const ProductTimer timer;
  const int64_t count = batch.batch * batch.heads;
  if (count <= 0 || m <= 0 || n <= 0) return;
  const GemmArgs g{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  if (count >= s.count) {
    auto [p0, p1] = slice_range(count, s);
    products(g, batch, p0, p1, 0, m, s.bf16);
    return;
  }
  // Fewer products than slices: slices index, index + count, … share product index % count
  // by rows.
  const int64_t p = s.index % count;
  const Slice sub{static_cast<int>(s.index / count),
                  static_cast<int>((s.count - p + count - 1) / count)};
  auto [i0, i1] = slice_range_grain(m, gemm_detail::kMR, sub);
  products(g, batch, p, p + 1, i0, i1, s.bf16);
}

void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float* a, int64_t lda, int64_t stride_a,
                           const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                           int64_t ldc, int64_t stride_c, int64_t batch_count) {
  const ProductTimer timer;
  GemmBatch batch;
  batch.batch = batch_count;
  batch.a_batch = stride_a;
  batch.b_batch = stride_b;
  batch.c_batch = stride_c;
  if (!worth_threads(batch_count * m * n * std::max<int64_t>(k, 1))) {
    sgemm_batched_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch,
                        Slice{});
    return;
  }
#pragma omp parallel
  {
    const InsideProduct inside;
    const Slice s{omp_get_thread_num(), omp_get_num_threads()};
    sgemm_batched_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch,
                        s);
  }
}

void load_openblas(const std::string& library) {
  std::string name = library;
  if (name.empty()) {
    const char* env = std::getenv("ATTNKIT_OPENBLAS");
    name = env && *env ? env : "libopenblas.so.0";
  }
  const std::lock_guard<std::mutex> lock(g_openblas_mutex);
  if (name == g_openblas_name && g_cblas_sgemm.load()) return;
  // RTLD_LOCAL: OpenBLAS's symbols stay out of the program's namespace (a program that links
  // OpenBLAS itself gets the same, already loaded, library back).
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw Error("OpenBLAS backend: cannot load " + name + ": " +
                             (why ? why : "unknown reason") +
                             " (Debian: libopenblas0; or set ATTNKIT_OPENBLAS to its file)");
  }
  void* symbol = dlsym(handle, "cblas_sgemm");
  if (!symbol) {
    dlclose(handle);
    throw Error("OpenBLAS backend: " + name + " has no cblas_sgemm");
  }
  // The handle stays open for the process's life: products may be running on the old one.
  g_cblas_sgemm.store(reinterpret_cast<CblasSgemm>(symbol), std::memory_order_release);
  g_openblas_name = name;
}

void set_gemm_backend(GemmBackend backend) {
  // (Throws, the backend unchanged. An OpenBLAS loaded before, by load_openblas(path) too, stays.)
  if (backend == GemmBackend::kOpenBLAS && !g_cblas_sgemm.load()) load_openblas();
  g_backend.store(backend);
}
void set_gemm_timing(bool on) { g_timing.store(on); }
GemmTiming gemm_timing() { return {g_timed_ns.load(), g_timed_calls.load()}; }
void reset_gemm_timing() {
  g_timed_ns.store(0);
  g_timed_calls.store(0);
}
void set_gemm_direct_half_tiles(int mode) { gemm_detail::direct_half_tiles_mode = mode; }

namespace {
// The x86 family of an AMD CPU (base + extended family, CPUID leaf 1), 0 for other vendors.
int AmdFamily() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();  // (runs before main: the CPU model is not known yet)
  if (!__builtin_cpu_is("amd")) return 0;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  const int base = static_cast<int>((eax >> 8) & 0xF);
  return base == 0xF ? base + static_cast<int>((eax >> 20) & 0xFF) : base;
#else
  return 0;
#endif
}
// SmallGemmValues::kCpuDefault: split on AMD Zen 5 and later, broadcast elsewhere (see gemm.h).
bool CpuDefaultSmallSplit() { return AmdFamily() >= 0x1A; }
// Avx512Width::kCpuDefault: halves on AMD family 0x19 (Zen 3 has no AVX-512, Zen 4 splits it).
bool CpuDefaultAvx512Halves() { return AmdFamily() == 0x19; }
// TenColumns::kCpuDefault: 16-lane rows on AMD Zen 5 and later, the quads paths elsewhere.
bool CpuDefaultTenColumnsQuads() { return AmdFamily() < 0x1A; }
// A yes/no choice of the kernels (a gemm_detail flag) with a CPU default, set before main
// unless a setter ran first: `set` is constant-initialized, so a call from another static
// initializer before this file's keeps its choice.
struct CpuChoice {
  bool& flag;
  bool (*cpu_default)();
  bool set = false;
  bool init() { return set ? flag : (flag = cpu_default()); }
  // value: E::kCpuDefault, `on` or the other choice.
  template <class E>
  void choose(E value, E on) {
    set = true;
    flag = value == E::kCpuDefault ? cpu_default() : value == on;
  }
};
CpuChoice g_small_split{gemm_detail::small_split, CpuDefaultSmallSplit};
CpuChoice g_avx512_halves{gemm_detail::avx512_halves, CpuDefaultAvx512Halves};
CpuChoice g_ten_columns_quads{gemm_detail::ten_columns_quads, CpuDefaultTenColumnsQuads};
// (Each runs: `&&` or `||` would skip the rest after the first's result.)
[[maybe_unused]] const bool g_choices_at_start[] = {g_small_split.init(), g_avx512_halves.init(),
                                                    g_ten_columns_quads.init()};
}  // namespace

void set_gemm_small_values(SmallGemmValues values) { g_small_split.choose(values, SmallGemmValues::kSplit); }
SmallGemmValues gemm_small_values() {
  return gemm_detail::small_split ? SmallGemmValues::kSplit : SmallGemmValues::kBroadcast;
}
const char* gemm_small_values_name() { return gemm_detail::small_split ? "split" : "broadcast"; }

void set_gemm_avx512_width(Avx512Width width) { g_avx512_halves.choose(width, Avx512Width::kHalves); }
Avx512Width gemm_avx512_width() { return gemm_detail::avx512_halves ? Avx512Width::kHalves : Avx512Width::kFull; }
const char* gemm_avx512_width_name() { return gemm_detail::avx512_halves ? "halves" : "full"; }
void set_gemm_ten_columns(TenColumns layout) { g_ten_columns_quads.choose(layout, TenColumns::kQuads); }
TenColumns gemm_ten_columns() { return gemm_detail::ten_columns_quads ? TenColumns::kQuads : TenColumns::kWide; }
const char* gemm_ten_columns_name() { return gemm_detail::ten_columns_quads ? "quads" : "wide"; }
GemmBackend gemm_backend() { return g_backend.load(); }

const char* simd_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(CurrentTarget)());
}

bool avx512_target_in_use() { return std::strncmp(simd_target_name(), "AVX3", 4) == 0; }

}  // namespace attnkit
#endif  // HWY_ONCE

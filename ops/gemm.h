// Single-precision matrix multiply with cblas row-major semantics.
#pragma once
#include <cstdint>
#include <string>

#include "parallel.h"

namespace attnkit {

// C (m×n) = alpha·op(A)·op(B) + beta·C, row-major, op(X) = Xᵀ when trans_x.
// A is m×k (k×m when trans_a) with row stride lda; B is k×n (n×k when trans_b) with row
// stride ldb; C has row stride ldc. BLAS behaviour at the edges: m, n or k may be 0;
// k == 0 scales C by beta; beta == 0 never reads C (NaN already in C does not leak).
// Runs on the OpenMP threads (OMP_NUM_THREADS / omp_set_num_threads) when the work is large
// enough to pay for it; called inside a parallel region it runs on the calling thread only.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// The share of one thread of the same product: slice s computes a disjoint block of C.
// Every element of C is computed the same way whatever the slice count, so results do not
// depend on the number of threads. With a dynamic slice (s.dynamic(): the engine's task
// counter s.tasks[0]), tall products on the direct paths take row blocks of C from the
// counter instead (every slice of the call must pass the same counter; same values, bitwise).
void sgemm_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc, Slice s);

// sgemm_slice with a bias epilogue (a Linear layer's y = x·W + b in one pass):
// C = alpha·op(A)·op(B) + beta·C + bias[j] in every row i, bias holding n values. The bias is
// added in the final store of each tile, the same way whatever the slice count (results stay
// bitwise independent of it); bias == nullptr is exactly sgemm_slice.
void sgemm_bias_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc, const float* bias, Slice s);

// What sgemm_epilogue_slice does to each element of C after its final value is stored,
// in this order: + bias[j] (n values; as sgemm_bias_slice), then relu: C = max(C, 0), then
// mask: C = C where mask[i·ldm + j] > 0, else 0, then addend: C = C + addend[i·ld_addend + j]
// — with relu_last, the relu comes last instead: relu(x·W + b + r).
// The relu is a Linear–ReLU's forward in one pass; the mask is the backward of a ReLU folded
// into the product that computes the gradient of its output: d pre-activation = (dy·Wᵀ)
// where relu output > 0; the addend is a residual sum x·W + b + r. The operations are
// relu_forward's, relu_backward's and add_forward's (ops/elementwise.h), so results are
// bitwise theirs. The addend and mask must not overlap C.
// Besides, colsum: colsum[j] = Σ_kk B[kk, j] (+ colsum[j] when colsum_accumulate) for B not
// transposed, each column summed in k order while the product packs B: a Linear's bias
// gradient from its dW = xᵀ·dy product, without another pass over dy. Only where
// sgemm_fuses_colsum says so (else colsum is left alone); bitwise bias_backward's sums.
struct GemmEpilogue {
  const float* bias = nullptr;
  bool relu = false, relu_last = false;
  const float* mask = nullptr;
  int64_t ldm = 0;
  const float* addend = nullptr;
  int64_t ld_addend = 0;
  float* colsum = nullptr;
  bool colsum_accumulate = false;
  // Not an epilogue but a promise about B: nonzero, B is the same in every product given this
  // stamp, so the bf16 path packs it once per thread and reuses it (bf16_gemm_block's b_stamp,
  // ops/gemm_bf16.h). The float32 paths ignore it.
  uint64_t b_stamp = 0;
};

// Whether sgemm_epilogue_slice computes GemmEpilogue::colsum for a product of this shape (the
// attnkit backend's packed path, B not transposed).
bool sgemm_fuses_colsum(bool trans_b, int64_t m, int64_t n, int64_t k);

// sgemm_slice with an epilogue (see GemmEpilogue). Each element still has the same
// operations whatever the slice count.
void sgemm_epilogue_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                          float beta, float* c, int64_t ldc, const GemmEpilogue& epilogue,
                          Slice s);

// Strides of a batch of products indexed by (batch, head): product i = bi·heads + hi uses
// A + bi·a_batch + hi·a_head (likewise B and C). Attention over [B, T, H·dh] activations
// uses a_batch = T·H·dh, a_head = dh, lda = H·dh without copying heads apart.
struct GemmBatch {
  int64_t batch = 1, heads = 1;
  int64_t a_batch = 0, a_head = 0;
  int64_t b_batch = 0, b_head = 0;
  int64_t c_batch = 0, c_head = 0;
};

// batch·heads independent products, each as sgemm; the slices split the products between
// threads (and the rows of C when there are fewer products than threads).
void sgemm_batched_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                         float beta, float* c, int64_t ldc, const GemmBatch& batch, Slice s);

// cuBLAS-style strided batch: product i uses A + i·stride_a, B + i·stride_b, C + i·stride_c.
// Parallel over the products like sgemm.
void sgemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, const float* a, int64_t lda, int64_t stride_a,
                           const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                           int64_t ldc, int64_t stride_c, int64_t batch_count);

// Which implementation runs the products above: attnkit's own kernels (default) or
// OpenBLAS's cblas_sgemm, for comparison. attnkit does not link OpenBLAS: setting kOpenBLAS
// loads it first (load_openblas()) unless one is loaded already, and throws attnkit::Error
// naming the library, the backend unchanged, when it cannot.
enum class GemmBackend { kAttnkit, kOpenBLAS };
void set_gemm_backend(GemmBackend backend);
// Loads OpenBLAS for the kOpenBLAS backend from `library` (a file name dlopen searches for, or a
// path); empty: $ATTNKIT_OPENBLAS if set, else libopenblas.so.0 (Debian's libopenblas0). Loading
// the library already in use does nothing. Throws naming the library when it
// cannot be loaded or has no cblas_sgemm (attnkit::Error); the OpenBLAS loaded before, if any,
// then stays in use. Call it while no product runs on the OpenBLAS backend.
void load_openblas(const std::string& library = "");
GemmBackend gemm_backend();

// Time spent inside the products above, for profiles (bench_train_step --profile): off by
// default. While on, every outermost call of sgemm, sgemm_slice, sgemm_bias_slice,
// sgemm_epilogue_slice, sgemm_batched_slice and sgemm_strided_batched adds its wall time
// (summed over the threads that call) and one call to the counters.
struct GemmTiming {
  int64_t ns = 0;
  int64_t calls = 0;
};
void set_gemm_timing(bool on);
GemmTiming gemm_timing();  // since the last reset
void reset_gemm_timing();

// Name of the Highway target the kernels dispatch to on this machine (e.g. "AVX2").
const char* simd_target_name();

// Whether that target is an AVX-512 one (AVX3…). Only there do the AVX-512 kernel choices
// (set_gemm_small_values, set_gemm_avx512_width, set_gemm_ten_columns) apply. (The bf16
// kernels ask avx512_allowed() in ops/gemm_bf16.h.)
bool avx512_target_in_use();

// Whether the AVX-512 direct path computes its whole tiles with 256-bit vectors: 1 yes, 0 or
// -1 (the default) no: 512-bit ones (see DirectHalfTiles in ops/gemm_direct-inl.h). For tests
// of both forms and for measurements; the values never depend on it. Not thread-safe: set it
// before running kernels.
void set_gemm_direct_half_tiles(int mode);

// How the AVX-512 small products (C's row tile in registers: the attention products of the
// lesson models and their batches; k <= 16, or any k with A transposed) get A's values, one
// per FMA: kSplit broadcasts half of the
// rows' values from memory (a load port) and permutes the other half's out of a register (a
// shuffle port); kBroadcast broadcasts every one from memory. kCpuDefault: split on AMD Zen 5
// and later (family 0x1A on; shuffles on a port of their own there, and split measured
// fastest), broadcast elsewhere (on Intel a 512-bit permute takes port 5, one of the two FMA
// ports; on Zen 4 a 512-bit permute occupies the FMA pipes' ports twice: the attention
// products 0.89-0.91x the time with broadcast). The values
// never depend on it; other targets ignore it. The environment variable ATTNKIT_SMALL_GEMM
// (engine/simd_target.h) sets it for a process. Not thread-safe: set it before running kernels.
enum class SmallGemmValues { kCpuDefault, kSplit, kBroadcast };
void set_gemm_small_values(SmallGemmValues values);
// The one in use (kSplit or kBroadcast) and its name, "split" or "broadcast".
SmallGemmValues gemm_small_values();
const char* gemm_small_values_name();

// How the AVX-512 products are shaped for this core. kHalves: for a core that issues 512-bit
// operations as two 256-bit halves (AMD Zen 4): products of at most 16 k-steps and more than
// one vector of columns (dx = dy·Wᵀ of a narrow layer) take the direct path's 12-row tiles
// (whole 16-column tiles of 256-bit vectors) instead of the small path's. kFull: the small
// path's (measured fastest on Zen 5 and on the Intel Xeon: a 10-class head's dx 1.37-1.53x the
// time with kHalves there). kCpuDefault: kHalves on AMD family 0x19 (Zen 4), kFull elsewhere.
// The values never depend on it; other targets ignore it. The environment variable
// ATTNKIT_AVX512_WIDTH (engine/simd_target.h) sets it for a process. Not thread-safe: set it
// before running kernels. (kHalves used to choose the quads paths of 9 or 10 columns too;
// TenColumns below chooses those now.)
enum class Avx512Width { kCpuDefault, kFull, kHalves };
void set_gemm_avx512_width(Avx512Width width);
// The one in use (kFull or kHalves) and its name, "full" or "halves".
Avx512Width gemm_avx512_width();
const char* gemm_avx512_width_name();

// How the AVX-512 products of 9 or 10 columns with A not transposed (a 10-class head's forward
// x·W; an attention's Q·Kᵀ and dY·Vᵀ at T = 9 or 10, and P·V or dS·K at head size 9 or 10;
// k <= 256) use the lanes, where a row of 10 columns fills 10 of a 512-bit vector's 16:
// kQuads: 256-bit rows with every lane working — columns 0..7 one 8-lane vector, columns 8 and
// 9 with k in quads (and from k = 32 all ten columns with k in quads), no permute in A·B's k
// loop. kWide: 16-lane rows — A·B from k = 32 on the pairs path (k in pairs, every lane working,
// one permute per pair of k-steps), the small path's rows otherwise. kCpuDefault: kWide on AMD
// Zen 5 and later (family 0x1A on: the quads paths took 1.11-1.44x the time there, session 48),
// kQuads elsewhere (Zen 4: half-width FMAs; Intel Xeon: the quads paths 0.85-0.97x the time,
// session 47). The two sum k in their own orders, so their last bits differ (each is bitwise
// reproducible). Other targets ignore it. The environment variable ATTNKIT_TEN_COLUMNS
// (engine/simd_target.h) sets it for a process. Not thread-safe: set it before running kernels.
enum class TenColumns { kCpuDefault, kWide, kQuads };
void set_gemm_ten_columns(TenColumns layout);
// The one in use (kWide or kQuads) and its name, "wide" or "quads".
TenColumns gemm_ten_columns();
const char* gemm_ten_columns_name();

}  // namespace attnkit

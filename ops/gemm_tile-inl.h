// Per-target GEMM building blocks shared by every path of ops/gemm_kernels-inl.h: the
// product's arguments and blocking, loads and stores of partial vectors, the R × 2V
// micro-tile's FMA chains over k, the write-back that combines them with C (+ bias), the
// relu / mask / addend epilogue, and the row tiles a block of rows is cut into.

// Target-independent declarations (normal include guard).
#ifndef ATTNKIT_OPS_GEMM_TILE_SHARED_H_
#define ATTNKIT_OPS_GEMM_TILE_SHARED_H_
#include <cstddef>
#include <cstdint>

namespace attnkit::gemm_detail {

// One product C = alpha·op(A)·op(B) + beta·C (+ bias[j] in every row when bias is set); the
// kernels compute a sub-block of it.
struct GemmArgs {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
  // n values added to every row of C in the final store of each tile (after alpha·acc and
  // beta·C are combined), or nullptr.
  const float* bias = nullptr;
  // After that final store (see GemmEpilogue in ops/gemm.h): relu: C = max(C, 0); mask:
  // C = C where mask > 0, else 0, mask laid out like C with row stride ldm; addend:
  // C = C + addend (row stride ld_addend); relu_last: the relu after the addend instead.
  bool relu = false, relu_last = false;
  const float* mask = nullptr;
  int64_t ldm = 0;
  const float* addend = nullptr;
  int64_t ld_addend = 0;
  bool has_epilogue() const { return relu || mask != nullptr || addend != nullptr; }
  // colsum[j] += Σ_kk B[kk, j] (B row-major, not transposed), each column summed in k order
  // while the packed path packs B (the bias gradient of a Linear from its dW = xᵀ·dy
  // product); colsum is zeroed first unless colsum_accumulate. Only the packed path does
  // it (see sgemm_fuses_colsum in ops/gemm.h), in the block that holds row 0.
  float* colsum = nullptr;
  bool colsum_accumulate = false;
};

// Products [p0, p1) of a batch of products of one shape (GemmBatch's strides): product p
// reads A at a + (p / heads)·a_batch + (p % heads)·a_head, and likewise B and C. The
// default is the one product the GemmArgs point at.
struct ProductSpan {
  int64_t p0 = 0, p1 = 1, heads = 1;
  int64_t a_batch = 0, a_head = 0, b_batch = 0, b_head = 0, c_batch = 0, c_head = 0;
  // f(args of product p) for every product of the span, in order.
  template <class F>
  void for_each(const GemmArgs& g, const F& f) const {
    if (p0 == 0 && p1 == 1) {  // one product (every per-call GEMM): g itself, not a copy. The
      f(g);                    // copy's wide loads of fields the caller has just stored one by
      return;                  // one stalled on store forwarding: ~a quarter of a 10×10×16 call.
    }
    GemmArgs gp = g;
    for (Cursor at(*this); at.p < p1; at.next()) {
      // (A and B may be null when k == 0: no offset applied to a null pointer.)
      gp.a = g.a ? g.a + at.a() : nullptr;
      gp.b = g.b ? g.b + at.b() : nullptr;
      gp.c = g.c + at.c();
      f(gp);
    }
  }
  // Product p of the span (from p0) and its operands' offsets from the first product's, stepped
  // (batch, head) by (batch, head) instead of divided per product. Also what the per-target
  // kernels loop with: a call from this shared for_each into a target's kernel cannot be
  // inlined.
  struct Cursor {
    const ProductSpan& s;
    int64_t p, bi, hi;
    explicit Cursor(const ProductSpan& span) : s(span), p(span.p0), bi(span.p0 / span.heads), hi(span.p0 % span.heads) {}
    int64_t a() const { return bi * s.a_batch + hi * s.a_head; }
    int64_t b() const { return bi * s.b_batch + hi * s.b_head; }
    int64_t c() const { return bi * s.c_batch + hi * s.c_head; }
    void next() {
      ++p;
      if (++hi == s.heads) hi = 0, ++bi;
    }
  };
};

// Per-thread grow-only 64-byte-aligned scratch; slot 0 holds packed A, slot 1 packed B.
float* thread_scratch(int slot, size_t floats);

// Blocking of the packed path. KC is fixed for every target and thread count: it decides
// where the k-sum is split, so it must not depend on anything but the shape.
inline constexpr int64_t kMR = 6;     // rows of the micro-tile
inline constexpr int64_t kKC = 384;   // k-depth of packed panels: B micro-panel 24 KB in L1
inline constexpr int64_t kMC = 120;   // rows of an A block: 180 KB in L2
inline constexpr int64_t kNC = 2048;  // columns of a B block: 2 MB in L3
// Rows of A kept hot in the direct path while all column tiles pass over them.
inline constexpr int64_t kDirectRows = 96;

// set_gemm_direct_half_tiles's mode (> 0: 256-bit AVX-512 direct tiles).
inline int direct_half_tiles_mode = -1;

// set_gemm_small_values's choice: whether the AVX-512 small tiles permute half of their rows'
// A values from a register (true) or broadcast every one from memory (false). Set before main
// from the CPU's vendor (gemm.cc: CpuDefaultSmallSplit).
inline bool small_split = false;

// set_gemm_avx512_width's choice: whether this core issues a 512-bit vector operation as two
// 256-bit halves (AMD Zen 4: one 512-bit FMA a cycle, permutes on the FMA pipes' ports), so
// that the AVX-512 paths which trade shuffles for FMAs lose. Set before main from the CPU
// (gemm.cc: CpuDefaultAvx512Halves).
inline bool avx512_halves = false;

// set_gemm_ten_columns's choice: whether the AVX-512 products of 9 or 10 columns (A·B and
// A·Bᵀ, A not transposed, k <= 256) take the quads paths (true: 8-lane rows, columns 8 and 9
// with k in quads; UseQuadsNN, UseQuadsNT) or 16-lane rows (false: UsePairsNN from k = 32, the
// small path below it and for A·Bᵀ). Set before main from the CPU (gemm.cc:
// CpuDefaultTenColumnsQuads).
inline bool ten_columns_quads = false;

}  // namespace attnkit::gemm_detail
#endif  // ATTNKIT_OPS_GEMM_TILE_SHARED_H_

// Per-target part: toggled include guard, as Highway's foreach_target.h requires.
#if defined(ATTNKIT_OPS_GEMM_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_GEMM_TILE_INL_H_
#undef ATTNKIT_OPS_GEMM_TILE_INL_H_
#else
#define ATTNKIT_OPS_GEMM_TILE_INL_H_
#endif

#include <algorithm>
#include <type_traits>

#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"  // StoreTail

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using gemm_detail::GemmArgs;
using gemm_detail::ProductSpan;
using gemm_detail::kMR;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// MaskedLoad only keeps masked-off lanes from faulting on AVX2 and newer; older targets load
// the whole vector, so partial loads go through a small stack buffer there.
#if HWY_TARGET <= HWY_AVX2 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
inline constexpr bool kFaultFreeMaskedLoad = true;
#else
inline constexpr bool kFaultFreeMaskedLoad = false;
#endif

// The first `count` (<= Lanes) floats at p, zeros after them, touching no memory beyond.
HWY_INLINE VF LoadFirst(DF d, const float* HWY_RESTRICT p, size_t count) {
  if (count == hn::Lanes(d)) return hn::LoadU(d, p);
  if constexpr (kFaultFreeMaskedLoad) {
    return hn::MaskedLoad(hn::FirstN(d, count), d, p);
  } else {
    alignas(64) float buf[64 / sizeof(float)] = {};
    for (size_t i = 0; i < count; ++i) buf[i] = p[i];
    return hn::Load(d, buf);
  }
}

// How the write-back combines the accumulator with what C holds.
// kCopy: alpha = 1 and C not read (only the small path's stores take it; FirstCombine never
// returns it).
enum class Combine { kOverwrite, kAdd, kScale, kCopy };  // alpha·acc, +C, +beta·C, acc

// Accumulates an R × NV-vector tile of A·B over k into acc: A(r, kk) = a[r·ar + kk·ak], vector
// v of row kk of B at b_v + kk·ldb. The two B vectors need not be adjacent: a ragged last tile
// reads a vector that overlaps its neighbour instead of masking (masked loads are slow on AMD
// and not fault-free before AVX2).
// kFromZero = false continues the chains from what acc holds (a k-chunk after the first).
template <int R, int NV, bool kFromZero = true>
HWY_INLINE void AccumulateTile(DF d, int64_t k, const float* HWY_RESTRICT a, int64_t ar,
                               int64_t ak, const float* HWY_RESTRICT b0,
                               const float* HWY_RESTRICT b1, int64_t ldb, VF (&acc)[kMR][2]) {
  if constexpr (kFromZero) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = hn::Zero(d);
  }
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < k; ++kk) {
    const VF bv0 = hn::LoadU(d, b0 + kk * ldb);
    const VF bv1 = NV == 2 ? hn::LoadU(d, b1 + kk * ldb) : bv0;
    const float* HWY_RESTRICT ak_ptr = a + kk * ak;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const VF av = hn::Set(d, ak_ptr[r * ar]);
      acc[r][0] = hn::MulAdd(av, bv0, acc[r][0]);
      if constexpr (NV == 2) acc[r][1] = hn::MulAdd(av, bv1, acc[r][1]);
    }
  }
}

// C tile (rows × cols, cols <= 2V) = alpha·acc combined with C as `combine` says.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V CombineVec(D d, V acc, V alpha, V beta, V old, Combine combine) {
  (void)d;
  if (combine == Combine::kOverwrite) return hn::Mul(acc, alpha);
  if (combine == Combine::kAdd) return hn::MulAdd(acc, alpha, old);
  return hn::MulAdd(acc, alpha, hn::Mul(beta, old));
}

// CombineVec plus the bias epilogue: alpha·acc + bias fused when C is not read, else the
// combined value + bias. Only the column decides the operations, never the tile or slice.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V CombineBias(D d, V acc, V alpha, V beta, V old, Combine combine, bool has_bias,
                         V bias) {
  if (!has_bias) return CombineVec(d, acc, alpha, beta, old, combine);
  if (combine == Combine::kOverwrite) return hn::MulAdd(acc, alpha, bias);
  return hn::Add(CombineVec(d, acc, alpha, beta, old, combine), bias);
}

// Stores the first `count` lanes of v (StoreTail: one masked store on AVX-512, a stack
// buffer elsewhere).
HWY_INLINE void StoreFirst(DF d, VF v, size_t count, float* HWY_RESTRICT p) {
  if (count == hn::Lanes(d)) {
    hn::StoreU(v, d, p);
  } else {
    StoreTail(d, v, p, count);
  }
}

// With kBias, bias holds the bias of the tile's cols columns (ignored otherwise).
template <bool kBias = false>
HWY_INLINE void StoreTile(DF d, const VF (&acc)[kMR][2], int64_t rows, size_t cols, float alpha,
                          float beta, Combine combine, float* HWY_RESTRICT c, int64_t ldc,
                          const float* HWY_RESTRICT bias = nullptr) {
  const size_t lanes = hn::Lanes(d);
  const VF va = hn::Set(d, alpha), vb = hn::Set(d, beta);
  const bool read = combine != Combine::kOverwrite;
  constexpr bool has_bias = kBias;
  if (cols == 2 * lanes) {
    const VF b0 = has_bias ? hn::LoadU(d, bias) : hn::Zero(d);
    const VF b1 = has_bias ? hn::LoadU(d, bias + lanes) : hn::Zero(d);
    for (int64_t r = 0; r < rows; ++r) {
      float* cr = c + r * ldc;
      const VF o0 = read ? hn::LoadU(d, cr) : hn::Zero(d);
      const VF o1 = read ? hn::LoadU(d, cr + lanes) : hn::Zero(d);
      hn::StoreU(CombineBias(d, acc[r][0], va, vb, o0, combine, has_bias, b0), d, cr);
      hn::StoreU(CombineBias(d, acc[r][1], va, vb, o1, combine, has_bias, b1), d, cr + lanes);
    }
    return;
  }
  const size_t cols0 = std::min(cols, lanes), cols1 = cols > lanes ? cols - lanes : 0;
  const VF b0 = has_bias ? LoadFirst(d, bias, cols0) : hn::Zero(d);
  const VF b1 = has_bias && cols1 > 0 ? LoadFirst(d, bias + lanes, cols1) : hn::Zero(d);
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    const VF o0 = read ? LoadFirst(d, cr, cols0) : hn::Zero(d);
    StoreFirst(d, CombineBias(d, acc[r][0], va, vb, o0, combine, has_bias, b0), cols0, cr);
    if (cols1 > 0) {
      const VF o1 = read ? LoadFirst(d, cr + lanes, cols1) : hn::Zero(d);
      StoreFirst(d, CombineBias(d, acc[r][1], va, vb, o1, combine, has_bias, b1), cols1,
                 cr + lanes);
    }
  }
}

inline Combine FirstCombine(float beta) {
  return beta == 0.0f ? Combine::kOverwrite : beta == 1.0f ? Combine::kAdd : Combine::kScale;
}

// A ReLU backward's step: v where keep > 0, else 0 (relu_backward's operations, the same bits).
template <class D>
HWY_INLINE hn::Vec<D> KeepWherePositive(D d, hn::Vec<D> keep, hn::Vec<D> v) {
  return hn::IfThenElseZero(hn::Gt(keep, hn::Zero(d)), v);
}

// The relu / mask / addend epilogue of one stored value v of C's row i, columns from j; load(p)
// reads the mask's or the addend's vector at p: the same vector operations as
// ops/elementwise.cc's relu_forward (max(v, 0)), relu_backward (v where mask > 0, else 0) and
// add_forward (v + addend), so the fused results are bitwise theirs.
template <class D, class Load>
HWY_INLINE hn::Vec<D> EpilogueWith(D d, const GemmArgs& g, hn::Vec<D> v, int64_t i, int64_t j, const Load& load) {
  if (g.relu && !g.relu_last) v = hn::Max(v, hn::Zero(d));
  if (g.mask) v = KeepWherePositive(d, load(g.mask + i * g.ldm + j), v);
  if (g.addend) v = hn::Add(v, load(g.addend + i * g.ld_addend + j));
  if (g.relu && g.relu_last) v = hn::Max(v, hn::Zero(d));
  return v;
}

// For `count` lanes of a full-width vector.
HWY_INLINE VF EpilogueVec(DF d, const GemmArgs& g, VF v, int64_t i, int64_t j, size_t count) {
  return EpilogueWith(d, g, v, i, j, [&](const float* p) { return LoadFirst(d, p, count); });
}

// The vector at p: whole (!kMasked) or the lanes of m (a fault-free masked load).
template <bool kMasked, class D>
HWY_INLINE hn::Vec<D> LoadLanes(D d, hn::Mask<D> m, const float* p) {
  if constexpr (kMasked) {
    return hn::MaskedLoad(m, d, p);
  } else {
    (void)m;
    return hn::LoadU(d, p);
  }
}

// For vectors of any width D, whole (!kMasked) or the lanes of m: the small path's and the
// direct tiles' stores, which apply it while C is in registers.
template <bool kMasked, class D>
HWY_INLINE hn::Vec<D> EpilogueLanes(D d, const GemmArgs& g, hn::Vec<D> v, hn::Mask<D> m, int64_t i, int64_t j) {
  return EpilogueWith(d, g, v, i, j, [&](const float* p) { return LoadLanes<kMasked>(d, m, p); });
}

// What g's epilogue does, resolved once per tile (its stores dispatched on it as on their
// combine, WithEpilogueKind) instead of tested for every stored vector: nothing, a ReLU alone,
// a ReLU backward's mask alone, or any other combination (EpilogueWith's tests).
enum class EpilogueKind { kNone, kRelu, kMask, kAny };

HWY_INLINE EpilogueKind EpilogueKindOf(const GemmArgs& g) {
  if (!g.has_epilogue()) return EpilogueKind::kNone;
  if (g.mask == nullptr && g.addend == nullptr) return EpilogueKind::kRelu;  // (relu_last is moot alone)
  if (!g.relu && g.addend == nullptr) return EpilogueKind::kMask;
  return EpilogueKind::kAny;
}

// f(std::integral_constant<EpilogueKind, kind>()) for g's kind: kNone without kEpilogue (a tile
// instantiated for products without an epilogue), else kRelu, kMask or kAny.
template <bool kEpilogue, class F>
HWY_INLINE void WithEpilogueKind(const GemmArgs& g, const F& f) {
  using K = EpilogueKind;
  if constexpr (!kEpilogue) {
    (void)g;
    f(std::integral_constant<K, K::kNone>());
  } else {
    switch (EpilogueKindOf(g)) {  // (kNone, which a kEpilogue tile never gets, as kAny: the same result)
      case K::kRelu: f(std::integral_constant<K, K::kRelu>()); return;
      case K::kMask: f(std::integral_constant<K, K::kMask>()); return;
      default: f(std::integral_constant<K, K::kAny>()); return;
    }
  }
}

// EpilogueLanes for an epilogue of kind kKind (EpilogueKindOf(g)): the same operations, the
// same bits, without the tests of the kinds it is not.
template <EpilogueKind kKind, bool kMasked, class D>
HWY_INLINE hn::Vec<D> EpilogueOf(D d, const GemmArgs& g, hn::Vec<D> v, hn::Mask<D> m, int64_t i, int64_t j) {
  if constexpr (kKind == EpilogueKind::kNone) {
    (void)g, (void)m, (void)i, (void)j;
    return v;
  } else if constexpr (kKind == EpilogueKind::kRelu) {
    (void)g, (void)m, (void)i, (void)j;
    return hn::Max(v, hn::Zero(d));
  } else if constexpr (kKind == EpilogueKind::kMask) {
    return KeepWherePositive(d, LoadLanes<kMasked>(d, m, g.mask + i * g.ldm + j), v);
  } else {
    return EpilogueLanes<kMasked>(d, g, v, m, i, j);
  }
}

// The epilogue over C[i0..i1, j0..j1), after the final store of those elements (the packed
// path applies it per tile as it stores, see StoreTileEpilogue; the other paths per block).
HWY_INLINE void Epilogue(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = i0; i < i1; ++i) {
    float* c = g.c + i * g.ldc;
    int64_t j = j0;
    for (; j + lanes <= j1; j += lanes)
      hn::StoreU(EpilogueVec(d, g, hn::LoadU(d, c + j), i, j, static_cast<size_t>(lanes)), d, c + j);
    if (j < j1) {
      const size_t count = static_cast<size_t>(j1 - j);
      StoreFirst(d, EpilogueVec(d, g, LoadFirst(d, c + j, count), i, j, count), count, c + j);
    }
  }
}

// StoreTile with the bias (bias non-null) and the epilogue in the same pass: the values the
// separate Epilogue would give, without storing and reloading the tile, whose first element
// is C[i, j].
HWY_INLINE void StoreTileEpilogue(DF d, const GemmArgs& g, const VF (&acc)[kMR][2], int64_t rows,
                                  size_t cols, Combine combine, float* HWY_RESTRICT c,
                                  const float* HWY_RESTRICT bias, int64_t i, int64_t j) {
  const size_t lanes = hn::Lanes(d);
  const VF va = hn::Set(d, g.alpha), vb = hn::Set(d, g.beta);
  const bool read = combine != Combine::kOverwrite;
  const bool has_bias = bias != nullptr;
  const size_t cols0 = std::min(cols, lanes), cols1 = cols > lanes ? cols - lanes : 0;
  const VF b0 = has_bias ? LoadFirst(d, bias, cols0) : hn::Zero(d);
  const VF b1 = has_bias && cols1 > 0 ? LoadFirst(d, bias + lanes, cols1) : hn::Zero(d);
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * g.ldc;
    const VF o0 = read ? LoadFirst(d, cr, cols0) : hn::Zero(d);
    StoreFirst(d, EpilogueVec(d, g, CombineBias(d, acc[r][0], va, vb, o0, combine, has_bias, b0), i + r, j, cols0),
               cols0, cr);
    if (cols1 > 0) {
      const VF o1 = read ? LoadFirst(d, cr + lanes, cols1) : hn::Zero(d);
      StoreFirst(d, EpilogueVec(d, g, CombineBias(d, acc[r][1], va, vb, o1, combine, has_bias, b1),
                                i + r, j + static_cast<int64_t>(lanes), cols1),
                 cols1, cr + lanes);
    }
  }
}

// The row tiles of [i, end): 6 rows, except that 7 to 9 remaining rows become two tiles of
// 4 or 5 rows (a 1- to 3-row tile has too few independent FMA chains to hide the FMA
// latency); fn(std::integral_constant<int, R>(), first row) for each. Which tile a row falls
// in does not change how its elements are computed.
template <class Fn>
HWY_INLINE void ForEachRowTile(int64_t i, int64_t end, const Fn& fn) {
  for (; end - i >= kMR + 4 || end - i == kMR; i += kMR) fn(std::integral_constant<int, 6>(), i);
  if (end - i == 9) {
    fn(std::integral_constant<int, 5>(), i);
    i += 5;
  } else if (end - i > kMR) {
    fn(std::integral_constant<int, 4>(), i);
    i += 4;
  }
  switch (end - i) {
    case 5: fn(std::integral_constant<int, 5>(), i); break;
    case 4: fn(std::integral_constant<int, 4>(), i); break;
    case 3: fn(std::integral_constant<int, 3>(), i); break;
    case 2: fn(std::integral_constant<int, 2>(), i); break;
    case 1: fn(std::integral_constant<int, 1>(), i); break;
    default: break;
  }
}

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_GEMM_TILE_INL_H_

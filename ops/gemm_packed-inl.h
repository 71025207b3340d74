// Per-target GEMM paths that pack their operands, included through ops/gemm_kernels-inl.h:
// the BLIS-style packed path (A and B packed into MR-row and NR-column micro-panels), the
// short-k path (op(B) packed over the whole k, A broadcast in place) and the dynamic packed
// path (sgemm's own parallel region taking packed tasks from a shared counter).

// Per-target part: toggled include guard, as Highway's foreach_target.h requires.
#if defined(ATTNKIT_OPS_GEMM_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNKIT_OPS_GEMM_PACKED_INL_H_
#undef ATTNKIT_OPS_GEMM_PACKED_INL_H_
#else
#define ATTNKIT_OPS_GEMM_PACKED_INL_H_
#endif

#include <algorithm>
#include <atomic>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "ops/gemm_tile-inl.h"  // DF, VF, GemmArgs, tiles, ForEachRowTile
#include "ops/ops_simd-inl.h"   // TransposeBlock8x8

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {

// ------------------------------------------------------------------ packed path
// BLIS-style: B block (kc × nc) packed in NR-column micro-panels, A block (mc × kc) in MR-row
// micro-panels, both zero-padded so the micro-kernel always runs a full 6 × 2V tile.

// Slack the packed-A scratch needs past mc × kc floats (PackA6x8's last store).
inline constexpr int64_t kPackASlack = 16;

#if ATTNKIT_HAVE_TRANSPOSE8
// dst[kk·6 + r] = src[r·lds + kk] for r < 6, kk < 8: 8 columns of 6 rows of a row-major A
// into an MR-row panel, transposed in 256-bit registers (on AVX-512 too). The 8 stores of 8
// floats go in increasing order, each overwriting the previous one's 2 spare lanes; the last
// writes dst[48, 50), which the caller owns (the next values of the panel, or slack) and
// overwrites later.
HWY_INLINE void PackA6x8(const float* HWY_RESTRICT src, int64_t lds, float* HWY_RESTRICT dst) {
  const hn::Full256<float> d;
  using V8 = hn::Vec<decltype(d)>;
  const hn::Repartition<double, decltype(d)> dd;
  V8 r[8];
  for (int i = 0; i < 6; ++i) r[i] = hn::LoadU(d, src + i * lds);
  r[6] = r[7] = hn::Zero(d);
  V8 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = hn::InterleaveLower(d, r[i], r[i + 1]);
    t[i + 1] = hn::InterleaveUpper(d, r[i], r[i + 1]);
  }
  V8 u[8];
  for (int h = 0; h < 8; h += 4) {
    for (int i = 0; i < 2; ++i) {
      const auto a = hn::BitCast(dd, t[h + i]), b = hn::BitCast(dd, t[h + 2 + i]);
      u[h + 2 * i] = hn::BitCast(d, hn::InterleaveLower(dd, a, b));
      u[h + 2 * i + 1] = hn::BitCast(d, hn::InterleaveUpper(dd, a, b));
    }
  }
  for (int c = 0; c < 4; ++c) hn::StoreU(hn::ConcatLowerLower(d, u[4 + c], u[c]), d, dst + c * kMR);
  for (int c = 0; c < 4; ++c)
    hn::StoreU(hn::ConcatUpperUpper(d, u[4 + c], u[c]), d, dst + (c + 4) * kMR);
}
#endif

// op(A)[i0.., p0..] → mc × kc as MR-row panels, each kc × MR (kk-major). out has room for
// kPackASlack floats past mc × kc.
inline void PackA(const GemmArgs& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                  float* HWY_RESTRICT out) {
  int64_t ip0 = 0;
  if (g.trans_a) {
    // Whole panels of a transposed A (the dW = xᵀ·dy products): row kk of A holds 6
    // consecutive floats of every panel, so each row is read once, in order, and dealt out
    // to the panels (panel by panel, the kc rows' cache lines fell out of L1 between the
    // panels that share them: ~2% of a large model's step).
    // A comes from memory (the step's activations): the rows a few rows ahead are fetched
    // while this one is dealt out.
    constexpr int64_t kAhead = 16;
    ip0 = mc / kMR * kMR;
    for (int64_t kk = 0; kk < kc; ++kk) {
      const float* src = g.a + (p0 + kk) * g.lda + i0;
      if (kk + kAhead < kc)
        for (int64_t l = 0; l < ip0; l += 16) hwy::Prefetch(src + kAhead * g.lda + l);
      for (int64_t ip = 0; ip < ip0; ip += kMR)
        std::memcpy(out + ip * kc + kk * kMR, src + ip, kMR * 4);
    }
  }
  for (int64_t ip = ip0; ip < mc; ip += kMR) {
    const int64_t rows = std::min(kMR, mc - ip);
    float* panel = out + ip * kc;
    if (!g.trans_a && rows == kMR) {
      const float* src = g.a + (i0 + ip) * g.lda + p0;
      // The next panel's rows are fetched while this one is packed (A comes from memory,
      // and 6 rows 1-4 KB apart are more streams than the hardware prefetcher follows).
      int64_t kk = 0;
#if ATTNKIT_HAVE_TRANSPOSE8
      const int64_t next_rows = std::min(kMR, mc - ip - kMR);
      for (; kk + 8 <= kc; kk += 8) {
        if (kk % 16 == 0)
          for (int64_t r = 0; r < next_rows; ++r) hwy::Prefetch(src + (kMR + r) * g.lda + kk);
        PackA6x8(src + kk, g.lda, panel + kk * kMR);
      }
#endif
      for (; kk < kc; ++kk)
        for (int64_t r = 0; r < kMR; ++r) panel[kk * kMR + r] = src[r * g.lda + kk];
      continue;
    }
    if (!g.trans_a) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = g.a + (i0 + ip + r) * g.lda + p0;
        for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kMR + r] = src[kk];
      }
    } else {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = g.a + (p0 + kk) * g.lda + i0 + ip;
        for (int64_t r = 0; r < rows; ++r) panel[kk * kMR + r] = src[r];
      }
    }
    for (int64_t r = rows; r < kMR; ++r)
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kMR + r] = 0.0f;
  }
}

// Rows of a row-major B prefetched ahead of the copy in PackB.
inline constexpr int64_t kPackBAhead = 4;

// Whole NR-column panels of a row-major B (nr = 2 vectors, any lane count) copied row by
// row, each column also added up in row order into colsum (colsum + column, kept in registers
// over the kc rows).
template <int64_t kWhole>
HWY_INLINE void PackBSummed(const GemmArgs& g, int64_t p0, int64_t kc, int64_t nr,
                            const float* src0, float* HWY_RESTRICT panel, float* HWY_RESTRICT colsum) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  VF sum[kWhole][2];
  for (int64_t w = 0; w < kWhole; ++w)
    for (int64_t h = 0; h < 2; ++h) sum[w][h] = hn::LoadU(d, colsum + w * nr + h * lanes);
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* src = src0 + (p0 + kk) * g.ldb;
    if (kk + kPackBAhead < kc)
      for (int64_t w = 0; w < kWhole; ++w) hwy::Prefetch(src + kPackBAhead * g.ldb + w * nr);
    for (int64_t w = 0; w < kWhole; ++w)
      for (int64_t h = 0; h < 2; ++h) {
        const VF v = hn::LoadU(d, src + w * nr + h * lanes);
        hn::StoreU(v, d, panel + w * nr * kc + kk * nr + h * lanes);
        sum[w][h] = hn::Add(sum[w][h], v);
      }
  }
  for (int64_t w = 0; w < kWhole; ++w)
    for (int64_t h = 0; h < 2; ++h) hn::StoreU(sum[w][h], d, colsum + w * nr + h * lanes);
}

// op(B)[p0.., j0..] → kc × nc as NR-column panels, each kc × NR (kk-major). colsum (B not
// transposed; nullptr for none): the nc columns' sums, added to in row order.
inline void PackB(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
                  float* HWY_RESTRICT out, float* HWY_RESTRICT colsum = nullptr) {
  // Whole panels copied together, row by row: 256 bytes of each row of B read in order (rows
  // 1 KB apart fall in a few L1 sets when walked panel by panel; more panels at once, kc·nr·4
  // bytes apart, would be as many write streams, often in one L1 set).
  const int64_t at_once = std::clamp<int64_t>(64 / nr, 1, 4);
  for (int64_t jp = 0; jp < nc; jp += nr) {
    const int64_t cols = std::min(nr, nc - jp);
    float* panel = out + jp * kc;
    if (colsum && !g.trans_b && cols == nr) {  // whole panels, summed
      const int64_t whole = std::min(at_once, (nc - jp) / nr);
      const float* src0 = g.b + j0 + jp;
      switch (whole) {
        case 4: PackBSummed<4>(g, p0, kc, nr, src0, panel, colsum + jp); break;
        case 3: PackBSummed<3>(g, p0, kc, nr, src0, panel, colsum + jp); break;
        case 2: PackBSummed<2>(g, p0, kc, nr, src0, panel, colsum + jp); break;
        default: PackBSummed<1>(g, p0, kc, nr, src0, panel, colsum + jp); break;
      }
      jp += (whole - 1) * nr;
      continue;
    }
    if (!g.trans_b && cols == nr) {  // whole panel rows (a fixed-size copy)
      const int64_t whole = std::min(at_once, (nc - jp) / nr);
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = g.b + (p0 + kk) * g.ldb + j0 + jp;
        if (kk + kPackBAhead < kc) {  // a row a few rows ahead (rows may be 1 KB apart)
          for (int64_t w = 0; w < whole; ++w) hwy::Prefetch(src + kPackBAhead * g.ldb + w * nr);
        }
        for (int64_t w = 0; w < whole; ++w)
          std::memcpy(panel + w * nr * kc + kk * nr, src + w * nr, static_cast<size_t>(nr) * 4);
      }
      jp += (whole - 1) * nr;
      continue;
    }
#if ATTNKIT_HAVE_TRANSPOSE8
    if (g.trans_b && cols == nr && kc >= 8) {  // nr / 8 register transposes of 8 × 8
      const float* src = g.b + (j0 + jp) * g.ldb + p0;
      for (int64_t kk = 0;; kk += 8) {
        kk = std::min(kk, kc - 8);  // a ragged last block rewrites the same values
        for (int64_t c = 0; c < nr; c += 8)
          TransposeBlock8x8(src + c * g.ldb + kk, g.ldb, panel + kk * nr + c, nr);
        if (kk + 8 >= kc) break;
      }
      continue;
    }
#endif
    if (!g.trans_b) {
      for (int64_t kk = 0; kk < kc; ++kk) {
        const float* src = g.b + (p0 + kk) * g.ldb + j0 + jp;
        float* dst = panel + kk * nr;
        for (int64_t j = 0; j < cols; ++j) dst[j] = src[j];
        for (int64_t j = cols; j < nr; ++j) dst[j] = 0.0f;
        if (colsum)
          for (int64_t j = 0; j < cols; ++j) colsum[jp + j] += src[j];
      }
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        const float* src = g.b + (j0 + jp + j) * g.ldb + p0;
        for (int64_t kk = 0; kk < kc; ++kk) panel[kk * nr + j] = src[kk];
      }
      for (int64_t kk = 0; kk < kc; ++kk)
        for (int64_t j = cols; j < nr; ++j) panel[kk * nr + j] = 0.0f;
    }
  }
}

// Rows [ic, ic + mc) × panel columns [jr0, jr1) of the block at column jc (nc wide) for the
// k-block pc of depth kc: ap holds the packed A block, bp the packed B block (kc × nc).
// bias: the block's bias when pc is the last k-block, else nullptr. last: pc is the last
// k-block (the epilogue, if any, follows each tile's store).
HWY_INLINE void PackedPanels(DF d, const GemmArgs& g, const float* HWY_RESTRICT ap,
                             const float* HWY_RESTRICT bp, int64_t ic, int64_t mc, int64_t jc,
                             int64_t jr0, int64_t jr1, int64_t nc, int64_t kc, Combine combine,
                             const float* bias, bool last) {
  const bool epilogue = last && g.has_epilogue();
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  VF acc[kMR][2];
  for (int64_t jr = jr0; jr < jr1; jr += nr) {
    const size_t cols = static_cast<size_t>(std::min(nr, nc - jr));
    const float* bpanel = bp + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += kMR) {
      const int64_t rows = std::min(kMR, mc - ir);
      // C rows of a tile are ldc apart; fetch them while the k-loop runs.
      float* ct = g.c + (ic + ir) * g.ldc + jc + jr;
      for (int64_t r = 0; r < rows; ++r) {
        hwy::Prefetch(ct + r * g.ldc);
        hwy::Prefetch(ct + r * g.ldc + nr - 1);
      }
      // So are the epilogue's operands (they lie in memory like C).
      for (const auto& [op, ld] : {std::pair<const float*, int64_t>{g.mask, g.ldm}, {g.addend, g.ld_addend}}) {
        if (!epilogue || !op) continue;
        const float* t = op + (ic + ir) * ld + jc + jr;
        for (int64_t r = 0; r < rows; ++r) {
          hwy::Prefetch(t + r * ld);
          hwy::Prefetch(t + r * ld + nr - 1);
        }
      }
      AccumulateTile<6, 2>(d, kc, ap + ir * kc, 1, kMR, bpanel, bpanel + nr / 2, nr, acc);
      if (epilogue) {
        StoreTileEpilogue(d, g, acc, rows, cols, combine, ct, bias ? bias + jr : nullptr, ic + ir, jc + jr);
      } else if (bias) {
        StoreTile<true>(d, acc, rows, cols, g.alpha, g.beta, combine, ct, g.ldc, bias + jr);
      } else {
        StoreTile(d, acc, rows, cols, g.alpha, g.beta, combine, ct, g.ldc);
      }
    }
  }
}

inline void GemmPacked(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  using gemm_detail::kKC;
  using gemm_detail::kMC;
  using gemm_detail::kNC;
  const DF d;
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t nc_max = std::min(kNC, (j1 - j0 + nr - 1) / nr * nr);
  const int64_t mc_max = std::min(kMC, (i1 - i0 + kMR - 1) / kMR * kMR);
  const int64_t kc_max = std::min(kKC, g.k);
  float* bp = gemm_detail::thread_scratch(1, static_cast<size_t>(kc_max * nc_max));
  float* ap = gemm_detail::thread_scratch(0, static_cast<size_t>(kc_max * mc_max + kPackASlack));
  // Column sums of B by the block holding row 0 (one owner per column whatever the slicing).
  float* colsum = g.colsum && !g.trans_b && i0 == 0 ? g.colsum : nullptr;
  if (colsum && !g.colsum_accumulate) std::fill(colsum + j0, colsum + j1, 0.0f);
  for (int64_t jc = j0; jc < j1; jc += kNC) {
    const int64_t nc = std::min(kNC, j1 - jc);
    for (int64_t pc = 0; pc < g.k; pc += kKC) {
      const int64_t kc = std::min(kKC, g.k - pc);
      const Combine combine = pc == 0 ? FirstCombine(g.beta) : Combine::kAdd;
      const float* bias = g.bias && pc + kc >= g.k ? g.bias + jc : nullptr;  // last k block
      PackB(g, pc, kc, jc, nc, nr, bp, colsum ? colsum + jc : nullptr);
      for (int64_t ic = i0; ic < i1; ic += kMC) {
        const int64_t mc = std::min(kMC, i1 - ic);
        PackA(g, ic, mc, pc, kc, ap);
        PackedPanels(d, g, ap, bp, ic, mc, jc, 0, nc, nc, kc, combine, bias, pc + kc >= g.k);
      }
    }
  }
}

// ------------------------------------------------------------------ short-k path
// Many independent attention products (S = Q·Kᵀ, P·V, dS·K, Pᵀ·dY, dSᵀ·Q: k of 64 or 128,
// A and B rows 1 KB apart in [B, T, H·dh] activations), each called on its own. Packing A
// costs as much as the n / NR column panels that reuse it, and B read in place (or as a
// k × n row-major panel) has its k rows ldb floats apart, 1 KB strides that fall in a few L1
// sets. Here op(B) is packed once per call into NR-column micro-panels of the whole k (each
// contiguous, at most 32 KB in all per column block), A is broadcast in place (either layout),
// and each row tile of C passes over every micro-panel of the block while the next tile's
// rows of A and C are prefetched (with the operands of 128 products passing through, they
// come from L3 or memory: 15-20% of the time without). Every element is one FMA chain over k
// from zero, then StoreTile: the same operations whatever block or slice it falls in.

inline constexpr int64_t kShortKBlockFloats = 8192;  // packed op(B) of one column block: 32 KB

// Rows i..i+R of C over the columns [jc, jc + nc) whose op(B) is packed at bp (k × NR panels);
// the block's rows end at i1.
template <int R, bool kBias>
HWY_INLINE void ShortKRows(DF d, const GemmArgs& g, int64_t i, int64_t i1,
                           const float* HWY_RESTRICT bp, int64_t jc, int64_t nc) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d)), nr = 2 * lanes;
  const float* a = g.a + i * g.lda;
  int64_t ar = g.lda, ak = 1;
  // op(A)(i + r, kk) = A[kk·lda + i + r] when A is transposed: broadcast in place too (a
  // copy into a small panel per tile cost more than it saved).
  if (g.trans_a) a = g.a + i, ar = 1, ak = g.lda;
  float* c = g.c + i * g.ldc + jc;
  const Combine combine = FirstCombine(g.beta);
  // The next row tile's rows of A and C come from far away (the operands of many products
  // pass through the caches): fetch them while this tile computes, spread over its panels.
  const int64_t next_rows = std::min<int64_t>(kMR, i1 - i - R);
  const int64_t panels = (nc + nr - 1) / nr;
  VF acc[kMR][2];
  for (int64_t jp = 0; jp < nc; jp += nr) {
    if (next_rows > 0) {
      const int64_t w = jp / nr;
      for (int64_t r = 0; r < next_rows; ++r) {
        const float* cn = c + (R + r) * g.ldc + jp;
        hwy::Prefetch(cn);
        hwy::Prefetch(cn + std::min(nr, nc - jp) - 1);
      }
      if (!g.trans_a) {  // rows of k floats: this panel's share of their cache lines
        const int64_t lines = (g.k + 15) / 16, l0 = w * lines / panels, l1 = (w + 1) * lines / panels;
        for (int64_t r = 0; r < next_rows; ++r) {
          const float* an = g.a + (i + R + r) * g.lda;
          for (int64_t l = l0; l < l1; ++l) hwy::Prefetch(an + l * 16);
          if (l1 == lines) hwy::Prefetch(an + g.k - 1);
        }
      } else {  // k rows of next_rows floats
        const int64_t k0 = w * g.k / panels, k1 = (w + 1) * g.k / panels;
        for (int64_t kk = k0; kk < k1; ++kk) {
          const float* an = g.a + kk * g.lda + i + R;
          hwy::Prefetch(an);
          hwy::Prefetch(an + next_rows - 1);
        }
      }
    }
    const float* bpanel = bp + jp * g.k;
    AccumulateTile<R, 2>(d, g.k, a, ar, ak, bpanel, bpanel + lanes, nr, acc);
    const size_t cols = static_cast<size_t>(std::min(nr, nc - jp));
    StoreTile<kBias>(d, acc, R, cols, g.alpha, g.beta, combine, c + jp, g.ldc,
                     kBias ? g.bias + jc + jp : nullptr);
  }
}

template <bool kBias>
HWY_INLINE void ShortKBlock(DF d, const GemmArgs& g, const float* bp, int64_t i0, int64_t i1,
                            int64_t jc, int64_t nc) {
  ForEachRowTile(i0, i1, [&](auto r_tag, int64_t i) {  // the row tiles of DirectBlock
    ShortKRows<decltype(r_tag)::value, kBias>(d, g, i, i1, bp, jc, nc);
  });
}

inline void GemmShortK(const GemmArgs& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const DF d;
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t ncb = std::max(nr, kShortKBlockFloats / g.k / nr * nr);
  const int64_t nc_max = std::min(ncb, (j1 - j0 + nr - 1) / nr * nr);
  float* bp = gemm_detail::thread_scratch(1, static_cast<size_t>(nc_max * g.k));
  for (int64_t jc = j0; jc < j1; jc += ncb) {
    const int64_t nc = std::min(ncb, j1 - jc);
    PackB(g, 0, g.k, jc, nc, nr, bp);
    if (g.bias) {
      ShortKBlock<true>(d, g, bp, i0, i1, jc, nc);
    } else {
      ShortKBlock<false>(d, g, bp, i0, i1, jc, nc);
    }
  }
}

// ------------------------------------------------------------------ dynamic packed path
// sgemm's own parallel region on the packed path: the threads take (row block, column chunk)
// tasks from a shared counter instead of a fixed share, so a thread slowed down by other work
// on the machine leaves its share to the others (no barrier to wait at either). Tasks run
// chunk by chunk; a thread packs a chunk of op(B) (all of k) when it first takes a task in it
// and keeps it for the chunk's next row blocks. Each task walks the k-blocks in order with the
// same tiles and combines as GemmPacked: every element of C gets the same operations, bitwise.

inline constexpr int64_t kTaskCols = 256;  // columns of a chunk: a KC slab of it is 384 KB

// next: the task counter, 0 on entry, shared by the threads. task_rows: rows of a task, a
// multiple of MR up to MC (a blocking choice only: it changes no bits).
inline void GemmPackedDynamic(const GemmArgs& g, std::atomic<int64_t>* next, int64_t task_rows) {
  using gemm_detail::kKC;
  const int64_t kMC = task_rows;
  const DF d;
  const int64_t nr = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t kc_max = std::min(kKC, g.k);
  const int64_t mc_max = std::min(kMC, (g.m + kMR - 1) / kMR * kMR);
  const int64_t nc_max = std::min(kTaskCols, (g.n + nr - 1) / nr * nr);
  float* ap = gemm_detail::thread_scratch(0, static_cast<size_t>(kc_max * mc_max + kPackASlack));
  // The chunk: KC slab pc at bp + pc·ncp.
  float* bp = gemm_detail::thread_scratch(1, static_cast<size_t>(g.k * nc_max));
  const int64_t row_tasks = (g.m + kMC - 1) / kMC;
  const int64_t col_tasks = (g.n + kTaskCols - 1) / kTaskCols;
  int64_t packed_chunk = -1;
  for (;;) {
    const int64_t t = next->fetch_add(1, std::memory_order_relaxed);
    if (t >= row_tasks * col_tasks) break;
    const int64_t chunk = t / row_tasks, ic = t % row_tasks * kMC, jc = chunk * kTaskCols;
    const int64_t mc = std::min(kMC, g.m - ic), nc = std::min(kTaskCols, g.n - jc);
    const int64_t ncp = (nc + nr - 1) / nr * nr;
    if (chunk != packed_chunk) {
      for (int64_t pc = 0; pc < g.k; pc += kKC) {
        PackB(g, pc, std::min(kKC, g.k - pc), jc, nc, nr, bp + pc * ncp);
      }
      packed_chunk = chunk;
    }
    for (int64_t pc = 0; pc < g.k; pc += kKC) {
      const int64_t kc = std::min(kKC, g.k - pc);
      const Combine combine = pc == 0 ? FirstCombine(g.beta) : Combine::kAdd;
      const float* bias = g.bias && pc + kc >= g.k ? g.bias + jc : nullptr;  // last k block
      PackA(g, ic, mc, pc, kc, ap);
      PackedPanels(d, g, ap, bp + pc * ncp, ic, mc, jc, 0, nc, nc, kc, combine, bias, pc + kc >= g.k);
    }
  }
}

}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ATTNKIT_OPS_GEMM_PACKED_INL_H_

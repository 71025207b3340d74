// Cross-entropy fused with log-softmax.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cross_entropy.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cross_entropy.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// Row max (as a broadcast vector) and Σ exp(logit − max) of one row.
struct RowStats {
  hn::Vec<DF> vmax;
  float sum;
};

HWY_INLINE RowStats ComputeRowStats(const float* row, int64_t classes) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vlowest = hn::Set(d, -HUGE_VALF);
  auto vmax = vlowest;
  int64_t j = 0;
  for (; j + N <= classes; j += N) vmax = hn::Max(vmax, hn::LoadU(d, row + j));
  const size_t tail = static_cast<size_t>(classes - j);
  if (tail) vmax = hn::Max(vmax, hn::IfThenElse(hn::FirstN(d, tail), LoadTail(d, row + j, tail), vlowest));
  vmax = hn::MaxOfLanes(d, vmax);
  auto vsum = hn::Zero(d);
  for (j = 0; j + N <= classes; j += N) {
    vsum = hn::Add(vsum, ExpNonPositiveOrZero(d, hn::Sub(hn::LoadU(d, row + j), vmax)));
  }
  if (tail) {
    vsum = hn::Add(vsum, hn::IfThenElseZero(hn::FirstN(d, tail),
                                            ExpNonPositiveOrZero(d, hn::Sub(LoadTail(d, row + j, tail), vmax))));
  }
  return {vmax, hn::GetLane(hn::SumOfLanes(d, vsum))};
}

// Rows of at most kShortClasses classes (the lesson models have 2 to 24) go through a
// transposed layout, one row per lane: lane l of a block holds row rb + l, t[j·N + l] its
// logit j. A short last block repeats its last row in the spare lanes. Every row goes through
// the same lane operations whichever block or lane it falls in, so results do not depend on
// the slice count.
inline constexpr int64_t kShortClasses = 32;

class ShortRows {
 public:
  using D = DF;
  using DI = hn::RebindToSigned<D>;
  static constexpr size_t kMaxN = hn::MaxLanes(D());

  ShortRows(const float* logits, const int32_t* targets, int64_t classes)
      : N_(static_cast<int64_t>(hn::Lanes(D()))), classes_(classes), logits_(logits), targets_(targets),
        block_offsets_(hn::Mul(hn::Iota(DI(), 0), hn::Set(DI(), static_cast<int32_t>(classes)))) {}
  int64_t lanes() const { return N_; }
  float* t() { return t_; }
  hn::Mask<D> counted() const { return counted_; }

  // Rows [rb, rb + count), count <= lanes(): gathers the block into t and returns the row
  // maxima, one per lane.
  hn::Vec<D> start(int64_t rb, int64_t count) {
    const D d;
    const DI di;
    rb_ = rb;
    count_ = count;
    if (count == N_) {
      // A whole block: its targets are one vector (scalar stores read back as vectors stalled
      // store forwarding three times a block).
      const auto t = hn::LoadU(di, targets_ + rb);
      const auto ignored = hn::Lt(t, hn::Zero(di));
      row_offsets_ = block_offsets_;
      target_offsets_ = hn::Add(row_offsets_, hn::IfThenZeroElse(ignored, t));
      counted_ = hn::RebindMask(d, hn::Not(ignored));
    } else {
      for (int64_t l = 0; l < N_; ++l) {
        const int64_t r = rb + std::min(l, count - 1);
        const int32_t t = targets_[r];
        row_offset_[l] = static_cast<int32_t>((r - rb) * classes_);
        target_[l] = t < 0 ? 0 : t;
        ignored_[l] = t < 0 ? -1 : 0;
      }
      row_offsets_ = hn::Load(di, row_offset_);
      target_offsets_ = hn::Add(row_offsets_, hn::Load(di, target_));
      counted_ = hn::RebindMask(d, hn::Eq(hn::Load(di, ignored_), hn::Zero(di)));
    }
    const float* base = logits_ + rb * classes_;
    auto vmax = hn::Set(d, -HUGE_VALF);
#if ATTNKIT_HAVE_TRANSPOSE8
    if (Transposable()) {
      BlockRowsToLanes(base, N_, classes_, t_);
      for (int64_t j = 0; j < classes_; ++j) vmax = hn::Max(vmax, hn::Load(d, t_ + j * N_));
      return vmax;
    }
#endif
    for (int64_t j = 0; j < classes_; ++j) {
      const auto col = hn::GatherIndex(d, base + j, row_offsets_);
      hn::Store(col, d, t_ + j * N_);
      vmax = hn::Max(vmax, col);
    }
    return vmax;
  }
  // Per lane: the logit of the row's target (of class 0 for ignored rows).
  hn::Vec<D> target_logit() const {
    return hn::GatherIndex(D(), logits_ + rb_ * classes_, target_offsets_);
  }
  // Per lane: the row's target as a float (0 for ignored rows).
  hn::Vec<D> target_class() const {
    return hn::ConvertTo(D(), hn::Sub(target_offsets_, row_offsets_));
  }
  // out[rb + l] = v[l] for the rows of the block.
  void store_per_row(hn::Vec<D> v, float* out) const {
    const D d;
    if (count_ == N_) {
      hn::StoreU(v, d, out + rb_);
    } else {
      StoreTail(d, v, out + rb_, static_cast<size_t>(count_));
    }
  }
  // out rows of the block := t (or += t), back in row-major order.
  template <class Back>
  void store_rows(float* out, bool accumulate, Back& back) {
    const D d;
    const DI di;
    float* ob = out + rb_ * classes_;
#if ATTNKIT_HAVE_TRANSPOSE8
    if (Transposable()) {
      if (accumulate) {
        HWY_ALIGN float old[kShortClasses * kMaxN];
        BlockRowsToLanes(ob, N_, classes_, old);
        for (int64_t j = 0; j < classes_; ++j) {
          hn::Store(hn::Add(hn::Load(d, old + j * N_), hn::Load(d, t_ + j * N_)), d, t_ + j * N_);
        }
      }
      BlockLanesToRows(t_, N_, classes_, ob);
      return;
    }
#endif
    const int32_t* transpose_back = back.get();
    const int64_t total = count_ * classes_;
    int64_t k = 0;
    // accumulate is tested outside the loops (see WithFlag in ops_simd-inl.h).
    if (accumulate) {
      for (; k + N_ <= total; k += N_)
        hn::StoreU(hn::Add(hn::LoadU(d, ob + k), hn::GatherIndex(d, t_, hn::LoadU(di, transpose_back + k))), d, ob + k);
    } else {
      for (; k + N_ <= total; k += N_) hn::StoreU(hn::GatherIndex(d, t_, hn::LoadU(di, transpose_back + k)), d, ob + k);
    }
    if (k < total) {
      const size_t n = static_cast<size_t>(total - k);
      auto v = hn::GatherIndex(d, t_, hn::LoadU(di, transpose_back + k));
      if (accumulate) {
        StoreTail(d, hn::Add(LoadTail(d, ob + k, n), v), ob + k, n);
      } else {
        StoreTail(d, v, ob + k, n);
      }
    }
  }

 private:
  // A whole block (8 or 16 rows) with at least 8 classes: 8 × 8 register transposes instead
  // of gathers.
  bool Transposable() const { return N_ % 8 == 0 && count_ == N_ && classes_ >= 8; }

  HWY_ALIGN float t_[kShortClasses * kMaxN];
  HWY_ALIGN int32_t row_offset_[kMaxN];
  HWY_ALIGN int32_t target_[kMaxN];
  HWY_ALIGN int32_t ignored_[kMaxN];
  int64_t N_, classes_;
  const float* logits_;
  const int32_t* targets_;
  int64_t rb_ = 0, count_ = 0;
  const hn::Vec<DI> block_offsets_;  // row l·classes in lane l: a whole block's row offsets
  hn::Vec<DI> target_offsets_ = hn::Zero(DI()), row_offsets_ = hn::Zero(DI());
  hn::Mask<D> counted_ = hn::FirstN(D(), 0);
};

// Σ_j exp(t[j·N + l] − vmax[l]) per lane; stores the exponentials back into t when `keep`.
// (Two or four classes a step, their polynomial chains side by side: no faster on Zen 4.)
HWY_INLINE hn::Vec<DF> ShortRowsExpSum(float* t, int64_t N, int64_t classes, hn::Vec<DF> vmax,
                                       bool keep) {
  const DF d;
  auto vsum = hn::Zero(d);
  for (int64_t j = 0; j < classes; ++j) {
    const auto e = ExpNonPositiveOrZero(d, hn::Sub(hn::Load(d, t + j * N), vmax));
    if (keep) hn::Store(e, d, t + j * N);
    vsum = hn::Add(vsum, e);
  }
  return vsum;
}

// Row-major index k of a block of N short rows → its place in the transposed layout.
void TransposeBackIndex(int64_t classes, int64_t N, int32_t* index) {
  for (int64_t k = 0; k < classes * N; ++k) index[k] = static_cast<int32_t>((k % classes) * N + k / classes);
}

// TransposeBackIndex's table, built on first use: whole blocks of at least 8 classes go back
// by register transposes and never read it (built on every call: 640 rows of 10 classes, the
// forward and backward 1.06x the time, AMD EPYC Zen 4, AVX3).
class TransposeBack {
 public:
  TransposeBack(int64_t classes, int64_t N) : classes_(classes), N_(N) {}
  const int32_t* get() {
    if (!built_) {
      TransposeBackIndex(classes_, N_, index_);
      built_ = true;
    }
    return index_;
  }

 private:
  int64_t classes_, N_;
  bool built_ = false;
  HWY_ALIGN int32_t index_[kShortClasses * ShortRows::kMaxN];
};

void CrossEntropyForward(const float* logits, const int32_t* targets, float* row_loss,
                         int64_t rows, int64_t classes, float* probs, Slice s) {
  const DF d;
  const auto [r0, r1] = slice_range(rows, s);
  if (classes <= kShortClasses && classes > 0) {
    ShortRows blocks(logits, targets, classes);
    const int64_t N = blocks.lanes();
    TransposeBack transpose_back(classes, N);
    float* t = blocks.t();
    for (int64_t rb = r0; rb < r1; rb += N) {
      const auto vmax = blocks.start(rb, std::min(N, r1 - rb));
      const auto target_logit = blocks.target_logit();  // before t is overwritten
      const auto vsum = ShortRowsExpSum(t, N, classes, vmax, probs != nullptr);
      // logsumexp − logit[t] = log(sum) − (logit[t] − max): the max cancels exactly.
      const auto loss = hn::Sub(hn::Log(d, vsum), hn::Sub(target_logit, vmax));
      blocks.store_per_row(hn::IfThenElseZero(blocks.counted(), loss), row_loss);
      if (probs) {
        const auto inv = hn::Div(hn::Set(d, 1.0f), vsum);
        for (int64_t j = 0; j < classes; ++j) hn::Store(hn::Mul(hn::Load(d, t + j * N), inv), d, t + j * N);
        blocks.store_rows(probs, false, transpose_back);
      }
    }
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = logits + r * classes;
    if (targets[r] < 0 && !probs) {
      row_loss[r] = 0.0f;
      continue;
    }
    const RowStats st = ComputeRowStats(row, classes);
    // logsumexp − logit[t] = log(sum) − (logit[t] − max): the max cancels exactly.
    row_loss[r] = targets[r] < 0 ? 0.0f : std::log(st.sum) - (row[targets[r]] - hn::GetLane(st.vmax));
    if (probs) {
      const auto inv = hn::Set(d, 1.0f / st.sum);
      ForEachVector(d, probs + r * classes, 0, classes, [&](int64_t j, size_t n) {
        return hn::Mul(ExpNonPositiveOrZero(d, hn::Sub(LoadUpTo(d, row + j, n), st.vmax)), inv);
      });
    }
  }
}

// From the forward's probabilities: dlogits = scale·(p − onehot(t)), row-major, runs of
// counted rows as one flat array.
void CrossEntropyBackwardProbs(const float* probs, const int32_t* targets, float* dlogits,
                               int64_t rows, int64_t classes, float scale, bool accumulate, Slice s) {
  const DF d;
  const auto vscale = hn::Set(d, scale);
  const auto [r0, r1] = slice_range(rows, s);
  for (int64_t r = r0; r < r1;) {
    if (targets[r] < 0) {  // ignored: 0, or unchanged when accumulating
      if (!accumulate) std::memset(dlogits + r * classes, 0, static_cast<size_t>(classes) * sizeof(float));
      ++r;
      continue;
    }
    int64_t e = r + 1;
    while (e < r1 && targets[e] >= 0) ++e;
    const float* p = probs + r * classes;
    float* out = dlogits + r * classes;
    // One explicit FMA when accumulating (a Mul and an Add the compiler may or may not fuse
    // would round differently in the full-vector and tail code).
    WithFlag(accumulate, [&](auto kAccumulate) {
      ForEachVector(d, out, 0, (e - r) * classes, [&](int64_t j, size_t n) {
        if constexpr (decltype(kAccumulate)::value) {
          return hn::MulAdd(LoadUpTo(d, p + j, n), vscale, LoadUpTo(d, out + j, n));
        } else {
          return hn::Mul(LoadUpTo(d, p + j, n), vscale);
        }
      });
    });
    for (int64_t q = r; q < e; ++q) dlogits[q * classes + targets[q]] -= scale;
    r = e;
  }
}

// In the forward pass loss = logsumexp(z) − z[t], so dloss/dz = softmax(z) − onehot(t).
void CrossEntropyBackward(const float* logits, const int32_t* targets, float* dlogits,
                          int64_t rows, int64_t classes, float scale, bool accumulate,
                          Slice s) {
  const DF d;
  const auto [r0, r1] = slice_range(rows, s);
  if (classes <= kShortClasses && classes > 0) {
    ShortRows blocks(logits, targets, classes);
    const int64_t N = blocks.lanes();
    TransposeBack transpose_back(classes, N);
    const auto vscale = hn::Set(d, scale);
    float* t = blocks.t();
    for (int64_t rb = r0; rb < r1; rb += N) {
      const auto vmax = blocks.start(rb, std::min(N, r1 - rb));
      const auto vsum = ShortRowsExpSum(t, N, classes, vmax, true);
      const auto counted = blocks.counted();
      const auto vscale_inv = hn::Div(vscale, vsum);
      const auto vt = blocks.target_class();
      for (int64_t j = 0; j < classes; ++j) {
        const auto scaled_p = hn::Mul(hn::Load(d, t + j * N), vscale_inv);
        const auto onehot = hn::IfThenElseZero(hn::Eq(hn::Set(d, static_cast<float>(j)), vt), vscale);
        // Ignored rows: 0 (and dlogits unchanged when accumulating).
        hn::Store(hn::IfThenElseZero(counted, hn::Sub(scaled_p, onehot)), d, t + j * N);
      }
      blocks.store_rows(dlogits, accumulate, transpose_back);
    }
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    float* out = dlogits + r * classes;
    const int32_t t = targets[r];
    if (t < 0) {
      if (!accumulate) ForEachVector(d, out, 0, classes, [&](int64_t, size_t) { return hn::Zero(d); });
      continue;
    }
    const float* row = logits + r * classes;
    const RowStats st = ComputeRowStats(row, classes);
    const auto vscale_inv = hn::Set(d, scale / st.sum), vscale = hn::Set(d, scale);
    const auto vt = hn::Set(d, static_cast<float>(t));
    WithFlag(accumulate, [&](auto kAccumulate) {
      ForEachVector(d, out, 0, classes, [&](int64_t j, size_t n) {
        const auto scaled_p = hn::Mul(ExpNonPositiveOrZero(d, hn::Sub(LoadUpTo(d, row + j, n), st.vmax)), vscale_inv);
        const auto v = hn::Sub(scaled_p, hn::IfThenElseZero(hn::Eq(hn::Iota(d, static_cast<float>(j)), vt), vscale));
        if constexpr (decltype(kAccumulate)::value) {
          return hn::Add(LoadUpTo(d, out + j, n), v);
        } else {
          return v;
        }
      });
    });
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(CrossEntropyForward);
HWY_EXPORT(CrossEntropyBackward);
HWY_EXPORT(CrossEntropyBackwardProbs);

void cross_entropy_forward(const float* logits, const int32_t* targets, float* row_loss,
                           int64_t rows, int64_t classes, Slice s, float* probs) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyForward)(logits, targets, row_loss, rows, classes, probs, s);
}
void cross_entropy_backward_from_probs(const float* probs, const int32_t* targets, float* dlogits,
                                       int64_t rows, int64_t classes, float scale, bool accumulate,
                                       Slice s) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyBackwardProbs)(probs, targets, dlogits, rows, classes, scale,
                                                  accumulate, s);
}
void cross_entropy_backward(const float* logits, const int32_t* targets, float* dlogits,
                            int64_t rows, int64_t classes, float scale, bool accumulate,
                            Slice s) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyBackward)(logits, targets, dlogits, rows, classes, scale,
                                             accumulate, s);
}
}  // namespace attnkit
#endif

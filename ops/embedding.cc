// Embedding gather and scatter-add.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "ops/embedding.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/embedding.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

void EmbeddingForward(const float* table, const int32_t* ids, float* y, int64_t n,
                      int64_t vocab, int64_t dim, const float* addend, int64_t addend_rows, Slice s) {
  const DF d;
  const auto [i0, i1] = slice_range(n, s);
  if (!addend) {
    for (int64_t i = i0; i < i1; ++i) {
      const float* row = table + static_cast<int64_t>(ids[i]) * dim;
      ForEachVector(d, y + i * dim, 0, dim, [&](int64_t j, size_t m) { return LoadUpTo(d, row + j, m); });
    }
    return;
  }
  int64_t a = addend_rows > 0 ? i0 % addend_rows : 0;
  for (int64_t i = i0; i < i1; ++i) {
    const float* row = table + static_cast<int64_t>(ids[i]) * dim;
    const float* add = addend + a * dim;
    ForEachVector(d, y + i * dim, 0, dim, [&](int64_t j, size_t m) {
      return hn::Add(LoadUpTo(d, row + j, m), LoadUpTo(d, add + j, m));
    });
    if (++a == addend_rows) a = 0;
  }
}

// In the forward pass row ids[i] was copied to y[i]: its gradient is the sum of those dy rows.
// Every slice scans all ids in order and only adds to the table rows it owns.
void EmbeddingBackward(const int32_t* ids, const float* dy, float* dtable, int64_t n,
                       int64_t vocab, int64_t dim, Slice s, bool accumulate) {
  const DF d;
  const auto [v0, v1] = slice_range(vocab, s);
  if (!accumulate && v1 > v0) std::memset(dtable + v0 * dim, 0, static_cast<size_t>((v1 - v0) * dim) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < v0 || id >= v1) continue;
    float* row = dtable + id * dim;
    const float* dyr = dy + i * dim;
    ForEachVector(d, row, 0, dim, [&](int64_t j, size_t m) {
      return hn::Add(LoadUpTo(d, row + j, m), LoadUpTo(d, dyr + j, m));
    });
  }
}

// Columns [c0, c0 + NV·N) of embedding_addend_backward: the addend row's sums stay in NV
// registers while its dy rows pass (a second pass over dy for bias_backward was ~40% of the
// two gradients' time on neighbor-sum's [640, 128] pre-activation gradient).
// kTail: one partial vector of `tail` columns (dim not a multiple of the lanes), loaded and
// stored as ForEachVector's last one.
template <int NV, bool kTail = false>
HWY_INLINE void EmbeddingAddendColumns(DF d, const int32_t* HWY_RESTRICT ids, const float* HWY_RESTRICT dy,
                                       float* HWY_RESTRICT dtable, float* HWY_RESTRICT daddend, int64_t n,
                                       int64_t dim, int64_t addend_rows, int64_t c0, int64_t v0, int64_t v1,
                                       int64_t a0, int64_t a1, bool accumulate_addend, size_t tail = 0) {
  static_assert(!kTail || NV == 1, "one partial vector");
  using V = hn::Vec<DF>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto load = [&](const float* p) -> V {
    if constexpr (kTail) {
      return LoadUpTo(d, p, tail);
    } else {
      return hn::LoadU(d, p);
    }
  };
  auto store = [&](V v, float* p) {
    if constexpr (kTail) {
      StoreTail(d, v, p, tail);
    } else {
      hn::StoreU(v, d, p);
    }
  };
  for (int64_t a = 0; a < addend_rows; ++a) {
    const bool own_a = a >= a0 && a < a1;
    V acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = hn::Zero(d);
    if (own_a && accumulate_addend)
      for (int v = 0; v < NV; ++v) acc[v] = load(daddend + a * dim + c0 + v * N);
    for (int64_t i = a; i < n; i += addend_rows) {
      const int64_t id = ids[i];
      const bool own_id = id >= v0 && id < v1;
      if (!own_a && !own_id) continue;
      const float* HWY_RESTRICT row = dy + i * dim + c0;
      V x[NV];
      for (int v = 0; v < NV; ++v) x[v] = load(row + v * N);
      if (own_a)
        for (int v = 0; v < NV; ++v) acc[v] = hn::Add(acc[v], x[v]);
      if (own_id) {
        float* HWY_RESTRICT t = dtable + id * dim + c0;
        for (int v = 0; v < NV; ++v) store(hn::Add(load(t + v * N), x[v]), t + v * N);
      }
    }
    if (own_a)
      for (int v = 0; v < NV; ++v) store(acc[v], daddend + a * dim + c0 + v * N);
  }
}

void EmbeddingAddendBackward(const int32_t* ids, const float* dy, float* dtable, float* daddend, int64_t n,
                             int64_t vocab, int64_t dim, int64_t addend_rows, Slice s, bool accumulate_table,
                             bool accumulate_addend) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // (Plain locals, not structured bindings: the lambda below captures them, which clang rejects.)
  const std::pair<int64_t, int64_t> vocab_range = slice_range(vocab, s), addend_range = slice_range(addend_rows, s);
  const int64_t v0 = vocab_range.first, v1 = vocab_range.second;
  const int64_t a0 = addend_range.first, a1 = addend_range.second;
  if (!accumulate_table && v1 > v0)
    std::memset(dtable + v0 * dim, 0, static_cast<size_t>((v1 - v0) * dim) * sizeof(float));
  const int64_t whole = dim / N * N;
  for (int64_t c0 = 0; c0 < whole;) {
    const int64_t nv = std::min<int64_t>(8, (whole - c0) / N);
    WithCount<8>(nv, [&](auto k) {
      EmbeddingAddendColumns<decltype(k)::value>(d, ids, dy, dtable, daddend, n, dim, addend_rows, c0, v0, v1, a0,
                                                 a1, accumulate_addend);
    });
    c0 += nv * N;
  }
  if (whole < dim)  // a ragged last vector: the same sums in the same order, under a lane mask
    EmbeddingAddendColumns<1, true>(d, ids, dy, dtable, daddend, n, dim, addend_rows, whole, v0, v1, a0, a1,
                                    accumulate_addend, static_cast<size_t>(dim - whole));
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(EmbeddingForward);
HWY_EXPORT(EmbeddingBackward);
HWY_EXPORT(EmbeddingAddendBackward);

void embedding_forward(const float* table, const int32_t* ids, float* y, int64_t n,
                       int64_t vocab, int64_t d, Slice s, const float* addend, int64_t addend_rows) {
  HWY_DYNAMIC_DISPATCH(EmbeddingForward)(table, ids, y, n, vocab, d, addend, addend_rows, s);
}
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t n,
                        int64_t vocab, int64_t d, Slice s, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(EmbeddingBackward)(ids, dy, dtable, n, vocab, d, s, accumulate);
}
void embedding_addend_backward(const int32_t* ids, const float* dy, float* dtable, float* daddend, int64_t n,
                               int64_t vocab, int64_t d, int64_t addend_rows, Slice s, bool accumulate_table,
                               bool accumulate_addend) {
  HWY_DYNAMIC_DISPATCH(EmbeddingAddendBackward)(ids, dy, dtable, daddend, n, vocab, d, addend_rows, s,
                                                accumulate_table, accumulate_addend);
}
}  // namespace attnkit
#endif

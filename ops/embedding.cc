// Embedding gather and scatter-add.
#include <cstdint>
#include <cstring>

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

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(EmbeddingForward);
HWY_EXPORT(EmbeddingBackward);

void embedding_forward(const float* table, const int32_t* ids, float* y, int64_t n,
                       int64_t vocab, int64_t d, Slice s, const float* addend, int64_t addend_rows) {
  HWY_DYNAMIC_DISPATCH(EmbeddingForward)(table, ids, y, n, vocab, d, addend, addend_rows, s);
}
void embedding_backward(const int32_t* ids, const float* dy, float* dtable, int64_t n,
                        int64_t vocab, int64_t d, Slice s, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(EmbeddingBackward)(ids, dy, dtable, n, vocab, d, s, accumulate);
}
}  // namespace attnkit
#endif

// Elementwise kernels, vector by vector (see ForEachVector in ops_simd-inl.h).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "ops/elementwise.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/elementwise.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/ops_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

void ReluForward(const float* x, float* y, int64_t n, Slice s) {
  const DF d;
  const auto [b, e] = slice_range(n, s);
  ForEachVector(d, y, b, e, [&](int64_t j, size_t m) { return hn::Max(LoadUpTo(d, x + j, m), hn::Zero(d)); });
}

// In the forward pass y = max(x, 0): the gradient passes where y > 0.
void ReluBackward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate,
                  Slice s) {
  const DF d;
  const auto range = slice_range(n, s);
  const int64_t b = range.first, e = range.second;  // lambdas cannot capture bindings (C++17)
  WithFlag(accumulate, [&](auto kAccumulate) {
    ForEachVector(d, dx, b, e, [&](int64_t j, size_t m) {
      const auto g = hn::IfThenElseZero(hn::Gt(LoadUpTo(d, y + j, m), hn::Zero(d)), LoadUpTo(d, dy + j, m));
      if constexpr (decltype(kAccumulate)::value) {
        return hn::Add(LoadUpTo(d, dx + j, m), g);
      } else {
        return g;
      }
    });
  });
}

void BiasAddForward(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                    Slice s) {
  const DF d;
  const auto [r0, r1] = slice_range(rows, s);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    ForEachVector(d, yr, 0, cols,
                  [&](int64_t j, size_t m) { return hn::Add(LoadUpTo(d, xr + j, m), LoadUpTo(d, bias + j, m)); });
  }
}

// In the forward pass bias[c] was added to every row: its gradient is the column sum of dy.
// Each column block is summed over rows 0, 1, 2, … in order, whatever the slice.
// dbias[j, j + NV·N) (+)= Σ_rows dy[r, j + …]: NV independent add chains, whole lines a row.
template <int NV>
HWY_INLINE void BiasColumns(DF d, const float* HWY_RESTRICT dy, float* HWY_RESTRICT dbias,
                            int64_t rows, int64_t cols, int64_t j, bool accumulate) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = hn::Zero(d);
  if (accumulate)
    for (int v = 0; v < NV; ++v) acc[v] = hn::LoadU(d, dbias + j + v * N);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * cols + j;
    for (int v = 0; v < NV; ++v) acc[v] = hn::Add(acc[v], hn::LoadU(d, row + v * N));
  }
  for (int v = 0; v < NV; ++v) hn::StoreU(acc[v], d, dbias + j + v * N);
}

// Wide, tall dy (a transformer's [4096, 1024] MLP gradient, 16 MB): a pass over the rows per
// 8-vector column block strides through memory one row apart 16 times; instead stream the
// rows once, in order, adding each into accumulators for up to kStreamColumns columns kept in
// L1. Each column is still summed over rows 0, 1, 2, … from 0 or dbias: the same bits.
constexpr int64_t kStreamColumns = 1024;

HWY_INLINE void BiasColumnsStreamed(DF d, const float* HWY_RESTRICT dy, float* HWY_RESTRICT dbias,
                                    int64_t rows, int64_t cols, int64_t j0, int64_t width,
                                    bool accumulate) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  HWY_ALIGN float acc[kStreamColumns];
  if (accumulate) {
    for (int64_t v = 0; v < width; v += N) hn::Store(hn::LoadU(d, dbias + j0 + v), d, acc + v);
  } else {
    for (int64_t v = 0; v < width; v += N) hn::Store(hn::Zero(d), d, acc + v);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = dy + r * cols + j0;
    for (int64_t v = 0; v < width; v += N)
      hn::Store(hn::Add(hn::Load(d, acc + v), hn::LoadU(d, row + v)), d, acc + v);
  }
  for (int64_t v = 0; v < width; v += N) hn::StoreU(hn::Load(d, acc + v), d, dbias + j0 + v);
}

void BiasBackward(const float* dy, float* dbias, int64_t rows, int64_t cols, Slice s,
                  bool accumulate) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // Whole vectors per slice: only the last slice has a partial vector.
  const auto [c0, c1] = slice_range_grain(cols, N, s);
  // dy beyond L2 (1 MB here) and rows of at least 256 columns: streamed (see above); the
  // lessons' small gradients stay on the register-block path.
  int64_t j = c0;
  if (rows * cols * 4 > (1 << 20) && cols >= 256) {
    const int64_t end = c0 + (c1 - c0) / N * N;
    for (; j < end; j += kStreamColumns)
      BiasColumnsStreamed(d, dy, dbias, rows, cols, j, std::min(kStreamColumns, end - j), accumulate);
    j = end;  // a partial last vector (the last slice's) takes the tail path below
  }
  // Up to 8 whole vectors of columns per pass over the rows: independent add chains (one
  // per vector) and whole cache lines per row. Each column is still summed over the rows in
  // order, starting from 0 or dbias, whatever the blocking or slicing.
  while (c1 - j >= N) {
    const int64_t nv = std::min<int64_t>(8, (c1 - j) / N);
    WithCount<8>(nv, [&](auto k) { BiasColumns<decltype(k)::value>(d, dy, dbias, rows, cols, j, accumulate); });
    j += nv * N;
  }
  if (j < c1) {
    const size_t m = static_cast<size_t>(c1 - j);
    if (c1 >= N) {
      // The vector ending at c1 (its first lanes are earlier columns, summed the same way
      // and not stored): whole loads instead of a partial copy per row.
      const int64_t jv = c1 - N;
      HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
      // dbias before j may be another slice's, being written: only this slice's lanes.
      if (accumulate)
        for (size_t i = 0; i < m; ++i) buf[N - m + i] = dbias[j + static_cast<int64_t>(i)];
      auto acc = hn::Load(d, buf);
      for (int64_t r = 0; r < rows; ++r) acc = hn::Add(acc, hn::LoadU(d, dy + r * cols + jv));
      hn::Store(acc, d, buf);
      for (size_t i = 0; i < m; ++i) dbias[j + static_cast<int64_t>(i)] = buf[N - m + i];
    } else {
      auto acc = hn::Zero(d);
      if (accumulate) acc = LoadUpTo(d, dbias + j, m);
      for (int64_t r = 0; r < rows; ++r) acc = hn::Add(acc, LoadUpTo(d, dy + r * cols + j, m));
      StoreTail(d, acc, dbias + j, m);
    }
  }
}

void AddForward(const float* a, const float* b, float* y, int64_t n, Slice s) {
  const DF d;
  const auto [b0, b1] = slice_range(n, s);
  ForEachVector(d, y, b0, b1, [&](int64_t j, size_t m) { return hn::Add(LoadUpTo(d, a + j, m), LoadUpTo(d, b + j, m)); });
}

void Axpy(float alpha, const float* x, float* y, int64_t n, bool accumulate, Slice s) {
  const DF d;
  const auto valpha = hn::Set(d, alpha);
  const auto range = slice_range(n, s);
  const int64_t b = range.first, e = range.second;  // lambdas cannot capture bindings (C++17)
  WithFlag(accumulate, [&](auto kAccumulate) {
    ForEachVector(d, y, b, e, [&](int64_t j, size_t m) {
      if constexpr (decltype(kAccumulate)::value) {
        return hn::MulAdd(valpha, LoadUpTo(d, x + j, m), LoadUpTo(d, y + j, m));
      } else {
        return hn::Mul(valpha, LoadUpTo(d, x + j, m));
      }
    });
  });
}

void Fill(float* y, int64_t n, float value, Slice s) {
  const DF d;
  const auto v = hn::Set(d, value);
  const auto [b, e] = slice_range(n, s);
  ForEachVector(d, y, b, e, [&](int64_t, size_t) { return v; });
}

// std::max_element's pick in one row: the first of its largest values, NaNs never picked
// after a number (best < x is false for them), and 0 when the row starts with a NaN.
inline int32_t ArgmaxRowScalar(const float* row, int64_t cols) {
  float best = row[0];
  int32_t at = 0;
  for (int64_t j = 1; j < cols; ++j) {
    if (best < row[j]) best = row[j], at = static_cast<int32_t>(j);  // (max_element's test)
  }
  return at;
}

// Rows [r0, r1) of a [rows, cols] x with NV vectors a row (cols <= NV·Lanes): the largest of the
// row's numbers (NaNs and the lanes past cols as −inf), then the first lane equal to it — the
// same pick as ArgmaxRowScalar's for a row whose first value is a number. Rows are read whole
// vectors at a time into the next rows; the last few, whose vectors would pass the end of x,
// and rows starting with a NaN go the scalar way.
template <int NV>
void ArgmaxRowsVectors(const float* x, int64_t r0, int64_t r1, int64_t rows, int64_t cols, int32_t* out) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto m0 = hn::FirstN(d, static_cast<size_t>(std::min(cols, lanes)));
  const auto m1 = hn::FirstN(d, static_cast<size_t>(std::max<int64_t>(cols - lanes, 0)));
  const int64_t last_whole = rows * cols - NV * lanes;  // the last row start read whole
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * cols;
    if (r * cols > last_whole || !(row[0] == row[0])) {
      out[r] = ArgmaxRowScalar(row, cols);
      continue;
    }
    const auto v0 = hn::LoadU(d, row);
    const auto valid0 = hn::And(m0, hn::Eq(v0, v0));
    const auto c0 = hn::IfThenElse(valid0, v0, neg_inf);
    if constexpr (NV == 1) {
      const auto top = hn::MaxOfLanes(d, c0);
      out[r] = static_cast<int32_t>(hn::FindFirstTrue(d, hn::And(valid0, hn::Eq(c0, top))));
    } else {
      const auto v1 = hn::LoadU(d, row + lanes);
      const auto valid1 = hn::And(m1, hn::Eq(v1, v1));
      const auto c1 = hn::IfThenElse(valid1, v1, neg_inf);
      const auto top = hn::MaxOfLanes(d, hn::Max(c0, c1));
      const auto hit0 = hn::And(valid0, hn::Eq(c0, top));
      out[r] = static_cast<int32_t>(hn::AllFalse(d, hit0) ? lanes + hn::FindFirstTrue(d, hn::And(valid1, hn::Eq(c1, top)))
                                                           : hn::FindFirstTrue(d, hit0));
    }
  }
}

void ArgmaxRows(const float* x, int64_t rows, int64_t cols, int32_t* out, Slice s) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  const auto [r0, r1] = slice_range(rows, s);
  if (cols >= 4 && cols <= lanes) {
    ArgmaxRowsVectors<1>(x, r0, r1, rows, cols, out);
  } else if (cols > lanes && cols <= 2 * lanes) {
    ArgmaxRowsVectors<2>(x, r0, r1, rows, cols, out);
  } else {  // (2 or 3 classes: a few compares; wide rows: rare)
    for (int64_t r = r0; r < r1; ++r) out[r] = ArgmaxRowScalar(x + r * cols, cols);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnkit {
HWY_EXPORT(ReluForward);
HWY_EXPORT(ReluBackward);
HWY_EXPORT(BiasAddForward);
HWY_EXPORT(BiasBackward);
HWY_EXPORT(AddForward);
HWY_EXPORT(Axpy);
HWY_EXPORT(Fill);
HWY_EXPORT(ArgmaxRows);

void relu_forward(const float* x, float* y, int64_t n, Slice s) {
  HWY_DYNAMIC_DISPATCH(ReluForward)(x, y, n, s);
}
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate,
                   Slice s) {
  HWY_DYNAMIC_DISPATCH(ReluBackward)(y, dy, dx, n, accumulate, s);
}
void bias_add_forward(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                      Slice s) {
  HWY_DYNAMIC_DISPATCH(BiasAddForward)(x, bias, y, rows, cols, s);
}
void bias_backward(const float* dy, float* dbias, int64_t rows, int64_t cols, Slice s,
                   bool accumulate) {
  HWY_DYNAMIC_DISPATCH(BiasBackward)(dy, dbias, rows, cols, s, accumulate);
}
void add_forward(const float* a, const float* b, float* y, int64_t n, Slice s) {
  HWY_DYNAMIC_DISPATCH(AddForward)(a, b, y, n, s);
}
void axpy(float alpha, const float* x, float* y, int64_t n, bool accumulate, Slice s) {
  HWY_DYNAMIC_DISPATCH(Axpy)(alpha, x, y, n, accumulate, s);
}
void fill(float* y, int64_t n, float value, Slice s) {
  HWY_DYNAMIC_DISPATCH(Fill)(y, n, value, s);
}

void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out, Slice s) {
  HWY_DYNAMIC_DISPATCH(ArgmaxRows)(x, rows, cols, out, s);
}
}  // namespace attnkit
#endif

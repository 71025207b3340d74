// Attention rollout (Abnar & Zuidema, 2020), exactly as lesson 004 computes it: each layer's
// head-averaged map A becomes 0.5·A + 0.5·I (the residual connection keeps half in place),
// rows are renormalized, and the layers are multiplied in order, R = A_L ⋯ A_2·A_1.
// Rows of R sum to 1.
#pragma once
#include <cstdint>
#include <vector>

namespace attnkit {

// The largest T rollout takes: each layer is a [T, T] · [T, T] product (T³ multiply-adds;
// ~2 s a layer at 4096 on one core) over three [T, T] floats (64 MB each at 4096).
constexpr int64_t kMaxRolloutT = 4096;

// maps: [layers, heads, T, T] (rows = queries). Returns R [T, T], row-major, in float32 (the
// products run in sgemm, ops/gemm.h; the head means and row sums in double). Throws Error if a
// size is not positive, T exceeds kMaxRolloutT, or a row of a head-averaged map sums to a
// negative or zero value after adding the identity (which cannot happen for softmax rows).
std::vector<float> attention_rollout(const float* maps, int64_t layers, int64_t heads, int64_t T);
std::vector<float> attention_rollout(const double* maps, int64_t layers, int64_t heads, int64_t T);

}  // namespace attnkit

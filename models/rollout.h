// Attention rollout (Abnar & Zuidema, 2020), exactly as lesson 004 computes it: each layer's
// head-averaged map A becomes 0.5·A + 0.5·I (the residual connection keeps half in place),
// rows are renormalized, and the layers are multiplied in order, R = A_L ⋯ A_2·A_1.
// Rows of R sum to 1.
#pragma once
#include <cstdint>
#include <vector>

namespace attnkit {

// maps: [layers, heads, T, T] (rows = queries). Returns R [T, T], row-major. Throws Error if
// a size is not positive or a row of a head-averaged map sums to a negative or zero value
// after adding the identity (which cannot happen for softmax rows).
std::vector<double> attention_rollout(const float* maps, int64_t layers, int64_t heads, int64_t T);
std::vector<double> attention_rollout(const double* maps, int64_t layers, int64_t heads, int64_t T);

}  // namespace attnkit

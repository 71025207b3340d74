// Elementwise kernels: ReLU, bias add, add, scale, and the column sums their backwards need.
#pragma once
#include <cstdint>

#include "parallel.h"

namespace attnkit {

// y = max(x, 0). y may alias x. Slices split the n elements.
void relu_forward(const float* x, float* y, int64_t n, Slice s = {});
// dx = dy where y > 0 else 0, given the forward output y (dx may alias dy).
// accumulate: dx += … (dx not read when false).
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate,
                   Slice s = {});

// y[r, c] = x[r, c] + bias[c] for a [rows, cols] x. y may alias x. Slices split rows.
// (A position embedding broadcast over the batch is a bias over cols = T·D.)
void bias_add_forward(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                      Slice s = {});
// dbias[c] += Σ_r dy[r, c] (dbias = … without reading it when accumulate is false). Slices
// split the columns, so sums run over rows in the same order whatever the thread count.
void bias_backward(const float* dy, float* dbias, int64_t rows, int64_t cols, Slice s = {},
                   bool accumulate = true);

// y = a + b. y may alias a or b.
void add_forward(const float* a, const float* b, float* y, int64_t n, Slice s = {});
// y = (accumulate ? y : 0) + alpha·x. The backward of add, scale and copy.
void axpy(float alpha, const float* x, float* y, int64_t n, bool accumulate, Slice s = {});

// Fills y with value.
void fill(float* y, int64_t n, float value, Slice s = {});

// out[r] = the column of row r's largest value in a [rows, cols] x (cols >= 1), the first of
// equal ones, as std::max_element picks it (a NaN is never picked over a number before it):
// predictions from logits. Slices split the rows.
void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out, Slice s = {});

}  // namespace attnkit

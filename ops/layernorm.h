// Layer normalization over the last axis: y = (x − mean)/sqrt(var + eps)·gamma + beta.
#pragma once
#include <cstdint>

#include "parallel.h"

namespace attnkit {

// x, y: [rows, d]. mean, rstd: [rows], saved for the backward. Slices split rows.
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t d, float eps,
                       Slice s = {});

// dx from dy (slices split rows). accumulate: dx += … (dx not read when false).
void layernorm_backward_input(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, float* dx, int64_t rows,
                              int64_t d, bool accumulate, Slice s = {});

// dgamma += Σ_rows dy·x̂, dbeta += Σ_rows dy (always accumulates: parameter gradients are
// zeroed once per step). Slices split the d columns, so each column is summed over rows in
// the same order whatever the thread count.
void layernorm_backward_params(const float* x, const float* mean, const float* rstd,
                               const float* dy, float* dgamma, float* dbeta, int64_t rows,
                               int64_t d, Slice s = {});

// Both at once on one thread, reading x and dy once: layernorm_backward_input and
// layernorm_backward_params's results, bit for bit (dx may be dy).
void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t d,
                        bool accumulate);

}  // namespace attnkit

// Adam / AdamW update over one flat block of parameters.
#pragma once
#include <cstdint>

#include "parallel.h"

namespace attnkit {

struct AdamStep {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // PyTorch's defaults
  float weight_decay = 0.0f;
  bool decoupled = false;  // false: Adam (L2 added to the gradient); true: AdamW
  // Bias corrections for this step t (1-based), computed once per step by the caller:
  // bias_correction1 = 1 − beta1^t, bias_correction2 = 1 − beta2^t.
  float bias_correction1 = 1.0f, bias_correction2 = 1.0f;
};

// One step, as torch.optim.Adam(W) computes it (foreach=False):
//   g = grad (+ wd·p for Adam);  p ·= 1 − lr·wd for AdamW
//   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   p −= (lr / bc1) · m / (sqrt(v) / sqrt(bc2) + eps)
// Slices split the n elements.
void adam_update(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamStep& step, Slice s = {});

// Bias corrections for step t (1-based), as PyTorch computes them.
AdamStep adam_step_for(AdamStep hyper, int64_t t);

}  // namespace attnkit

// Adam (and AdamW) over the flat parameter block: one fused, vectorized loop per step.
#pragma once
#include <cstdint>

#include "../ops/adam.h"
#include "arena.h"

namespace attnkit {

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // PyTorch's defaults
  float weight_decay = 0.0f;
  bool decoupled = false;  // true: AdamW
};

class Adam {
 public:
  Adam(int64_t param_count, AdamOptions options);
  const AdamOptions& options() const { return options_; }
  void set_lr(float lr) { options_.lr = lr; }
  int64_t steps() const { return steps_; }

  // Starts step t = steps() + 1: computes the bias corrections once. Called by the executor
  // before the update slices run.
  void begin_step();
  // This slice's share of the update of params from grads.
  void update(float* params, const float* grads, Slice s) const;

  // The moments, for checkpoints.
  float* m() const { return m_.f32(); }
  float* v() const { return v_.f32(); }
  int64_t size() const { return n_; }
  void restore(int64_t steps) { steps_ = steps; }

 private:
  int64_t n_;
  AdamOptions options_;
  AlignedBuffer m_, v_;
  int64_t steps_ = 0;
  AdamStep step_;
};

}  // namespace attnkit

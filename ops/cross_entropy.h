// Cross-entropy fused with log-softmax, over rows of logits.
#pragma once
#include <cstdint>

#include "parallel.h"

namespace attnkit {

// A target below 0 marks a position that does not count (its loss and gradient are 0).
inline constexpr int32_t kIgnoreTarget = -1;

// row_loss[r] = logsumexp(logits[r, :]) − logits[r, targets[r]] (0 for ignored rows).
// Targets must be in [0, classes) or negative. Slices split rows. The caller sums row_loss
// (in order, for determinism) and divides by the number of counted rows.
// With probs, also probs[r, :] = softmax(logits[r, :]) for every row (ignored ones too).
void cross_entropy_forward(const float* logits, const int32_t* targets, float* row_loss,
                           int64_t rows, int64_t classes, Slice s = {}, float* probs = nullptr);

// dlogits[r, :] = scale·(softmax(logits[r, :]) − onehot(targets[r])), 0 for ignored rows;
// scale is dloss / counted rows. accumulate: dlogits += … (not read when false).
void cross_entropy_backward(const float* logits, const int32_t* targets, float* dlogits,
                            int64_t rows, int64_t classes, float scale, bool accumulate,
                            Slice s = {});

// The same from the forward's probabilities (no exponentials): scale·(probs − onehot).
void cross_entropy_backward_from_probs(const float* probs, const int32_t* targets, float* dlogits,
                                       int64_t rows, int64_t classes, float scale, bool accumulate,
                                       Slice s = {});

}  // namespace attnkit

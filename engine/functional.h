// Primitive ops on graph tensors, named as in PyTorch: what lesson 003 writes attention with
// (view, transpose, matmul, masked_fill, softmax), elementwise math, reductions and losses.
// Each is a node of the static graph like every other op: planned in the arena, run on the
// executor's threads, differentiated by backward().
#pragma once
#include <cstdint>
#include <vector>

#include "graph.h"

namespace attnkit {

// ---- products and shapes (engine/op_matmul.cc, engine/op_shape.cc) ----


// ---- elementwise math and reductions (engine/op_math.cc, engine/op_reduce.cc) ----


// ---- softmax, masks, dropout and losses (engine/op_softmax.cc, engine/op_loss.cc) ----

// Masks (softmax's and masked_fill's) have x's last two dims [Tq, Tk] (just [Tk] for a 1-D x)
// and broadcast over x's leading dims: each leading dim, aligned from the right, is x's or 1
// (missing dims count as 1). For scores [B, H, T, T]: a [T, T] mask serves every batch entry
// and head, [B, 1, T, T] (a batched input) every head, [B, H, T, T] gives each head its own.
// A mask aligned with a batched x's batch dim is a batched input (or has 1 there).
struct SoftmaxOptions {
  float scale = 1.0f;  // the scores are scale·x
  // Optional. uint8: non-zero = forbidden, probability 0; a row with every key forbidden
  // comes out all zeros (and passes no gradient). float: added to the scaled scores
  // (softmax(scale·x + mask), −inf for forbidden; a row with −inf at every allowed key comes
  // out all zeros too, where PyTorch gives NaN); it gets its own gradient when it needs one
  // (summed over the dims it broadcasts over).
  Tensor mask;
  // Key j is forbidden for query i when j > i (i, j: x's last two dims), with the mask's.
  bool causal = false;
};

// softmax over the last axis of a float tensor (rank 1 to 4), with the options' scale,
// mask and causal masking fused in; differentiable in x (and in a float mask).
Tensor softmax(Tensor x, SoftmaxOptions options = {});

// x where mask is 0, `value` where it is non-zero (uint8 mask, broadcast as above). The
// gradient of x is zero where filled.
Tensor masked_fill(Tensor x, Tensor mask, float value);

// Inverted dropout: in training runs (Executor::train_step) each element is zeroed with
// probability p and the rest scaled by 1/(1 − p) (p = 1: all zeros); in Executor::forward
// (evaluation) the identity. The mask is drawn from Rng by (seed, training step, element), so
// it is the same for any thread count and run to run; the backward applies the same mask.
Tensor dropout(Tensor x, float p, uint64_t seed);

// Mean of (a − b)² over all elements of two float tensors of the same shape: a 1-element
// unbatched float (a loss for backward()). Both sides get gradients.
Tensor mse_loss(Tensor a, Tensor b);


}  // namespace attnkit

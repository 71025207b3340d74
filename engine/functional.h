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


}  // namespace attnkit

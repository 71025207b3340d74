// The projection folding that linear() (engine/modules.cc) and Graph::optimize_forward share
// (engine/passes.cc); internal to the engine.
#pragma once
#include "graph.h"

namespace attnkit {

// x·W + b as one linear node.
Tensor plain_linear(Graph& g, TensorId x, const Tensor& w, const Tensor& b);
// x·W + b computed from x's embedding tables where x is a lookup, or a sum of lookups and small
// unbatched tensors, and that needs fewer rows (table·W + b, looked up); else plain_linear.
// With heads > 1, x's columns and W's rows are `heads` blocks and the result is the blocks'
// products side by side, [x_0·W_0 + b | x_1·W_1 | …] (W's rows [h·k, (h+1)·k) for head h).
Tensor folded_linear(Graph& g, TensorId x, const Tensor& w, const Tensor& b, int depth, int64_t heads = 1);

}  // namespace attnkit

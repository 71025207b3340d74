// Cross-entropy of logits [..., C] against int targets [...], averaged over the counted
// positions (targets < 0 do not count).
#include "engine/op_table.h"
#include "ops/cross_entropy.h"

namespace attnkit {
namespace {

void ce_build(Graph& g, Node& n) {
  if (n.in.size() != 2) shape_error(g, "cross_entropy", "needs logits and targets", {});
  const TensorDesc& logits = g.tensor(n.in[0]);
  const TensorDesc& targets = g.tensor(n.in[1]);
  bool ok = logits.dtype == DType::kF32 && targets.dtype == DType::kI32 &&
            targets.shape.rank + 1 == logits.shape.rank && targets.batched == logits.batched;
  for (int i = 0; ok && i < targets.shape.rank; ++i) ok = targets.shape[i] == logits.shape[i];
  if (!ok) shape_error(g, "cross_entropy", "targets must be int32 with the logits' shape minus the class dim", n.in);
  // out[1]: the softmax probabilities, which the backward turns into the gradient without
  // exponentials of its own.
  n.out = {g.new_tensor("cross_entropy(" + logits.name + ")", DType::kF32, {1}, false),
           g.new_tensor("cross_entropy(" + logits.name + ").probs", DType::kF32, logits.shape, logits.batched)};
  n.scratch = {g.new_tensor("cross_entropy.rows", DType::kF32, targets.shape, targets.batched)};
}

int64_t counted(const int32_t* t, int64_t rows) {
  int64_t k = 0;
  for (int64_t r = 0; r < rows; ++r) k += t[r] >= 0;
  return k;
}

// The counted positions of the whole batch. In a run in chunks (Executor, a training step of
// a large model) the targets are an input fed whole, and t points at the chunk's rows.
int64_t counted_whole(const RunContext& c, const int32_t* t, int64_t rows) {
  if (c.whole_batch() == c.batch()) return counted(t, rows);
  const int64_t per_entry = rows / c.batch();
  return counted(t - c.chunk_first_row() * per_entry, c.whole_batch() * per_entry);
}

void ce_run(const RunContext& c, const Node& n, Slice s) {
  // The loss is a sum over all rows: one thread does it, in order, so it is deterministic.
  // It is a small part of a step (rows × classes exps).
  if (s.index != 0) return;
  const Shape ls = c.shape(n.in[0]);
  const int64_t rows = ls.rows(), classes = ls.last();
  const int32_t* t = c.i32(n.in[1]);
  float* row_loss = c.f32(n.scratch[0]);
  cross_entropy_forward(c.f32(n.in[0]), t, row_loss, rows, classes, Slice{},
                        n.out[1] != kNoTensor ? c.f32(n.out[1]) : nullptr);
  double sum = 0.0;
  for (int64_t r = 0; r < rows; ++r) sum += row_loss[r];
  const int64_t k = counted_whole(c, t, rows);
  const float mean = k ? static_cast<float>(sum / static_cast<double>(k)) : 0.0f;
  // In chunks: each chunk adds its share of the whole batch's mean.
  float* loss = c.f32(n.out[0]);
  loss[0] = c.chunk_first_row() == 0 ? mean : loss[0] + mean;
}

// Backward node: in (probs, targets, dloss); out dlogits.
void ce_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kCrossEntropyBackward;
  b.in = {n.out[1], n.in[1], ad.grad(n.out[0])};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

void ce_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Shape ls = c.shape(n.in[0]);
  const int64_t rows = ls.rows(), classes = ls.last();
  const int32_t* t = c.i32(n.in[1]);
  const int64_t k = counted_whole(c, t, rows);
  const float scale = k ? c.f32(n.in[2])[0] / static_cast<float>(k) : 0.0f;
  cross_entropy_backward_from_probs(c.f32(n.in[0]), t, c.f32(n.out[0]), rows, classes, scale,
                                    n.accumulates(0), s);
}

void no_build(Graph&, Node&) {}

}  // namespace

// Targets are classes, or −1 for a position without an answer.
bool ce_targets(const Graph& g, const Node& n, size_t* input, int64_t* lo, int64_t* hi) {
  *input = 1, *lo = -1, *hi = g.tensor(n.in[0]).shape.last();
  return true;
}

extern const OpDef kCrossEntropyOp = {"cross_entropy", ce_build, ce_run, ce_differentiate, false, ce_targets};
extern const OpDef kCrossEntropyBackwardOp = {"cross_entropy_backward", no_build, ce_backward_run, nullptr, false};

}  // namespace attnkit

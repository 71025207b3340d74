// Embedding: y[..., :] = table[ids[...], :]; its backward scatter-adds into the table's grad.
#include "engine/op_table.h"
#include "ops/embedding.h"

namespace attnkit {
namespace {

void embedding_build(Graph& g, Node& n) {
  const TensorDesc& table = g.tensor(n.in.at(0));
  const TensorDesc& ids = g.tensor(n.in.at(1));
  if (table.dtype != DType::kF32 || table.shape.rank != 2)
    shape_error(g, "embedding", "the table must be a float [vocab, dim] tensor", {n.in[0]});
  if (ids.dtype != DType::kI32 || ids.shape.rank >= kMaxRank)
    shape_error(g, "embedding", "ids must be int32 with at most 3 dims", {n.in[1]});
  Shape ys = ids.shape;
  ys.dims[ys.rank++] = table.shape[1];
  n.out = {g.new_tensor(table.name + "(" + ids.name + ")", DType::kF32, ys, ids.batched)};
}

void embedding_run(const RunContext& c, const Node& n, Slice s) {
  const Shape ts = c.shape(n.in[0]);
  embedding_forward(c.f32(n.in[0]), c.i32(n.in[1]), c.f32(n.out[0]), c.shape(n.in[1]).numel(),
                    ts[0], ts[1], s);
}

// Backward node: in (ids, dy); out dtable: a parameter's gradient, or the gradient of a
// computed table (a projected one, see linear() in modules.cc).
void embedding_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kEmbeddingBackward;
  b.in = {n.in[1], ad.grad(n.out[0])};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

void embedding_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Shape ts = c.shape(n.out[0]);
  embedding_backward(c.i32(n.in[0]), c.f32(n.in[1]), c.f32(n.out[0]), c.shape(n.in[0]).numel(),
                     ts[0], ts[1], s, n.accumulates(0));
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kEmbeddingOp = {"embedding", embedding_build, embedding_run, embedding_differentiate, false};
extern const OpDef kEmbeddingBackwardOp = {"embedding_backward", no_build, embedding_backward_run, nullptr, false};

}  // namespace attnkit

// Embedding: y[..., :] = table[ids[...], :] (+ an optional addend broadcast over the leading
// dims); its backward scatter-adds into the table's grad.
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
  std::string name = table.name + "(" + ids.name + ")";
  if (n.in.size() == 2) n.in.push_back(kNoTensor);
  if (n.in.size() != 3) shape_error(g, "embedding", "needs a table, ids and an optional addend", {});
  if (n.in[2] != kNoTensor) {  // y[..., :] = table[ids[...], :] + addend (over ys's trailing dims)
    const TensorDesc& a = g.tensor(n.in[2]);
    bool ok = a.dtype == DType::kF32 && !a.batched && a.shape.rank <= ys.rank;
    for (int i = 1; ok && i <= a.shape.rank; ++i) ok = a.shape[-i] == ys[-i];
    if (!ok) shape_error(g, "embedding", "the addend must be float and match the output's trailing dims " + ys.str(), {n.in[0], n.in[2]});
    name += "+" + a.name;
  }
  n.out = {g.new_tensor(name, DType::kF32, ys, ids.batched)};
}

void embedding_run(const RunContext& c, const Node& n, Slice s) {
  const Shape ts = c.shape(n.in[0]);
  const bool add = n.in[2] != kNoTensor;
  embedding_forward(c.f32(n.in[0]), c.i32(n.in[1]), c.f32(n.out[0]), c.shape(n.in[1]).numel(),
                    ts[0], ts[1], s, add ? c.f32(n.in[2]) : nullptr, add ? c.shape(n.in[2]).rows() : 0);
}

// Backward node: in (ids, dy); out (dtable, daddend): dtable a parameter's gradient, or the
// gradient of a computed table (a projected one, see linear() in modules.cc); daddend, dy
// summed over the broadcast dims, in the same node and the same pass over dy when both are
// wanted and the addend is broadcast (a position table under token lookups: neighbor-sum's
// two gradients of the [640, 128] pre-activation gradient, 7.9 us as two nodes).
void embedding_differentiate(Autodiff& ad, const Node& n) {
  const Graph& g = ad.graph();
  const TensorId dy = ad.grad(n.out[0]);
  const bool fuse_addend = n.in[2] != kNoTensor && ad.needs_grad(n.in[2]) && ad.needs_grad(n.in[0]) &&
                           !(g.tensor(n.in[2]).shape == g.tensor(dy).shape);
  if (n.in[2] != kNoTensor && !fuse_addend) ad.pass_through(n.in[2], dy);
  Node b;
  b.op = OpKind::kEmbeddingBackward;
  b.in = {n.in[1], dy};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  if (fuse_addend) set_out_accumulate(b, 1, ad.contribute(n.in[2]));
  if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
}

void embedding_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Shape ts = c.shape(n.out[0]);
  const int64_t rows = c.shape(n.in[0]).numel();
  if (n.out.size() > 1 && n.out[1] != kNoTensor) {
    embedding_addend_backward(c.i32(n.in[0]), c.f32(n.in[1]), c.f32(n.out[0]), c.f32(n.out[1]), rows, ts[0],
                              ts[1], c.shape(n.out[1]).rows(), s, n.accumulates(0), n.accumulates(1));
    return;
  }
  embedding_backward(c.i32(n.in[0]), c.f32(n.in[1]), c.f32(n.out[0]), rows, ts[0], ts[1], s, n.accumulates(0));
}

void no_build(Graph&, Node&) {}

}  // namespace

// ids index the table's rows.
bool embedding_ids(const Graph& g, const Node& n, size_t* input, int64_t* lo, int64_t* hi) {
  *input = 1, *lo = 0, *hi = g.tensor(n.in[0]).shape[0];
  return true;
}

extern const OpDef kEmbeddingOp = {"embedding", embedding_build, embedding_run, embedding_differentiate, false,
                                   embedding_ids};
extern const OpDef kEmbeddingBackwardOp = {"embedding_backward", no_build, embedding_backward_run, nullptr, false};

}  // namespace attnkit

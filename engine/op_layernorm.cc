// LayerNorm over the last dim, with learned gamma and beta. Saves mean and 1/std per row.
#include "engine/op_table.h"
#include "ops/layernorm.h"

namespace attnkit {
namespace {

void layernorm_build(Graph& g, Node& n) {
  if (n.in.size() != 3) shape_error(g, "layernorm", "needs x, gamma and beta", {});
  const TensorDesc& x = g.tensor(n.in[0]);
  const int64_t d = x.shape.last();
  for (int i = 1; i < 3; ++i) {
    const TensorDesc& p = g.tensor(n.in[static_cast<size_t>(i)]);
    if (p.shape.rank != 1 || p.shape[0] != d)
      shape_error(g, "layernorm", "gamma and beta must be [" + std::to_string(d) + "]", n.in);
  }
  if (x.dtype != DType::kF32) shape_error(g, "layernorm", "needs a float tensor", {n.in[0]});
  Shape rs = x.shape;
  rs.rank -= 1;
  if (rs.rank == 0) rs = Shape{1};
  const std::string name = "layernorm(" + x.name + ")";
  n.out = {g.new_tensor(name, DType::kF32, x.shape, x.batched),
           g.new_tensor(name + ".mean", DType::kF32, rs, x.batched),
           g.new_tensor(name + ".rstd", DType::kF32, rs, x.batched)};
}

void layernorm_run(const RunContext& c, const Node& n, Slice s) {
  const Shape xs = c.shape(n.in[0]);
  layernorm_forward(c.f32(n.in[0]), c.f32(n.in[1]), c.f32(n.in[2]), c.f32(n.out[0]),
                    c.f32(n.out[1]), c.f32(n.out[2]), xs.rows(), xs.last(), n.attrs.eps, s);
}

// Backward node: in (x, gamma, mean, rstd, dy); out (dx, dgamma, dbeta).
void layernorm_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kLayerNormBackward;
  b.in = {n.in[0], n.in[1], n.out[1], n.out[2], ad.grad(n.out[0])};
  b.backward = true;
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  set_out_accumulate(b, 1, ad.contribute(n.in[1]));
  set_out_accumulate(b, 2, ad.contribute(n.in[2]));
  for (size_t i = 1; i < 3; ++i)
    if (b.out[i] != kNoTensor && ad.graph().tensor(b.out[i]).storage != Storage::kParamGrad)
      throw ShapeError("layernorm: gamma and beta must be parameters to be differentiated");
  ad.graph().add_node(std::move(b));
}

void layernorm_backward_run(const RunContext& c, const Node& n, Slice s) {
  const Shape xs = c.shape(n.in[0]);
  const int64_t rows = xs.rows(), d = xs.last();
  if (s.count <= 1 && n.out[0] != kNoTensor && n.out[1] != kNoTensor && n.out[2] != kNoTensor) {  // one pass
    layernorm_backward(c.f32(n.in[0]), c.f32(n.in[1]), c.f32(n.in[2]), c.f32(n.in[3]), c.f32(n.in[4]),
                       c.f32(n.out[0]), c.f32(n.out[1]), c.f32(n.out[2]), rows, d, n.accumulates(0));
    return;
  }
  if (n.out[0] != kNoTensor)
    layernorm_backward_input(c.f32(n.in[0]), c.f32(n.in[1]), c.f32(n.in[2]), c.f32(n.in[3]),
                             c.f32(n.in[4]), c.f32(n.out[0]), rows, d, n.accumulates(0), s);
  if (n.out[1] != kNoTensor && n.out[2] != kNoTensor)
    layernorm_backward_params(c.f32(n.in[0]), c.f32(n.in[2]), c.f32(n.in[3]), c.f32(n.in[4]),
                              c.f32(n.out[1]), c.f32(n.out[2]), rows, d, s);
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kLayerNormOp = {"layernorm", layernorm_build, layernorm_run, layernorm_differentiate, false};
extern const OpDef kLayerNormBackwardOp = {"layernorm_backward", no_build, layernorm_backward_run, nullptr, false};

}  // namespace attnkit

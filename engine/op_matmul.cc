// matmul: C = op(A)·op(B) over the last two dims, op(X) = Xᵀ when trans_x, with the leading
// dims batched and broadcast as in torch.matmul: [B, H, T, dh]·[B, H, dh, T], [B, T, D]·[D, E],
// a leading dim of 1 or a missing one broadcasting. Every product goes through the sgemm
// kernels (ops/gemm.h), so each element is computed the same way whatever the thread count.
#include "engine/functional.h"
#include "engine/op_table.h"
#include "ops/gemm.h"

namespace attnkit {
namespace {

// NodeAttrs has no field for the transpose flags; kMatmul and kMatmulBackward keep them in
// `heads`, which they do not otherwise use: bit 0 trans_a, bit 1 trans_b.
bool trans_a_of(const Node& n) { return n.attrs.trans_a; }
bool trans_b_of(const Node& n) { return n.attrs.trans_b; }

// The leading (batch) dims of an operand, right-aligned into two slots (1 where missing),
// and the element strides between its matrices along them (0 where the dim is 1: broadcast).
struct Lead {
  int64_t dim[2] = {1, 1};
  int64_t stride[2] = {0, 0};
  int64_t count() const { return dim[0] * dim[1]; }
};

Lead lead_of(const Shape& s) {
  Lead l;
  const int64_t matrix = s[-2] * s[-1];
  const int lead = s.rank - 2;
  for (int i = 0; i < lead; ++i) l.dim[2 - lead + i] = s.dims[i];
  l.stride[1] = l.dim[1] > 1 ? matrix : 0;
  l.stride[0] = l.dim[0] > 1 ? l.dim[1] * matrix : 0;
  return l;
}

// The dims of one product: op(A) is m×k, op(B) k×n, and the leading dims of A, B and C.
struct Dims {
  int64_t m, n, k, lda, ldb;
  Lead a, b, c;
};

Dims dims_of(const RunContext& ctx, const Node& n) {
  const bool ta = trans_a_of(n), tb = trans_b_of(n);
  const Shape sa = ctx.shape(n.in[0]), sb = ctx.shape(n.in[1]);
  Dims d;
  d.m = ta ? sa[-1] : sa[-2];
  d.k = ta ? sa[-2] : sa[-1];
  d.n = tb ? sb[-2] : sb[-1];
  d.lda = sa[-1];
  d.ldb = sb[-1];
  d.a = lead_of(sa);
  d.b = lead_of(sb);
  for (int i = 0; i < 2; ++i) {
    d.c.dim[i] = std::max(d.a.dim[i], d.b.dim[i]);
  }
  d.c.stride[1] = d.c.dim[1] > 1 ? d.m * d.n : 0;
  d.c.stride[0] = d.c.dim[0] > 1 ? d.c.dim[1] * d.m * d.n : 0;
  return d;
}

// ---- build ----

// in: a, b. Shapes: op(a) [..., m, k], op(b) [..., k, n] → [..., m, n], the leading dims
// broadcast from the right. A batched operand has the output's rank (its dim 0 is the output's
// batch dim); an unbatched one of that rank has 1 there (it broadcasts over the batch).
void matmul_build(Graph& g, Node& n) {
  if (n.in.size() != 2 || n.in[0] == kNoTensor || n.in[1] == kNoTensor)
    shape_error(g, "matmul", "needs two tensors", {});
  const TensorDesc &a = g.tensor(n.in[0]), &b = g.tensor(n.in[1]);
  const bool ta = trans_a_of(n), tb = trans_b_of(n);
  if (a.dtype != DType::kF32 || b.dtype != DType::kF32) shape_error(g, "matmul", "needs float tensors", n.in);
  if (a.shape.rank < 2 || b.shape.rank < 2)
    shape_error(g, "matmul", "needs tensors of at least 2 dims ([..., m, k] and [..., k, n])", n.in);
  const int64_t m = ta ? a.shape[-1] : a.shape[-2], ka = ta ? a.shape[-2] : a.shape[-1];
  const int64_t kb = tb ? b.shape[-1] : b.shape[-2], nn = tb ? b.shape[-2] : b.shape[-1];
  if (ka != kb)
    shape_error(g, "matmul",
                std::string("the inner dims differ: ") + (ta ? "a's dim -2 (a transposed)" : "a's last dim") +
                    " is " + std::to_string(ka) + ", " + (tb ? "b's last dim (b transposed)" : "b's dim -2") +
                    " is " + std::to_string(kb),
                n.in);
  const int rank = std::max(a.shape.rank, b.shape.rank);
  const bool batched = a.batched || b.batched;
  if (rank == 2 && batched && (b.batched || ta))
    shape_error(g, "matmul",
                "2-D batched operands: only a [batch, k] (not transposed) times an unbatched b [k, n]", n.in);
  for (const TensorDesc* x : {&a, &b}) {
    if (rank == 2) break;
    if (x->batched && x->shape.rank != rank)
      shape_error(g, "matmul", "a batched operand needs the output's rank " + std::to_string(rank) +
                                   " (its dim 0 is the batch dim)", n.in);
    if (batched && !x->batched && x->shape.rank == rank && x->shape[0] != 1)
      shape_error(g, "matmul", "an unbatched operand's dim 0 lines up with the batch dim and must be 1 (broadcast)",
                  n.in);
  }
  Shape out;
  out.rank = rank;
  for (int i = 1; i <= rank - 2; ++i) {  // leading dims, from the right
    const int64_t da = a.shape.rank - 2 >= i ? a.shape[-2 - i] : 1;
    const int64_t db = b.shape.rank - 2 >= i ? b.shape[-2 - i] : 1;
    if (da != db && da != 1 && db != 1)
      shape_error(g, "matmul", "leading dims do not broadcast: " + std::to_string(da) + " vs " + std::to_string(db) +
                                   " at dim " + std::to_string(rank - 2 - i),
                  n.in);
    out[-2 - i] = std::max(da, db);
  }
  out[-2] = m;
  out[-1] = nn;
  if (rank == 2 && batched) out[0] = a.shape[0];
  n.out = {g.new_tensor("matmul(" + a.name + ", " + b.name + ")", DType::kF32, out, batched)};
}

// ---- forward ----

void matmul_run(const RunContext& ctx, const Node& n, Slice s) {
  const Dims d = dims_of(ctx, n);
  const bool ta = trans_a_of(n), tb = trans_b_of(n);
  const float *a = ctx.f32(n.in[0]), *b = ctx.f32(n.in[1]);
  float* c = ctx.f32(n.out[0]);
  if (!ta && d.b.count() == 1) {
    // One B for all products and A's rows contiguous: a single product of c.count()·m rows
    // ([B, T, D]·[D, E] is one [B·T, D]·[D, E] product, like a Linear).
    sgemm_slice(false, tb, d.c.count() * d.m, d.n, d.k, 1.0f, a, d.lda, b, d.ldb, 0.0f, c, d.n, s);
    return;
  }
  GemmBatch batch{d.c.dim[0], d.c.dim[1], d.a.stride[0], d.a.stride[1],
                  d.b.stride[0], d.b.stride[1], d.c.stride[0], d.c.stride[1]};
  sgemm_batched_slice(ta, tb, d.m, d.n, d.k, 1.0f, a, d.lda, b, d.ldb, 0.0f, c, d.n, batch, s);
}

// ---- backward ----

// One operand's gradient: G_q (+)= Σ op(X_p)·op(Y_p) over the output products p that use the
// operand's matrix q, X, Y ∈ {the other operand, dC}. X and Y are indexed by output product.
struct GradProduct {
  bool tx, ty;
  int64_t m, n, k;
  const float* x;
  int64_t ldx;
  Lead xl;
  const float* y;
  int64_t ldy;
  Lead yl;
  float* g;
  int64_t ldg;
  Lead gl;  // the operand's own leading dims (1 where it is broadcast)
};

void grad_products(const GradProduct& p, const Lead& out, bool accumulate, Slice s) {
  const float beta = accumulate ? 1.0f : 0.0f;
  if (p.gl.count() == out.count()) {  // no broadcast: one product per gradient matrix
    GemmBatch batch{out.dim[0], out.dim[1], p.xl.stride[0], p.xl.stride[1],
                    p.yl.stride[0], p.yl.stride[1], p.gl.stride[0], p.gl.stride[1]};
    sgemm_batched_slice(p.tx, p.ty, p.m, p.n, p.k, 1.0f, p.x, p.ldx, p.y, p.ldy, beta, p.g, p.ldg, batch, s);
    return;
  }
  // Broadcast: each gradient matrix sums its products in increasing product order, every
  // product on all the threads. The split is static (no task counter), so each thread owns the
  // same block of G in every call and reads back only what it wrote.
  Slice fixed{s.index, s.count};
  fixed.bf16 = s.bf16;
  for (int64_t q0 = 0; q0 < p.gl.dim[0]; ++q0)
    for (int64_t q1 = 0; q1 < p.gl.dim[1]; ++q1) {
      float* gq = p.g + q0 * p.gl.stride[0] + q1 * p.gl.stride[1];
      bool first = true;
      for (int64_t i0 = 0; i0 < out.dim[0]; ++i0) {
        if (p.gl.dim[0] > 1 && i0 != q0) continue;
        for (int64_t i1 = 0; i1 < out.dim[1]; ++i1) {
          if (p.gl.dim[1] > 1 && i1 != q1) continue;
          const float* xp = p.x + i0 * p.xl.stride[0] + i1 * p.xl.stride[1];
          const float* yp = p.y + i0 * p.yl.stride[0] + i1 * p.yl.stride[1];
          sgemm_slice(p.tx, p.ty, p.m, p.n, p.k, 1.0f, xp, p.ldx, yp, p.ldy, first ? beta : 1.0f, gq, p.ldg,
                      fixed);
          first = false;
        }
      }
    }
}

// Backward node: in (a, b, dC); out (dA, dB), either absent. With C = op(A)·op(B):
// d op(A) = dC·op(B)ᵀ and d op(B) = op(A)ᵀ·dC, so
//   dA = dC·op(B)ᵀ (or op(B)·dCᵀ when A is transposed),
//   dB = op(A)ᵀ·dC (or dCᵀ·op(A) when B is transposed),
// summed over the products that broadcast the operand.
void matmul_backward_run(const RunContext& ctx, const Node& n, Slice s) {
  const Dims d = dims_of(ctx, n);
  const bool ta = trans_a_of(n), tb = trans_b_of(n);
  const float *a = ctx.f32(n.in[0]), *b = ctx.f32(n.in[1]), *dc = ctx.f32(n.in[2]);
  const bool want_a = n.out.size() > 0 && n.out[0] != kNoTensor;
  const bool want_b = n.out.size() > 1 && n.out[1] != kNoTensor;
  // A not transposed, one B for all products: A and dC are [count·m, ·] matrices, so dA is one
  // product and dB one product whose inner dim runs over all count·m rows (the sum over the
  // broadcast, in row order).
  const bool stacked = !ta && d.b.count() == 1;
  if (want_a) {
    float* da = ctx.f32(n.out[0]);
    const float beta = n.accumulates(0) ? 1.0f : 0.0f;
    if (stacked) {
      sgemm_slice(false, !tb, d.c.count() * d.m, d.k, d.n, 1.0f, dc, d.n, b, d.ldb, beta, da, d.k, s);
    } else if (!ta) {
      grad_products({false, !tb, d.m, d.k, d.n, dc, d.n, d.c, b, d.ldb, d.b, da, d.k, d.a}, d.c,
                    n.accumulates(0), s);
    } else {
      grad_products({tb, true, d.k, d.m, d.n, b, d.ldb, d.b, dc, d.n, d.c, da, d.m, d.a}, d.c,
                    n.accumulates(0), s);
    }
  }
  if (want_b) {
    float* db = ctx.f32(n.out[1]);
    const float beta = n.accumulates(1) ? 1.0f : 0.0f;
    const Slice s1 = s.with_counter(1);  // its own task counter
    const int64_t rows = d.c.count() * d.m;
    if (stacked && !tb) {
      sgemm_slice(true, false, d.k, d.n, rows, 1.0f, a, d.lda, dc, d.n, beta, db, d.n, s1);
    } else if (stacked) {
      sgemm_slice(true, false, d.n, d.k, rows, 1.0f, dc, d.n, a, d.lda, beta, db, d.k, s1);
    } else if (!tb) {
      grad_products({!ta, false, d.k, d.n, d.m, a, d.lda, d.a, dc, d.n, d.c, db, d.n, d.b}, d.c,
                    n.accumulates(1), s1);
    } else {
      grad_products({true, ta, d.n, d.k, d.m, dc, d.n, d.c, a, d.lda, d.a, db, d.k, d.b}, d.c,
                    n.accumulates(1), s1);
    }
  }
}

void matmul_differentiate(Autodiff& ad, const Node& n) {
  Node b;
  b.op = OpKind::kMatmulBackward;
  b.in = {n.in[0], n.in[1], ad.grad(n.out[0])};
  b.attrs = n.attrs;
  b.backward = true;
  if (n.in[0] == n.in[1]) {
    // matmul(x, x): both gradients go to one tensor, so they are two nodes (the executor puts
    // a barrier between writes to the same tensor).
    Node second = b;
    set_out_accumulate(b, 0, ad.contribute(n.in[0]));
    if (b.out[0] != kNoTensor) ad.graph().add_node(std::move(b));
    second.out = {kNoTensor};
    set_out_accumulate(second, 1, ad.contribute(n.in[1]));
    if (second.out[1] != kNoTensor) ad.graph().add_node(std::move(second));
    return;
  }
  set_out_accumulate(b, 0, ad.contribute(n.in[0]));
  set_out_accumulate(b, 1, ad.contribute(n.in[1]));
  if (b.out[0] != kNoTensor || b.out[1] != kNoTensor) ad.graph().add_node(std::move(b));
}

void no_build(Graph&, Node&) {}

}  // namespace

extern const OpDef kMatmulOp = {"matmul", matmul_build, matmul_run, matmul_differentiate, false};
extern const OpDef kMatmulBackwardOp = {"matmul_backward", no_build, matmul_backward_run, nullptr, false};

Tensor matmul(Tensor a, Tensor b, bool trans_a, bool trans_b) {
  if (!a.valid() || !b.valid()) throw ShapeError("matmul: needs two tensors");
  if (&a.graph() != &b.graph()) throw ShapeError("matmul: tensors belong to different graphs");
  NodeAttrs attrs;
  attrs.trans_a = trans_a, attrs.trans_b = trans_b;
  return a.graph().apply(OpKind::kMatmul, {a.id(), b.id()}, attrs)[0];
}

}  // namespace attnkit

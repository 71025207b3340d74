// The graph rewrites, all in one place. backward() runs them around differentiation:
//   before: optimize_forward (folds projections of embedding lookups into the tables),
//           remove_dead_forward_nodes (drops forward nodes nothing kept or differentiated reads)
//           and fold_attention_values ((P·V)·W + b → Σ_h P_h·(V_h·W_h) + b, V_h·W_h on the tables);
//   after:  fuse_elementwise (ReLUs and residual sums into the products next to them).
// Each pass matches only the op patterns it names and leaves every other node as it is, so
// graphs of primitive ops (engine/functional.h) stay correct through all of them.
#include <algorithm>

#include "engine/functional.h"
#include "engine/graph.h"
#include "engine/op_table.h"
#include "engine/passes.h"

namespace attnkit {

Tensor plain_linear(Graph& g, TensorId x, const Tensor& w, const Tensor& b) {
  return g.apply(OpKind::kLinear, {x, w.id(), b.valid() ? b.id() : kNoTensor})[0];
}

namespace {

// A Linear node without per-head blocks (NodeAttrs::heads): the only kind the passes fuse or
// fold (a per-head one takes its blocks' products, not x·W).
bool plain_linear_node(const Node& n) { return n.op == OpKind::kLinear && n.attrs.heads == 1; }

// plain_linear per head block (see folded_linear): one Linear with attrs.heads (its products
// block by block, see engine/op_linear.cc), the bias with head 0's block. (As a narrow of x and
// of W, a Linear and a concat per head, neighbor-sum's value tables took 16 more nodes a step.)
Tensor heads_linear(Graph& g, TensorId x, const Tensor& w, const Tensor& b, int64_t heads) {
  if (heads == 1) return plain_linear(g, x, w, b);
  NodeAttrs attrs;
  attrs.heads = heads;
  return g.apply(OpKind::kLinear, {x, w.id(), b.valid() ? b.id() : kNoTensor}, attrs)[0];
}

// Rows the product x·W costs when folded into x's embedding tables (at most x's own rows).
int64_t folded_rows(const Graph& g, TensorId x, int depth) {
  const TensorDesc& d = g.tensor(x);
  const int64_t rows = d.shape.rows();
  const int64_t p = g.producer(x);
  if (p < 0 || depth > 8) return rows;
  const Node& n = g.nodes()[static_cast<size_t>(p)];
  if (n.op == OpKind::kEmbedding) {
    const int64_t addend = n.in.size() > 2 && n.in[2] != kNoTensor ? folded_rows(g, n.in[2], depth + 1) : 0;
    return std::min(rows, g.tensor(n.in[0]).shape[0] + addend);
  }
  if (n.op == OpKind::kAdd)
    return std::min(rows, folded_rows(g, n.in[0], depth + 1) + folded_rows(g, n.in[1], depth + 1));
  return rows;
}

}  // namespace

Tensor folded_linear(Graph& g, TensorId x, const Tensor& w, const Tensor& b, int depth, int64_t heads) {
  if (folded_rows(g, x, depth) >= g.tensor(x).shape.rows()) return heads_linear(g, x, w, b, heads);
  const Node n = g.nodes()[static_cast<size_t>(g.producer(x))];  // a copy: apply() appends
  if (n.op == OpKind::kEmbedding) {  // table[ids]·W + b = (table·W + b)[ids] (+ addend·W)
    const Tensor projected = heads_linear(g, n.in[0], w, b, heads);
    const TensorId addend =
        n.in[2] != kNoTensor ? folded_linear(g, n.in[2], w, Tensor(), depth + 1, heads).id() : kNoTensor;
    return g.apply(OpKind::kEmbedding, {projected.id(), n.in[1], addend})[0];
  }
  // (a + c)·W + b = (a·W + b) + c·W; a is the full-shape operand, c may broadcast.
  const TensorDesc& c = g.tensor(n.in[1]);
  const int64_t pa = g.producer(n.in[0]);
  if (!c.batched && pa >= 0 && g.nodes()[static_cast<size_t>(pa)].op == OpKind::kEmbedding &&
      g.nodes()[static_cast<size_t>(pa)].in[2] == kNoTensor &&
      folded_rows(g, n.in[0], depth + 1) < g.tensor(n.in[0]).shape.rows()) {
    // a = table[ids]: one lookup adds c·W on the way, (table·W + b)[ids] + c·W.
    const Node lookup = g.nodes()[static_cast<size_t>(pa)];
    const Tensor projected = heads_linear(g, lookup.in[0], w, b, heads);
    const Tensor addend = folded_linear(g, n.in[1], w, Tensor(), depth + 1, heads);
    return g.apply(OpKind::kEmbedding, {projected.id(), lookup.in[1], addend.id()})[0];
  }
  return folded_linear(g, n.in[0], w, b, depth + 1, heads) + folded_linear(g, n.in[1], w, Tensor(), depth + 1, heads);
}

void Graph::optimize_for_inference() {
  if (has_backward()) throw ShapeError("optimize_for_inference: the graph has a backward (it is a training graph)");
  if (fold_embedding_projections_) optimize_forward(kNoTensor);
  remove_dead_forward_nodes(kNoTensor);  // (fold_attention_values counts the uses left)
  if (fold_embedding_projections_) fold_attention_values();
  remove_dead_forward_nodes(kNoTensor);
  if (fuse_elementwise_) fuse_elementwise(kNoTensor);
  if (fold_embedding_projections_) fold_lookup_addends();
  if (fuse_elementwise_) fuse_residual_relu();
  if (fuse_elementwise_) fuse_attention_addends();
  if (fold_embedding_projections_) index_attention_lookups();
  hoist_unbatched_nodes();
}

size_t Graph::unbatched_prefix() const {
  size_t k = 0;
  for (; k < forward_nodes_; ++k) {
    bool batched = false;
    for (const auto* list : {&nodes_[k].in, &nodes_[k].out, &nodes_[k].scratch})
      for (TensorId t : *list) batched = batched || (t != kNoTensor && tensor(t).batched);
    if (batched) break;
  }
  return k;
}

namespace {

// Drops the nodes marked dead, keeping the order.
void erase_dead(std::vector<Node>& nodes, const std::vector<bool>& dead) {
  size_t j = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (dead[i]) continue;
    if (i != j) nodes[j] = std::move(nodes[i]);
    ++j;
  }
  nodes.resize(j);
}

}  // namespace

void Graph::fold_attention_values() {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node lin = nodes_[i];  // copies: the pass appends nodes
    if (!plain_linear_node(lin) || lin.in.size() != 3 || lin.attrs.relu || lin.accumulate != 0) continue;
    const TensorId a = lin.in[0], w = lin.in[1], b = lin.in[2];
    const int64_t pa = producer(a);
    if (pa < 0 || uses(a, kNoTensor) != 1 || tensor(w).batched || (b != kNoTensor && tensor(b).batched)) continue;
    const Node att = nodes_[static_cast<size_t>(pa)];
    if (att.op != OpKind::kAttention || att.out[0] != a || att.attrs.sum_heads || att.attrs.relu ||
        att.accumulate != 0)
      continue;
    // The attention moves to the Linear's place: nothing in between may read its maps.
    if (uses(att.out[1], kNoTensor) > 1) continue;
    const TensorId v = att.in[2];
    if (uses(v, kNoTensor) != 1 || tensor(v).keep || tensor(v).shape.rank != 3) continue;
    // Products per query row, per head h (dv its value columns, W_h those rows of W): before,
    // H·Tk·dv + H·dv·N; after, Σ_h P_h·(V_h·W_h): H·Tk·N, plus H·N adding up the heads.
    const int64_t heads = att.attrs.heads;
    const int64_t tk = tensor(v).shape[1], dv = tensor(v).shape[2] / heads, n = tensor(w).shape[1];
    if (heads * tk * n + (heads > 1 ? heads * n : 0) >= heads * tk * dv + heads * dv * n) continue;
    if (folded_rows(*this, v, 0) >= tensor(v).shape.rows()) continue;
    const size_t first_new = nodes_.size();
    const Tensor v_projected = folded_linear(*this, v, Tensor(this, w), Tensor(this, b), 0, heads);
    Node mixed = att;  // Σ_h P_h·(V_h·W_h (+ b for h = 0)), written into the Linear's output; the same maps
    mixed.in[2] = v_projected.id();
    mixed.attrs.sum_heads = heads > 1;
    mixed.out = {lin.out[0], att.out[1]};
    std::vector<Node> added(nodes_.begin() + static_cast<std::ptrdiff_t>(first_new), nodes_.end());
    nodes_.resize(first_new);
    added.push_back(std::move(mixed));
    nodes_.erase(nodes_.begin() + static_cast<std::ptrdiff_t>(i));
    nodes_.erase(nodes_.begin() + pa);
    const size_t at = i - 1;
    nodes_.insert(nodes_.begin() + static_cast<std::ptrdiff_t>(at), added.begin(), added.end());
    i = at + added.size() - 1;
    forward_nodes_ = nodes_.size();
  }
}

// Per-(token, position) tables read inside an attention's kernels (index_attention_values,
// index_attention_lookups): sequences the kernels' short path takes, tables of at most 1 MB.
constexpr int64_t kMaxTablePositions = 16;
constexpr int64_t kMaxTableBytes = int64_t{1} << 20;

size_t Graph::move_new_nodes_before(size_t first_new, size_t i) {
  std::vector<Node> added(nodes_.begin() + static_cast<std::ptrdiff_t>(first_new), nodes_.end());
  nodes_.resize(first_new);
  nodes_.insert(nodes_.begin() + static_cast<std::ptrdiff_t>(i), added.begin(), added.end());
  return added.size();
}

void Graph::index_attention_values(TensorId loss) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    // Head-summed attentions (fold_attention_values with several heads): their kernels read the
    // value rows through pointers, so the table costs nothing there (one head's kernels would
    // copy each sequence's rows: duplicates and reversal ran 0–1% slower).
    if (nodes_[i].op != OpKind::kAttention || nodes_[i].attrs.indexed || nodes_[i].attrs.v_indexed ||
        !nodes_[i].attrs.sum_heads || nodes_[i].in.size() != 4)
      continue;
    const Node att = nodes_[i];  // a copy: apply() appends nodes
    const TensorId v = att.in[2];
    const int64_t p = producer(v);
    if (p < 0) continue;
    const Node lookup = nodes_[static_cast<size_t>(p)];
    if (lookup.op != OpKind::kEmbedding || lookup.in.size() != 3 || lookup.out[0] != v) continue;
    const TensorDesc &vd = tensor(v), &table = tensor(lookup.in[0]), &ids = tensor(lookup.in[1]);
    if (vd.keep || vd.requires_grad || vd.retain_grad || uses(v, loss) != 1) continue;
    if (table.batched || table.shape.rank != 2 || ids.dtype != DType::kI32 || !ids.batched || ids.shape.rank != 2)
      continue;
    const int64_t t = ids.shape[1], vocab = table.shape[0];
    if (t > kMaxTablePositions || vd.shape.rank != 3 || tensor(att.in[1]).shape[1] != t) continue;
    if (lookup.in[2] != kNoTensor && tensor(lookup.in[2]).batched) continue;
    // A small table (neighbor-sum's: 10·10 rows of 256, 100 KB): not against the batch, so that
    // a graph's nodes, hence its bits, do not depend on the batch it was planned for.
    if (vocab * t * vd.shape[2] * 4 > kMaxTableBytes) continue;
    // The output's starting value (the folded head's residual, neighbor-sum's h·W + b): a sum
    // y + r whose r is a lookup of the same ids, [B, T, width] written and read again (and its
    // gradient's rows scattered) each step, becomes a start table of the (token, position)
    // pairs read in place by the kernel; attention_values_backward adds its gradient's rows.
    int64_t sum = -1;
    const TensorId y = att.out[0];
    const TensorDesc& yd = tensor(y);
    if (!yd.keep && !yd.requires_grad && !yd.retain_grad && uses(y, loss) == 1 && tensor(att.in[0]).shape[1] == t)
      for (size_t j = i + 1; j < nodes_.size() && sum < 0; ++j) {
        const Node& a = nodes_[j];
        if (a.op != OpKind::kAdd || a.in.size() != 2 || (a.in[0] != y && a.in[1] != y) || a.in[0] == a.in[1]) continue;
        const TensorId r = a.in[0] == y ? a.in[1] : a.in[0];
        const int64_t q = producer(r);
        if (q < 0) break;
        const Node& e = nodes_[static_cast<size_t>(q)];
        const TensorDesc &rd = tensor(r), &sd = tensor(a.out[0]);
        if (e.op != OpKind::kEmbedding || e.in.size() != 3 || e.out[0] != r || e.in[1] != lookup.in[1]) break;
        if (rd.keep || rd.requires_grad || rd.retain_grad || uses(r, loss) != 1) break;
        if (rd.shape != yd.shape || rd.batched != yd.batched || sd.shape != yd.shape || sd.batched != yd.batched) break;
        if (tensor(e.in[0]).batched || (e.in[2] != kNoTensor && tensor(e.in[2]).batched)) break;
        // (The start table is built before the attention: its table and addend must be there.)
        if (producer(e.in[0]) >= static_cast<int64_t>(i) ||
            (e.in[2] != kNoTensor && producer(e.in[2]) >= static_cast<int64_t>(i)))
          break;
        if ((vocab * t * vd.shape[2] + vocab * t * yd.shape[2]) * 4 > kMaxTableBytes) break;
        sum = static_cast<int64_t>(j);
      }
    const size_t first_new = nodes_.size();
    const TensorId rows = pair_rows(vocab, t).id();
    const TensorId values = apply(OpKind::kEmbedding, {lookup.in[0], rows, lookup.in[2]})[0].id();  // [V, T, Dv]
    TensorId start = kNoTensor;
    if (sum >= 0) {
      const Node& a = nodes_[static_cast<size_t>(sum)];
      const Node e = nodes_[static_cast<size_t>(producer(a.in[0] == y ? a.in[1] : a.in[0]))];
      start = apply(OpKind::kEmbedding, {e.in[0], rows, e.in[2]})[0].id();  // [V, T, width]
    }
    Node ix = att;
    ix.in = {att.in[0], att.in[1], values, att.in[3], lookup.in[1], start};
    ix.attrs.v_indexed = true;
    if (sum >= 0) ix.out[0] = nodes_[static_cast<size_t>(sum)].out[0];  // the sum's reader reads the attention's
    const size_t added = move_new_nodes_before(first_new, i);
    if (sum >= 0) nodes_.erase(nodes_.begin() + sum + static_cast<std::ptrdiff_t>(added));
    i += added;
    nodes_[i] = std::move(ix);
    forward_nodes_ = nodes_.size();
  }
}

void Graph::fold_lookup_addends() {
  std::vector<bool> dead(nodes_.size(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& sum = nodes_[i];
    if (sum.op != OpKind::kAdd || sum.in.size() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const TensorId y = sum.in[static_cast<size_t>(k)], c = sum.in[static_cast<size_t>(1 - k)];
      const int64_t p = producer(y);
      if (p < 0 || dead[static_cast<size_t>(p)] || uses(y, kNoTensor) != 1 || y == c) continue;
      const Node& lookup = nodes_[static_cast<size_t>(p)];
      if (lookup.op != OpKind::kEmbedding || lookup.in.size() != 3 || lookup.in[2] != kNoTensor) continue;
      const TensorDesc &dy = tensor(y), &dc = tensor(c), &ds = tensor(sum.out[0]);
      // The addend: float, unbatched, matching the lookup's trailing dims.
      bool ok = dc.dtype == DType::kF32 && !dc.batched && dc.shape.rank <= dy.shape.rank && ds.shape == dy.shape &&
                ds.batched == dy.batched;
      for (int d = 1; ok && d <= dc.shape.rank; ++d) ok = dc.shape[-d] == dy.shape[-d];
      if (!ok) continue;
      // The lookup takes the sum's place (its table and ids are there before; c is there by then).
      Node fused = lookup;
      fused.in[2] = c;
      fused.out[0] = sum.out[0];
      nodes_[i] = std::move(fused);
      dead[static_cast<size_t>(p)] = true;
      break;
    }
  }
  erase_dead(nodes_, dead);
  forward_nodes_ = nodes_.size();
}

void Graph::fuse_residual_relu() {
  std::vector<bool> dead(nodes_.size(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& r = nodes_[i];
    if (r.op != OpKind::kRelu) continue;
    const TensorId y = r.in[0], z = r.out[0];
    const int64_t p = producer(y);
    if (p < 0 || uses(y, kNoTensor) != 1) continue;
    Node& lin = nodes_[static_cast<size_t>(p)];
    if (!plain_linear_node(lin) || lin.in.size() != 4 || lin.attrs.relu || lin.accumulate != 0) continue;
    const TensorId res = lin.in[3];
    const int64_t q = producer(res);
    if (q < 0 || q > p || uses(res, kNoTensor) != 1 || tensor(res).keep) continue;
    Node& lookup = nodes_[static_cast<size_t>(q)];
    if (lookup.op != OpKind::kEmbedding || lookup.out[0] != res) continue;
    // relu(x·W + b + r): r written into z by the lookup, then z = relu(x·W + z + b).
    lookup.out[0] = z;
    lin.in.pop_back();
    lin.out[0] = z;
    lin.accumulate = 1u;
    lin.attrs.relu = true;
    dead[i] = true;
  }
  erase_dead(nodes_, dead);
  forward_nodes_ = nodes_.size();
}

void Graph::fuse_attention_addends(TensorId loss) {
  std::vector<bool> dead(nodes_.size(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& sum = nodes_[i];
    if (dead[i] || sum.op != OpKind::kAdd || sum.in.size() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const TensorId y = sum.in[static_cast<size_t>(k)], r = sum.in[static_cast<size_t>(1 - k)];
      const int64_t p = producer(y), q = producer(r);
      if (p < 0 || q < 0 || q > p || y == r || uses(y, loss) != 1 || uses(r, loss) != 1 || tensor(r).keep)
        continue;
      const Node& att = nodes_[static_cast<size_t>(p)];
      const Node& lookup = nodes_[static_cast<size_t>(q)];
      if (att.op != OpKind::kAttention || (!att.attrs.sum_heads && att.attrs.heads != 1) || att.attrs.relu ||
          att.attrs.indexed || att.accumulate != 0 ||
          att.out[0] != y)
        continue;
      if (lookup.op != OpKind::kEmbedding || lookup.out[0] != r) continue;
      const TensorDesc &dy = tensor(y), &dr = tensor(r);
      if (dy.shape != dr.shape || dy.batched != dr.batched || dy.dtype != dr.dtype) continue;
      // relu(y + r) when a ReLU is the sum's only reader.
      TensorId z = sum.out[0];
      int64_t relu = -1;
      if (uses(z, loss) == 1)
        for (size_t j = i + 1; j < nodes_.size() && relu < 0; ++j)
          if (nodes_[j].op == OpKind::kRelu && nodes_[j].in[0] == z) relu = static_cast<int64_t>(j);
      if (relu >= 0) {
        z = nodes_[static_cast<size_t>(relu)].out[0];
        dead[static_cast<size_t>(relu)] = true;
      }
      // The lookup writes r into z, the attention adds its heads to it (and applies the ReLU).
      nodes_[static_cast<size_t>(q)].out[0] = z;
      Node& a = nodes_[static_cast<size_t>(p)];
      a.out[0] = z;
      a.accumulate |= 1u;
      a.attrs.relu = relu >= 0;
      dead[i] = true;
      break;
    }
  }
  size_t forward = 0;  // (a training graph's backward nodes follow its forward ones)
  for (size_t i = 0; i < forward_nodes_; ++i) forward += !dead[i];
  erase_dead(nodes_, dead);
  forward_nodes_ = forward;
}

void Graph::index_attention_lookups() {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].op != OpKind::kAttention || nodes_[i].attrs.indexed || nodes_[i].in.size() != 4) continue;
    const Node att = nodes_[i];  // a copy: apply() appends nodes
    const TensorDesc& qd = tensor(att.in[0]);
    if (qd.shape.rank != 3 || qd.shape[1] > kMaxTablePositions || tensor(att.in[1]).shape[1] != qd.shape[1]) continue;
    const int64_t t = qd.shape[1];
    // q, k, v, and the output's starting value: lookups table[ids] (+ pos) of the same ids.
    int64_t at[4] = {-1, -1, -1, -1};
    TensorId ids = kNoTensor;
    int64_t vocab = -1, bytes = 0;
    auto usable = [&](int64_t p) {
      if (p < 0) return false;
      const Node& e = nodes_[static_cast<size_t>(p)];
      if (e.op != OpKind::kEmbedding || e.in.size() != 3) return false;
      const TensorDesc &table = tensor(e.in[0]), &id = tensor(e.in[1]);
      if (table.batched || table.shape.rank != 2 || !id.batched || id.shape.rank != 2 || id.shape[1] != t) return false;
      if (e.in[2] != kNoTensor && tensor(e.in[2]).batched) return false;
      if (ids == kNoTensor) ids = e.in[1], vocab = table.shape[0];
      if (e.in[1] != ids || table.shape[0] != vocab) return false;
      bytes += vocab * t * table.shape[1] * 4;
      return true;
    };
    bool ok = true;
    for (int x = 0; x < 3 && ok; ++x) {
      const TensorId in = att.in[static_cast<size_t>(x)];
      at[x] = producer(in);
      ok = usable(at[x]) && uses(in, kNoTensor) == 1 && !tensor(in).keep;
    }
    if (ok && att.accumulates(0)) {  // the lookup that wrote the output first (fuse_attention_addends)
      for (size_t j = i; j-- > 0 && at[3] < 0;)
        for (TensorId o : nodes_[j].out)
          if (o == att.out[0]) at[3] = static_cast<int64_t>(j);
      ok = usable(at[3]) && nodes_[static_cast<size_t>(at[3])].out.size() == 1;
    }
    if (!ok || bytes > kMaxTableBytes) continue;  // (all four tables of one attention)
    const size_t first_new = nodes_.size();
    const TensorId rows = pair_rows(vocab, t).id();
    TensorId tables[4] = {kNoTensor, kNoTensor, kNoTensor, kNoTensor};
    for (int x = 0; x < 4; ++x) {
      if (at[x] < 0) continue;
      const Node e = nodes_[static_cast<size_t>(at[x])];  // table[v] + pos[t] for every (v, t)
      tables[x] = apply(OpKind::kEmbedding, {e.in[0], rows, e.in[2]})[0].id();
    }
    // softmax(scale·S) over all of S, every score of the tables' rows, when there are fewer of
    // those than scores per call: a sequence's probabilities are then lookups of it,
    // normalized (the products Q·Kᵀ, the exponentials and the maxima of each call disappear).
    const int64_t heads = att.attrs.heads, table_rows = vocab * t, dh = qd.shape[2] / heads;
    TensorId scores = kNoTensor;
    if (heads * table_rows * table_rows * 4 <= kMaxTableBytes / 2 && table_rows * table_rows < qd.shape[0] * t * t) {
      auto per_head = [&](TensorId x) {  // [V, T, H·dh] → [H, V·T, dh]
        return transpose(reshape(Tensor(this, x), Shape{table_rows, heads, dh}), 0, 1);
      };
      SoftmaxOptions so;
      so.scale = att.attrs.scale;
      scores = softmax(matmul(per_head(tables[0]), per_head(tables[1]), false, true), so).id();
    }
    Node ix = att;
    ix.in = {tables[0], tables[1], tables[2], att.in[3], ids, tables[3], scores};
    ix.attrs.indexed = true;
    ix.accumulate &= ~1u;
    const size_t added = move_new_nodes_before(first_new, i);
    nodes_[i + added] = std::move(ix);
    std::vector<int64_t> gone;
    for (int64_t p : at)
      if (p >= 0) gone.push_back(p);
    std::sort(gone.begin(), gone.end());
    gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
    for (size_t g = gone.size(); g-- > 0;) nodes_.erase(nodes_.begin() + gone[g]);
    i = i + added - gone.size();
    forward_nodes_ = nodes_.size();
  }
}

void Graph::hoist_unbatched_nodes() {
  // A node moves to the front when it touches no batched tensor and reads and writes nothing
  // an earlier node that stays behind writes or reads.
  std::vector<bool> front(nodes_.size(), false), behind_read(tensors_.size(), false),
      behind_written(tensors_.size(), false);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    bool ok = true;
    for (TensorId t : n.in)
      if (t != kNoTensor) ok = ok && !tensor(t).batched && !behind_written[static_cast<size_t>(t)];
    for (const auto* list : {&n.out, &n.scratch})
      for (TensorId t : *list)
        if (t != kNoTensor)
          ok = ok && !tensor(t).batched && !behind_written[static_cast<size_t>(t)] && !behind_read[static_cast<size_t>(t)];
    front[i] = ok;
    if (ok) continue;
    for (TensorId t : n.in)
      if (t != kNoTensor) behind_read[static_cast<size_t>(t)] = true;
    for (const auto* list : {&n.out, &n.scratch})
      for (TensorId t : *list)
        if (t != kNoTensor) behind_written[static_cast<size_t>(t)] = true;
  }
  std::vector<Node> ordered;
  ordered.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (front[i]) ordered.push_back(nodes_[i]);
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (!front[i]) ordered.push_back(nodes_[i]);
  nodes_ = std::move(ordered);
  forward_nodes_ = nodes_.size();
}

int64_t Graph::uses(TensorId t, TensorId loss) const {
  int64_t n = tensor(t).keep || t == loss ? 1 : 0;
  for (const Node& node : nodes_)
    for (TensorId in : node.in) n += in == t;
  return n;
}

// See graph.h. The lessons' head(h + attn(h)): attn(h) = a·Wo + bo is used only by the sum,
// and the sum only by head.0, so head.0(h + attn(h)) = h·W (folded into the lookup tables) +
// a·(Wo·W) + (bo·W + b): the output projection's batch × T rows disappear, forward and
// backward, for a D × D × out product of the weights.
void Graph::optimize_forward(TensorId loss) {
  auto uses = [&](TensorId t) { return this->uses(t, loss); };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node lin = nodes_[i];
    if (!plain_linear_node(lin)) continue;
    const TensorId x = lin.in[0];
    const int64_t px = producer(x);
    if (px < 0 || nodes_[static_cast<size_t>(px)].op != OpKind::kAdd || uses(x) != 1) continue;
    const Node sum = nodes_[static_cast<size_t>(px)];
    // Which operand is a Linear's output used only here (c = a·Wc + bc), which a lookup sum (p)?
    TensorId c = kNoTensor, p = kNoTensor;
    for (int k = 0; k < 2 && c == kNoTensor; ++k) {
      const TensorId cand = sum.in[static_cast<size_t>(k)], other = sum.in[static_cast<size_t>(1 - k)];
      const int64_t pc = producer(cand);
      if (pc < 0 || !plain_linear_node(nodes_[static_cast<size_t>(pc)]) || uses(cand) != 1) continue;
      if (tensor(cand).shape != tensor(x).shape || tensor(other).shape != tensor(x).shape) continue;
      const TensorId a = nodes_[static_cast<size_t>(pc)].in[0];
      if (tensor(a).shape.last() > tensor(x).shape.last()) continue;  // a·(Wc·W) must not cost more
      if (folded_rows(*this, other, 0) >= tensor(other).shape.rows()) continue;
      c = cand, p = other;
    }
    if (c == kNoTensor) continue;
    const Node proj = nodes_[static_cast<size_t>(producer(c))];
    const Tensor w(this, lin.in[1]), b(this, lin.in[2]), wc(this, proj.in[1]), bc(this, proj.in[2]);
    const size_t first_new = nodes_.size();
    const Tensor w_merged = plain_linear(*this, wc.id(), w, Tensor());           // Wc·W
    const Tensor b_merged = bc.valid() ? plain_linear(*this, bc.id(), w, b) : b;  // bc·W + b
    // The lookup first: the product ya then runs after it and can add it in its store
    // (see fuse_elementwise).
    const Tensor yp = folded_linear(*this, p, w, Tensor(), 0);
    const Tensor ya = plain_linear(*this, proj.in[0], w_merged, b_merged);
    (void)(ya + yp);  // the last new node: its output becomes the old node's below
    // The new nodes take the old node's place and write its output tensor.
    std::vector<Node> added(nodes_.begin() + static_cast<std::ptrdiff_t>(first_new), nodes_.end());
    nodes_.resize(first_new);
    added.back().out[0] = lin.out[0];
    nodes_.erase(nodes_.begin() + static_cast<std::ptrdiff_t>(i));
    nodes_.insert(nodes_.begin() + static_cast<std::ptrdiff_t>(i), added.begin(), added.end());
    i += added.size() - 1;
    forward_nodes_ = nodes_.size();
  }
}

void Graph::remove_dead_forward_nodes(TensorId loss) {
  std::vector<bool> live(tensors_.size(), false);
  if (loss != kNoTensor) live[static_cast<size_t>(loss)] = true;
  for (size_t t = 0; t < tensors_.size(); ++t) live[t] = live[t] || tensors_[t].keep;
  std::vector<bool> keep_node(nodes_.size(), false);
  for (size_t i = nodes_.size(); i-- > 0;) {
    const Node& n = nodes_[i];
    for (TensorId o : n.out) keep_node[i] = keep_node[i] || (o != kNoTensor && live[static_cast<size_t>(o)]);
    if (!keep_node[i]) continue;
    for (TensorId in : n.in)
      if (in != kNoTensor) live[static_cast<size_t>(in)] = true;
  }
  size_t j = 0;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (keep_node[i]) {
      if (i != j) nodes_[j] = std::move(nodes_[i]);  // (a self-move would empty the node)
      ++j;
    }
  nodes_.resize(j);
  forward_nodes_ = nodes_.size();
}

void Graph::fuse_elementwise(TensorId loss) {
  auto uses = [&](TensorId t) { return this->uses(t, loss); };
  auto writers = [&](TensorId t) {
    std::vector<size_t> w;
    for (size_t i = 0; i < nodes_.size(); ++i)
      for (TensorId o : nodes_[i].out)
        if (o == t) w.push_back(i);
    return w;
  };
  std::vector<bool> dead(nodes_.size(), false);
  auto live_producer = [&](TensorId t) -> int64_t {  // (a fused node's old writer is dead)
    for (size_t i = nodes_.size(); i-- > 0;)
      if (!dead[i])
        for (TensorId o : nodes_[i].out)
          if (o == t) return static_cast<int64_t>(i);
    return -1;
  };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& r = nodes_[i];
    if (r.op == OpKind::kRelu) {  // z = x·W + b (+ r); y = relu(z)  →  y = relu(x·W + b (+ r))
      const TensorId z = r.in[0];
      const int64_t p = live_producer(z);
      if (p < 0 || uses(z) != 1) continue;
      Node& lin = nodes_[static_cast<size_t>(p)];
      if (lin.op == OpKind::kAttention && lin.attrs.v_indexed && lin.in.size() > 5 && lin.in[5] != kNoTensor &&
          !lin.attrs.relu && lin.out[0] == z && loss != kNoTensor) {
        // A training attention that starts from its start table (index_attention_values):
        // the ReLU runs in its stores, as the fused residual's did (fuse_attention_addends).
        lin.attrs.relu = true;
        lin.out[0] = r.out[0];
        dead[i] = true;
        continue;
      }
      if (!plain_linear_node(lin) || lin.attrs.relu) continue;
      // With a residual addend (fused by the kAdd case below) the ReLU comes after it
      // (linear_run's relu_last): training graphs; inference graphs take fuse_residual_relu.
      if (lin.in.size() > 3 && loss == kNoTensor) continue;
      lin.attrs.relu = true;
      lin.attrs.relu_last = lin.in.size() > 3;
      lin.out[0] = r.out[0];
      dead[i] = true;
    } else if (r.op == OpKind::kReluBackward && !r.accumulates(0)) {
      // gy = dy·Wᵀ (the next Linear's dx, y its input); gz = gy where y > 0.
      const TensorId y = r.in[0], gy = r.in[1];
      const std::vector<size_t> w = writers(gy);
      if (w.size() != 1 || uses(gy) != 1) continue;
      Node& lb = nodes_[w[0]];
      if (lb.op != OpKind::kLinearBackward || lb.attrs.heads != 1 || lb.out[0] != gy || lb.accumulates(0) ||
          lb.in[0] != y || lb.attrs.relu)
        continue;
      lb.attrs.relu = true;
      lb.out[0] = r.out[0];
      dead[i] = true;
    } else if (r.op == OpKind::kAdd && i < forward_nodes_) {  // y = x·W + b; z = y + r
      for (int k = 0; k < 2; ++k) {
        const TensorId y = r.in[static_cast<size_t>(k)], res = r.in[static_cast<size_t>(1 - k)];
        const int64_t p = producer(y);
        if (p < 0 || uses(y) != 1) continue;
        Node& lin = nodes_[static_cast<size_t>(p)];
        if (!plain_linear_node(lin) || lin.in.size() > 3) continue;
        const TensorDesc &dy = tensor(y), &dr = tensor(res);
        if (dy.shape != dr.shape || dy.batched != dr.batched) continue;  // not a broadcast
        if (producer(res) > p || res == y) continue;  // r must be there when the Linear runs
        lin.in.push_back(res);
        lin.out[0] = r.out[0];
        dead[i] = true;
        break;
      }
    }
  }
  size_t j = 0, forward = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (dead[i]) continue;
    if (i < forward_nodes_) ++forward;
    if (i != j) nodes_[j] = std::move(nodes_[i]);
    ++j;
  }
  nodes_.resize(j);
  forward_nodes_ = forward;
}

}  // namespace attnkit

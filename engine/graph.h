// The static graph: built once (nothing runs while building), then planned and run many
// times by an Executor. Backward nodes are appended to the same graph by backward().
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "../ops/parallel.h"
#include "error.h"
#include "op_list.h"
#include "tensor.h"

namespace attnkit {

class Graph;

// How a parameter starts; values are drawn at executor construction from its seed.
enum class Init : uint8_t { kZeros, kOnes, kNormal };
struct ParamInfo {
  std::string name;
  TensorId tensor = kNoTensor;
  Init init = Init::kZeros;
  float init_std = 0.0f;  // for kNormal: N(0, init_std²)
  int64_t offset = 0;     // elements into the flat parameter (and gradient, moment) blocks
  int64_t numel = 0;
};

// Per-op settings. Each op reads the fields it needs.
struct NodeAttrs {
  // kAttention: the heads. kLinear and its backward (made by the graph passes only): with
  // heads > 1, x's columns and W's rows in that many blocks, each block times its rows of W
  // into its own block of output columns (a folded attention's per-head value products;
  // the bias, if any, in head 0's block).
  int64_t heads = 1;
  // kAttention, inference only (Graph::fold_attention_values): the output is the sum of the
  // heads' outputs, [B, Tq, Dv / heads]; with relu, max(·, 0) of it (and accumulate bit 0: of
  // it plus the output's contents).
  bool sum_heads = false;
  // kAttention, inference only (Graph::index_attention_lookups): q, k, v are per-(token,
  // position) tables [V, T, width] and in[4] the ids [B, T]: row t of sequence b is row
  // ids[b, t]·T + t of each table (the lookups happen inside the kernel); an optional in[5],
  // a table [V, T, out width] too, is the output's starting value (the folded head's lookup).
  bool indexed = false;
  // kAttention, training (Graph::index_attention_values): v (in[2]) is a per-(token, position)
  // table [V, T, Dv] and in[4] the ids [B, T]; row t of sequence b's values is row
  // ids[b, t]·T + t of it. q, k and the output keep their layout. Its backward: a
  // kAttentionBackward without dv (in[7]: the ids) and a kAttentionValuesBackward that adds
  // the sequences' value-row gradients into the table's gradient.
  bool v_indexed = false;
  float scale = 1.0f;
  float eps = 1e-5f;
  bool causal = false;
  // kLinear: y = max(x·W + b, 0), a ReLU run in the product's store. kLinearBackward: x is a
  // ReLU's output and dx the gradient of that ReLU's input, (dy·Wᵀ) where x > 0. Set by
  // Graph::backward() when it fuses the ReLUs of a training graph (see fuse_elementwise).
  // (A kLinear may also have a 4th input r, added in its store: y = x·W + b (relu'd) + r, or
  // with relu_last y = max(x·W + b + r, 0): a training graph's folded head, Linear–ReLU after
  // a residual sum.)
  bool relu = false, relu_last = false;
  // kMaskedFill: the fill value. kDropout, kDropoutBackward: the drop probability p.
  float value = 0.0f;
  // kDropout, kDropoutBackward: the seed the drop masks are drawn from.
  uint64_t seed = 0;
  // kMatmul, kMatmulBackward: which operand is transposed.
  bool trans_a = false, trans_b = false;
  // kTranspose: the two axes swapped (axis0 < axis1). kConcat, kNarrow, kNarrowBackward: the
  // axis (axis0) and, for narrow, the first index taken (start).
  int axis0 = 0, axis1 = 0;
  int64_t start = 0;
};

// One kind per entry of engine/op_list.h.
enum class OpKind : uint8_t {
#define ATTNKIT_OP_KIND(kind, def) kind,
  ATTNKIT_OPS(ATTNKIT_OP_KIND)
#undef ATTNKIT_OP_KIND
  kCount
};

struct Node {
  OpKind op;
  std::vector<TensorId> in;       // kNoTensor for an absent optional input
  std::vector<TensorId> out;      // kNoTensor for an output nobody needs
  std::vector<TensorId> scratch;  // arena space the node needs only while it runs
  NodeAttrs attrs;
  uint32_t accumulate = 0;        // bit i: out[i] is added to, not overwritten
  bool backward = false;
  bool accumulates(size_t i) const { return (accumulate >> i) & 1u; }
};

// A handle to a tensor of a graph, for writing models like the math: tok(ids) + pos(t).
class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* g, TensorId id) : graph_(g), id_(id) {}
  TensorId id() const { return id_; }
  Graph& graph() const { return *graph_; }
  const TensorDesc& desc() const;
  const Shape& shape() const { return desc().shape; }
  bool valid() const { return graph_ != nullptr && id_ != kNoTensor; }

 private:
  Graph* graph_ = nullptr;
  TensorId id_ = kNoTensor;
};

Tensor operator+(const Tensor& a, const Tensor& b);

class Graph {
 public:
  // max_batch: the batch the graph is planned for; runs may use any batch up to it.
  explicit Graph(int64_t max_batch);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  int64_t max_batch() const { return max_batch_; }

  // Inputs fed before each run. `per_sample` excludes the batch dim: input_ids("ids", {T})
  // is [max_batch, T]. Token ids and targets are int32; masks are uint8 (non-zero = forbidden).
  // requires_grad: backward() computes the input's gradient too, readable after each run
  // through grad() (saliency: the gradient of a logit with respect to the embeddings).
  Tensor input(const std::string& name, Shape per_sample, DType dtype, bool requires_grad = false);
  // An input without the batch dim (the same for every sample), e.g. an additive mask [T, T].
  Tensor input_unbatched(const std::string& name, Shape shape, DType dtype, bool requires_grad = false);
  // An int32 constant 0, 1, …, n−1 (not batched), e.g. position ids.
  Tensor arange(int64_t n);
  // An int32 constant [v, t] whose row i holds i in every column (ids of a table's rows
  // repeated over positions: table[pair_rows] + pos is the per-(token, position) table).
  Tensor pair_rows(int64_t v, int64_t t);
  // A parameter of the given shape, with its initialization.
  Tensor parameter(const std::string& name, Shape shape, Init init, float init_std = 0.0f);

  // Appends a node running `op` on `inputs`; checks shapes and creates its outputs.
  std::vector<Tensor> apply(OpKind op, const std::vector<TensorId>& inputs,
                            const NodeAttrs& attrs = {});

  // Marks a tensor to stay readable after each run (outputs, attention maps).
  void keep(Tensor t);

  // For a graph that only runs forward (inference): the folds and fusions backward() applies
  // to training graphs (engine/passes.cc), and every node no kept tensor needs is dropped (e.g.
  // a loss nobody reads). Call once, after the last op; results are those of the unoptimized graph
  // up to rounding where a fold reassociates a product.
  void optimize_for_inference();

  // Appends the backward of everything `loss` depends on (loss must be a 1-element
  // float tensor). Parameters and inputs with requires_grad get gradients; call once.
  void backward(Tensor loss);
  // The same from any float tensor y, seeded with the upstream gradient dy: an input of y's
  // shape (fed like any input), e.g. d(logit k)/d(logits) as a one-hot.
  void backward(Tensor y, Tensor dy);
  // Keeps t's gradient readable after each run (call before backward()).
  void retain_grad(Tensor t);
  // The gradient of t (a parameter, an input with requires_grad, or a retain_grad tensor),
  // after backward(). Throws Error naming t when there is none.
  Tensor grad(Tensor t) const;
  bool has_backward() const { return forward_nodes_ != nodes_.size(); }
  // Nodes [0, forward_nodes()) are the forward pass, the rest its backward.
  size_t forward_nodes() const { return forward_nodes_; }
  // Leading nodes that read and write no batched tensor (weights-only work; an inference
  // graph has them first, see optimize_for_inference).
  size_t unbatched_prefix() const;

  // Building blocks for ops and autodiff.
  TensorId new_tensor(const std::string& name, DType dtype, Shape shape, bool batched,
                      Storage storage = Storage::kArena);
  size_t add_node(Node node);

  // A deque: references to tensors stay valid while ops add new ones.
  const std::deque<TensorDesc>& tensors() const { return tensors_; }
  TensorDesc& tensor(TensorId id) { return tensors_.at(static_cast<size_t>(id)); }
  const TensorDesc& tensor(TensorId id) const { return tensors_.at(static_cast<size_t>(id)); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t param_count() const { return param_elements_; }
  const std::vector<int32_t>& const_data() const { return const_data_; }
  TensorId find(const std::string& name) const;  // kNoTensor when absent
  // Intermediates' names longer than this are cut to it (ending in "...").
  static constexpr size_t kMaxTensorName = 240;
  // Index of the node that writes t, or -1 (inputs, parameters, constants).
  int64_t producer(TensorId t) const;

  // Whether linear() may fold a projection of embedding lookups into a lookup of projected
  // tables (see modules.h). On by default; off gives the textbook graph, e.g. to measure.
  bool fold_embedding_projections() const { return fold_embedding_projections_; }
  void set_fold_embedding_projections(bool on) { fold_embedding_projections_ = on; }
  // Whether backward() fuses ReLUs and residual sums into the products around them (see
  // fuse_elementwise). On by default; the results are bitwise the same either way.
  bool fuse_elementwise_enabled() const { return fuse_elementwise_; }
  void set_fuse_elementwise(bool on) { fuse_elementwise_ = on; }
  // Whether backward() lets an attention read its values from a per-(token, position) table
  // (see index_attention_values). On by default; off materializes the values' rows (the
  // results agree to rounding: the table's gradient is summed in another order).
  bool index_attention_values_enabled() const { return index_attention_values_; }
  void set_index_attention_values(bool on) { index_attention_values_ = on; }

  // "tok(ids) [64, 10, 32]": a tensor named for error messages.
  std::string describe(TensorId id) const;

 private:
  // Called by backward() before it differentiates, when every use of every forward tensor is
  // known (engine/modules.cc): folds y = (p + x·Wc + bc)·W + b, where p is a lookup sum and
  // x·Wc + bc is used only there, into p·W (folded) + x·(Wc·W) + (bc·W + b), then removes
  // forward nodes whose outputs nothing uses. `loss` stays.
  void optimize_forward(TensorId loss);
  void backward_from(Tensor y, Tensor dy);
  // How many node inputs read t, plus one when t is kept or is the loss.
  int64_t uses(TensorId t, TensorId loss) const;
  void remove_dead_forward_nodes(TensorId loss);
  // Called by backward() after it differentiates (engine/autodiff.cc): a ReLU whose input is
  // a Linear's output used only there runs in that Linear's product (attrs.relu), and the
  // ReLU's backward in the product computing the gradient of its output, when that product
  // (the next Linear's dx) is the gradient's only contribution; a sum y + r of same-shaped
  // tensors, y a Linear's output used only there and r computed before that Linear, is added
  // in the Linear's store (its 4th input; the sum's gradient already is y's). The results are
  // bitwise those of the separate nodes.
  void fuse_elementwise(TensorId loss);
  // Inference only (optimize_for_inference; they change rounding, so training graphs keep
  // their nodes):
  // - a lookup plus an unbatched tensor, table[ids] + c, becomes one lookup adding c on the
  //   way (the embedding's addend), when the sum is the lookup's only use;
  // - relu(x·W + b + r) with r a lookup used only there (the folded head's first Linear):
  //   the lookup writes the output and the product adds to it (accumulates) and applies the
  //   ReLU in its store, so the ReLU is no pass of its own;
  // - nodes that read and write no batched tensor (products of weights, projected tables)
  //   move to the front, so that a run in chunks of rows (Executor) computes them once.
  // - an attention's output used only by a Linear, (P·V)·W + b = Σ_h P_h·(V_h·W_h) + b with
  //   V_h head h's value columns and W_h the same rows of W, becomes Σ_h P_h·(V_h·W_h + [h = 0]·b)
  //   (softmax rows sum to 1) when V is a foldable lookup and that costs fewer products: the
  //   values [V_0·W_0 + b | V_1·W_1 | …] are then a lookup of projected tables, the product
  //   disappears, and the attention adds up its heads' outputs (attrs.sum_heads). Training
  //   graphs (backward_from) fold it too: a head-summed attention's backward gives every head
  //   the one output gradient.
  void fold_attention_values();
  // Training (backward_from, after fold_attention_values): a head-summed attention whose
  // values are a lookup table[ids] (+ pos) of T ≤ 16 positions, used only there, whose per-(token, position)
  // table (V·T rows) takes at most 1 MB, reads them from that table, table[v] + pos[t],
  // instead (attrs.v_indexed): the [B, T, Dv] rows are never written (neighbor-sum's folded
  // values: 655 KB a step), and their gradient goes to the V·T table rows.
  void index_attention_values(TensorId loss);
  // Moves the nodes appended since first_new to just before node i; returns how many.
  size_t move_new_nodes_before(size_t first_new, size_t i);
  void fold_lookup_addends();
  void fuse_residual_relu();
  // - relu(y + r) (or y + r) with y a folded attention's output (sum_heads, or one head) and r
  //   a lookup computed before it, each used only there: the lookup writes the output and the
  //   attention adds its heads to it (accumulates), applying the ReLU in its last store. Also
  //   in training graphs, after backward() (loss: the graph's loss; the attention's backward
  //   reads its probabilities, not its output, and the ReLU's backward its output): bitwise the
  //   separate sum and ReLU (the duplicates model: 3.5% of its step).
  void fuse_attention_addends(TensorId loss = kNoTensor);
  // - an attention whose q, k, v (and the lookup its output starts from) are lookups of the
  //   same ids with per-position addends, tables[ids] + pos, reads them from per-(token,
  //   position) tables instead (attrs.indexed), when those are small (V·T rows, at most 1 MB
  //   together): the lookups and their rows in memory disappear.
  void index_attention_lookups();
  void hoist_unbatched_nodes();
  // An int32 constant (arange, pair_rows), or the one of that name already made.
  Tensor int_constant(const std::string& name, Shape shape, const std::vector<int32_t>& values);

  int64_t max_batch_;
  std::deque<TensorDesc> tensors_;
  std::vector<Node> nodes_;
  std::vector<ParamInfo> params_;
  std::vector<int32_t> const_data_;
  int64_t param_elements_ = 0;
  size_t forward_nodes_ = 0;
  bool fold_embedding_projections_ = true;
  bool fuse_elementwise_ = true;
  bool index_attention_values_ = true;
};

}  // namespace attnkit

// One table of ops: each entry says how an op checks shapes, runs, and differentiates.
// Adding an op = one line in engine/op_list.h and one file (engine/op_*.cc) defining its OpDef.
#pragma once
#include <cstdint>

#include "graph.h"

namespace attnkit {

class Autodiff;

// What a kernel sees while a node runs: data pointers and shapes at the current batch.
class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual float* f32(TensorId id) const = 0;
  virtual int32_t* i32(TensorId id) const = 0;
  virtual uint8_t* u8(TensorId id) const = 0;
  virtual Shape shape(TensorId id) const = 0;  // dim 0 = current batch for batched tensors
  virtual int64_t batch() const = 0;
  // A run in chunks of rows (see ExecutorOptions::chunk_bytes and train_chunk_rows): the
  // first batch entry of the current chunk and the batch of the whole run. Ops that reduce
  // over the whole batch (the cross-entropy's mean) use them; inputs stay whole in memory.
  virtual int64_t chunk_first_row() const { return 0; }
  virtual int64_t whole_batch() const { return batch(); }
  // Nonzero when tensor id (a parameter or constant) keeps its values through all of this run
  // and the run uses it more than once (a run in chunks): a number no other run has, for
  // GemmEpilogue::b_stamp (the bf16 products then pack such a weight once per run).
  virtual uint64_t constant_stamp(TensorId /*id*/) const { return 0; }
  // Whether this run is a training step (Executor::train_step; false in Executor::forward):
  // dropout drops elements only then.
  virtual bool training() const { return false; }
  // Training steps run so far, the current one included: dropout draws its mask from
  // (seed, step, element), a fresh one each step and the same for the step's backward.
  virtual int64_t training_steps() const { return 0; }
};

struct OpDef {
  const char* name;
  // Validates the node's inputs (throw ShapeError naming op, tensors and shapes) and
  // creates its outputs/scratch with g.new_tensor, filling node.out / node.scratch.
  void (*build)(Graph& g, Node& node);
  // Runs the node's share for slice s. Called by every thread of the run; no barriers
  // inside: a node's slices write disjoint memory.
  void (*run)(const RunContext& ctx, const Node& node, Slice s);
  // Appends the backward nodes of `node` (nullptr: the op is not differentiable).
  void (*differentiate)(Autodiff& ad, const Node& node);
  // out[0] may reuse the buffer of an input of the same size whose last use is this node.
  bool in_place;
  // Integer inputs that index something (token ids, class targets): sets *input and the
  // allowed range [*lo, *hi) and returns true; the executor checks user-fed values against it
  // before every run. nullptr: the op reads no ids.
  bool (*id_range)(const Graph& g, const Node& node, size_t* input, int64_t* lo, int64_t* hi) = nullptr;
};

const OpDef& op_def(OpKind kind);

// The gradient bookkeeping backward() hands to each op's differentiate().
class Autodiff {
 public:
  explicit Autodiff(Graph& g) : g_(g) {}
  Graph& graph() { return g_; }
  // Gradient of a tensor so far (kNoTensor if nothing flowed into it yet).
  TensorId grad(TensorId t) const;
  // Whether t needs a gradient (a parameter, or computed from one).
  bool needs_grad(TensorId t) const;
  // The tensor a backward node should write t's gradient contribution into, and whether it
  // must add (a contribution already exists) or may overwrite. Returns kNoTensor when t needs
  // no gradient.
  struct Target { TensorId tensor = kNoTensor; bool accumulate = false; };
  Target contribute(TensorId t);
  // Makes `g` itself the gradient of t when nothing flowed into t yet (no copy); otherwise
  // appends an accumulate node. Used by ops whose local derivative is the identity.
  void pass_through(TensorId t, TensorId g);

  std::vector<TensorId>& grads() { return grads_; }
  std::vector<bool>& needs() { return needs_; }

 private:
  Graph& g_;
  std::vector<TensorId> grads_;
  std::vector<bool> needs_;
};

// Shared helpers for op files.
[[noreturn]] void shape_error(const Graph& g, const char* op, const std::string& what,
                              const std::vector<TensorId>& tensors);
void set_out_accumulate(Node& node, size_t i, const Autodiff::Target& t);

}  // namespace attnkit

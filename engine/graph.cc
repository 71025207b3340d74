#include "engine/graph.h"

#include <sstream>

#include "engine/functional.h"
#include "engine/op_table.h"

namespace attnkit {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kI32: return "int32";
    case DType::kU8: return "uint8";
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> d) {
  if (d.size() > kMaxRank) throw ShapeError("shapes have at most 4 dimensions");
  for (int64_t v : d) dims[rank++] = v;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

const TensorDesc& Tensor::desc() const { return graph_->tensor(id_); }

// kAdd where it takes the shapes (the lessons' sums, which its fusions know), else the
// general broadcasting add (engine/op_math.cc).
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }

Graph::Graph(int64_t max_batch) : max_batch_(max_batch) {
  if (max_batch < 1) throw ShapeError("graph: max_batch must be at least 1, got " + std::to_string(max_batch));
}

TensorId Graph::new_tensor(const std::string& name, DType dtype, Shape shape, bool batched,
                           Storage storage) {
  for (int i = 0; i < shape.rank; ++i)
    if (shape.dims[i] < 1)
      throw ShapeError("tensor '" + name + "': dimension " + std::to_string(i) + " of " +
                       shape.str() + " must be positive");
  TensorDesc d;
  d.name = name;
  // An intermediate's name spells out how it was made, so `h = h + f(h)` doubles it at every
  // layer: cut long ones (at a UTF-8 character boundary), or a deep model's names would take
  // exponential time and memory to build. Inputs, constants and parameters keep theirs.
  if (storage == Storage::kArena && d.name.size() > kMaxTensorName) {
    size_t cut = kMaxTensorName - 3;
    while (cut > 0 && (static_cast<unsigned char>(d.name[cut]) & 0xC0) == 0x80) --cut;
    d.name.resize(cut);
    d.name += "...";
  }
  d.dtype = dtype;
  d.shape = shape;
  d.batched = batched;
  d.storage = storage;
  tensors_.push_back(std::move(d));
  return static_cast<TensorId>(tensors_.size() - 1);
}

TensorId Graph::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<TensorId>(i);
  return kNoTensor;
}

int64_t Graph::producer(TensorId t) const {
  for (size_t i = nodes_.size(); i-- > 0;)
    for (TensorId o : nodes_[i].out)
      if (o == t) return static_cast<int64_t>(i);
  return -1;
}

Tensor Graph::input_unbatched(const std::string& name, Shape shape, DType dtype, bool requires_grad) {
  if (has_backward()) throw ShapeError("graph: input '" + name + "' added after backward()");
  if (find(name) != kNoTensor) throw ShapeError("graph: a tensor named '" + name + "' already exists");
  if (shape.rank < 1 || shape.rank > kMaxRank) throw ShapeError("input '" + name + "': 1 to 4 dims");
  if (requires_grad && dtype != DType::kF32) throw ShapeError("input '" + name + "': only float inputs have gradients");
  const TensorId id = new_tensor(name, dtype, shape, /*batched=*/false, Storage::kInput);
  tensors_[static_cast<size_t>(id)].requires_grad = requires_grad;
  return Tensor(this, id);
}

Tensor Graph::input(const std::string& name, Shape per_sample, DType dtype, bool requires_grad) {
  if (requires_grad && dtype != DType::kF32) throw ShapeError("input '" + name + "': only float inputs have gradients");
  if (has_backward()) throw ShapeError("graph: input '" + name + "' added after backward()");
  if (find(name) != kNoTensor) throw ShapeError("graph: a tensor named '" + name + "' already exists");
  if (per_sample.rank >= kMaxRank) throw ShapeError("input '" + name + "': at most 3 dims per sample");
  Shape s;
  s.rank = per_sample.rank + 1;
  s.dims[0] = max_batch_;
  for (int i = 0; i < per_sample.rank; ++i) s.dims[i + 1] = per_sample.dims[i];
  const TensorId id = new_tensor(name, dtype, s, /*batched=*/true, Storage::kInput);
  tensors_[static_cast<size_t>(id)].requires_grad = requires_grad;
  return Tensor(this, id);
}

Tensor Graph::int_constant(const std::string& name, Shape shape, const std::vector<int32_t>& values) {
  if (TensorId id = find(name); id != kNoTensor) return Tensor(this, id);
  TensorId id = new_tensor(name, DType::kI32, shape, false, Storage::kConst);
  tensors_[static_cast<size_t>(id)].offset = static_cast<int64_t>(const_data_.size()) * 4;
  const_data_.insert(const_data_.end(), values.begin(), values.end());
  return Tensor(this, id);
}

Tensor Graph::arange(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  return int_constant("arange(" + std::to_string(n) + ")", {n}, v);
}

Tensor Graph::pair_rows(int64_t v, int64_t t) {
  std::vector<int32_t> rows(static_cast<size_t>(v * t));
  for (int64_t i = 0; i < v * t; ++i) rows[static_cast<size_t>(i)] = static_cast<int32_t>(i / t);
  return int_constant("pair_rows(" + std::to_string(v) + "," + std::to_string(t) + ")", {v, t}, rows);
}

Tensor Graph::parameter(const std::string& name, Shape shape, Init init, float init_std) {
  if (has_backward()) throw ShapeError("graph: parameter '" + name + "' added after backward()");
  if (find(name) != kNoTensor) throw ShapeError("graph: a tensor named '" + name + "' already exists");
  TensorId id = new_tensor(name, DType::kF32, shape, false, Storage::kParam);
  ParamInfo p;
  p.name = name;
  p.tensor = id;
  p.init = init;
  p.init_std = init_std;
  p.offset = param_elements_;
  p.numel = shape.numel();
  // Each parameter starts on a 16-float boundary so kernels see aligned rows.
  param_elements_ += (p.numel + 15) / 16 * 16;
  tensors_[static_cast<size_t>(id)].offset = p.offset;
  tensors_[static_cast<size_t>(id)].param_index = static_cast<int>(params_.size());
  params_.push_back(p);
  return Tensor(this, id);
}

std::vector<Tensor> Graph::apply(OpKind op, const std::vector<TensorId>& inputs,
                                 const NodeAttrs& attrs) {
  if (has_backward()) throw ShapeError(std::string(op_def(op).name) + ": graph already has its backward");
  for (TensorId t : inputs)
    if (t != kNoTensor && (t < 0 || static_cast<size_t>(t) >= tensors_.size()))
      throw ShapeError(std::string(op_def(op).name) + ": input is not a tensor of this graph");
  Node node;
  node.op = op;
  node.in = inputs;
  node.attrs = attrs;
  op_def(op).build(*this, node);
  std::vector<Tensor> outs;
  for (TensorId t : node.out) outs.emplace_back(this, t);
  add_node(std::move(node));
  forward_nodes_ = nodes_.size();
  return outs;
}

size_t Graph::add_node(Node node) {
  nodes_.push_back(std::move(node));
  return nodes_.size() - 1;
}

namespace {
// keep / retain_grad / grad of a tensor that is not one of g's: a clear error, not an index
// out of range (MultiHeadAttention::attn() before the module ran is an empty Tensor).
void require_own(const Graph& g, Tensor t, const char* what) {
  if (!t.valid())
    throw ShapeError(std::string(what) + ": not a tensor (an empty Tensor; a module's attn() before the module "
                     "was applied?)");
  if (&t.graph() != &g) throw ShapeError(std::string(what) + ": the tensor belongs to another graph");
}
}  // namespace

void Graph::keep(Tensor t) {
  require_own(*this, t, "keep");
  tensor(t.id()).keep = true;
}

void Graph::retain_grad(Tensor t) {
  require_own(*this, t, "retain_grad");
  if (has_backward()) throw ShapeError("retain_grad(" + describe(t.id()) + "): call it before backward()");
  tensor(t.id()).retain_grad = true;
}

Tensor Graph::grad(Tensor t) const {
  require_own(*this, t, "grad");
  if (!has_backward()) throw Error("grad(" + describe(t.id()) + "): the graph has no backward() yet");
  const TensorDesc& d = tensor(t.id());
  if (d.grad == kNoTensor || !(d.storage == Storage::kParam || d.requires_grad || d.retain_grad))
    throw Error("grad(" + describe(t.id()) + "): no gradient is kept for this tensor (only parameters, inputs with "
                "requires_grad and retain_grad tensors the differentiated tensor depends on have one)");
  return Tensor(const_cast<Graph*>(this), d.grad);
}

std::string Graph::describe(TensorId id) const {
  if (id == kNoTensor) return "(none)";
  const TensorDesc& d = tensor(id);
  return "'" + d.name + "' " + d.shape.str() + (d.dtype == DType::kF32 ? "" : std::string(" ") + dtype_name(d.dtype));
}

[[noreturn]] void shape_error(const Graph& g, const char* op, const std::string& what,
                              const std::vector<TensorId>& tensors) {
  std::string msg = std::string(op) + ": " + what;
  if (!tensors.empty()) {
    msg += " (";
    for (size_t i = 0; i < tensors.size(); ++i) msg += (i ? ", " : "") + g.describe(tensors[i]);
    msg += ")";
  }
  throw ShapeError(msg);
}

}  // namespace attnkit

// Tensor descriptions in a graph: dtype, shape (up to 4-D), where the data lives.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace attnkit {

enum class DType : uint8_t { kF32, kI32, kU8 };

inline size_t dtype_size(DType t) { return t == DType::kU8 ? 1 : 4; }
const char* dtype_name(DType t);

constexpr int kMaxRank = 4;

struct Shape {
  std::array<int64_t, kMaxRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[i < 0 ? i + rank : i]; }
  int64_t& operator[](int i) { return dims[i < 0 ? i + rank : i]; }
  int64_t numel() const;
  int64_t last() const { return rank ? dims[rank - 1] : 1; }
  int64_t rows() const { return rank ? numel() / last() : 1; }  // product of all but the last
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[64, 10, 32]"
};

using TensorId = int32_t;
constexpr TensorId kNoTensor = -1;

// Where a tensor's bytes live.
enum class Storage : uint8_t {
  kArena,      // an intermediate: placed in the arena by the memory planner
  kParam,      // a parameter: a slice of the flat parameter block
  kParamGrad,  // a parameter's gradient: a slice of the flat gradient block
  kInput,      // fed by the caller before each run (token ids, targets, masks)
  kConst,      // fixed at build time (e.g. position ids 0..T-1)
};

struct TensorDesc {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;              // at the planned (maximum) batch
  Storage storage = Storage::kArena;
  bool batched = false;     // dim 0 is the batch: at run time it is the current batch size
  bool keep = false;        // stays readable after a run (model outputs, attention maps)
  bool requires_grad = false;  // an input whose gradient backward() computes (and keeps)
  bool retain_grad = false;    // a tensor whose gradient backward() keeps readable
  int64_t offset = -1;      // bytes into its block (arena, inputs, consts); elements for params
  TensorId grad = kNoTensor;  // gradient tensor, once autodiff made one
  int param_index = -1;     // index into Graph::params() for kParam / kParamGrad
  int64_t bytes() const { return shape.numel() * static_cast<int64_t>(dtype_size(dtype)); }
};

}  // namespace attnkit

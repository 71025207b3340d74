// Checks an op (or any small graph of ops) against a double-precision reference on every SIMD
// target this machine has: the forward values, and the gradient of every input that has
// requires_grad, for a random upstream gradient dy (backward(y, dy)), against central
// differences of  L(x) = Σ dy · reference(x)  computed in double.
//
//   OpCheck c;
//   c.inputs = {{"x", {2, 3, 5}}};                       // batched [batch 2, 3, 5]
//   c.build = [](Graph& g, const std::vector<Tensor>& in) { return exp(in[0]); };
//   c.reference = [](const Inputs& x) { std::vector<double> y; for (double v : x[0]) y.push_back(std::exp(v)); return y; };
//   check_op(c);
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "engine/rng.h"
#include "hwy_targets.h"

namespace attnkit::test {

using Inputs = std::vector<std::vector<double>>;  // each input's values, row-major, as fed

struct OpInput {
  std::string name;
  Shape shape;               // the full shape; dim 0 is the batch when batched
  bool batched = true;
  bool requires_grad = true;
  DType dtype = DType::kF32;  // kU8 inputs (masks) hold 0/1, kI32 inputs what fill gives
  // Value of element `flat`; default U(−1, 1) for floats, {0, 1} for kU8.
  std::function<double(Rng&, int64_t flat)> fill;
};

struct OpCheck {
  std::vector<OpInput> inputs;
  std::function<Tensor(Graph&, const std::vector<Tensor>&)> build;
  std::function<std::vector<double>(const Inputs&)> reference;
  // |engine − reference| ≤ tol · max(1, max |reference|), per output and per gradient.
  double value_tol = 2e-5, grad_tol = 2e-4;
  int threads = 1;
  uint64_t seed = 1;
};

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// A shape without its leading batch dimension.
inline Shape per_sample(const Shape& s) {
  Shape per;
  per.rank = s.rank - 1;
  for (int i = 1; i < s.rank; ++i) per.dims[i - 1] = s[i];
  return per;
}

// The batch of c's batched inputs (1 when none is).
inline int64_t check_max_batch(const OpCheck& c) {
  int64_t max_batch = 1;
  for (const OpInput& in : c.inputs)
    if (in.batched) max_batch = in.shape[0];
  return max_batch;
}

// c's inputs as inputs of g (batched ones declared per sample): with their dtypes and
// gradients where asked, or all float32 with gradients.
inline std::vector<Tensor> check_inputs(Graph& g, const OpCheck& c, bool all_f32_with_grads) {
  std::vector<Tensor> ins;
  for (const OpInput& in : c.inputs) {
    const DType dt = all_f32_with_grads ? DType::kF32 : in.dtype;
    const bool grad = all_f32_with_grads || (in.requires_grad && in.dtype == DType::kF32);
    ins.push_back(in.batched ? g.input(in.name, per_sample(in.shape), dt, grad)
                             : g.input_unbatched(in.name, in.shape, dt, grad));
  }
  return ins;
}

// An input of y's shape (batched as y is) to feed y's upstream gradient.
inline Tensor upstream_input(Graph& g, const Tensor& y, const std::string& name) {
  const TensorDesc yd = y.desc();
  return yd.batched ? g.input(name, per_sample(yd.shape), DType::kF32)
                    : g.input_unbatched(name, yd.shape, DType::kF32);
}

inline void check_op(const OpCheck& c) {
  for_each_simd_target([&](const std::string&) {
    const int64_t max_batch = check_max_batch(c);
    Graph g(max_batch);
    const std::vector<Tensor> ins = check_inputs(g, c, /*all_f32_with_grads=*/false);
    Tensor y = c.build(g, ins);
    g.keep(y);
    const TensorDesc yd = y.desc();
    Tensor dy = upstream_input(g, y, "upstream_dy");
    g.backward(y, dy);
    Executor ex(g, {c.threads, 0, false});
    ex.set_batch(max_batch);

    Rng rng(c.seed);
    Inputs x(c.inputs.size());
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const OpInput& in = c.inputs[i];
      const int64_t n = in.shape.numel();
      for (int64_t j = 0; j < n; ++j) {
        double v = in.fill ? in.fill(rng, j)
                           : in.dtype == DType::kU8 ? static_cast<double>(rng.below(2))
                                                    : 2.0 * rng.uniform() - 1.0;
        if (in.dtype == DType::kF32) v = static_cast<double>(static_cast<float>(v));  // as fed
        x[i].push_back(v);
      }
      for (int64_t j = 0; j < n; ++j) {
        if (in.dtype == DType::kF32) ex.f32(ins[i].id())[j] = static_cast<float>(x[i][static_cast<size_t>(j)]);
        if (in.dtype == DType::kU8) ex.u8(ins[i].id())[j] = static_cast<uint8_t>(x[i][static_cast<size_t>(j)]);
        if (in.dtype == DType::kI32) ex.i32(ins[i].id())[j] = static_cast<int32_t>(x[i][static_cast<size_t>(j)]);
      }
    }
    const int64_t ny = yd.shape.numel();
    std::vector<double> up(static_cast<size_t>(ny));
    for (auto& v : up) v = static_cast<double>(static_cast<float>(2.0 * rng.uniform() - 1.0));
    for (int64_t j = 0; j < ny; ++j) ex.f32(dy.id())[j] = static_cast<float>(up[static_cast<size_t>(j)]);
    ex.train_step(nullptr);

    const std::vector<double> ref = c.reference(x);
    REQUIRE(static_cast<int64_t>(ref.size()) == ny);
    const double yscale = std::max(1.0, max_abs(ref));
    for (int64_t j = 0; j < ny; ++j) {
      INFO("output " << y.graph().describe(y.id()) << " at flat " << j);
      REQUIRE(std::fabs(ex.f32(y.id())[j] - ref[static_cast<size_t>(j)]) <= c.value_tol * yscale);
    }
    auto loss = [&](const Inputs& xs) {
      const std::vector<double> r = c.reference(xs);
      double s = 0;
      for (size_t j = 0; j < r.size(); ++j) s += up[j] * r[j];
      return s;
    };
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.inputs[i].requires_grad || c.inputs[i].dtype != DType::kF32) continue;
      std::vector<double> fd(x[i].size());
      Inputs xp = x;
      for (size_t j = 0; j < x[i].size(); ++j) {
        const double h = 1e-6 * std::max(1.0, std::fabs(x[i][j]));
        xp[i][j] = x[i][j] + h;
        const double lp = loss(xp);
        xp[i][j] = x[i][j] - h;
        const double lm = loss(xp);
        xp[i][j] = x[i][j];
        fd[j] = (lp - lm) / (2 * h);
      }
      const Tensor gx = g.grad(ins[i]);
      const double gscale = std::max(1.0, max_abs(fd));
      for (size_t j = 0; j < fd.size(); ++j) {
        INFO("gradient of input '" << c.inputs[i].name << "' at flat " << j << ": engine "
                                   << ex.f32(gx.id())[j] << ", finite differences " << fd[j]);
        REQUIRE(std::fabs(ex.f32(gx.id())[j] - fd[j]) <= c.grad_tol * gscale);
      }
    }
  });
}

}  // namespace attnkit::test

// The product and shape ops of engine/functional.h (matmul, transpose, reshape/view, concat,
// split, narrow): values and gradients against double references and central differences on
// every SIMD target (tests/op_check.h), build-time shape errors, and bitwise-equal results for
// 1 and 2 threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/functional.h"
#include "engine/planner.h"
#include "op_check.h"

namespace attnkit {
namespace {

using test::check_op;
using test::Inputs;
using test::OpCheck;
using test::OpInput;
using test::check_inputs;
using test::check_max_batch;
using test::upstream_input;

// ---- double references ----

// Dims of s padded on the left to 4.
std::array<int64_t, 4> dims4(const Shape& s) {
  std::array<int64_t, 4> d{1, 1, 1, 1};
  for (int i = 0; i < s.rank; ++i) d[static_cast<size_t>(4 - s.rank + i)] = s.dims[i];
  return d;
}

// op(a)·op(b) with torch.matmul's broadcast of the leading dims.
std::vector<double> ref_matmul(const std::vector<double>& a, const Shape& sa, const std::vector<double>& b,
                               const Shape& sb, bool ta, bool tb) {
  const auto da = dims4(sa), db = dims4(sb);
  const int64_t m = ta ? da[3] : da[2], k = ta ? da[2] : da[3], n = tb ? db[2] : db[3];
  const int64_t o0 = std::max(da[0], db[0]), o1 = std::max(da[1], db[1]);
  std::vector<double> c;
  for (int64_t i0 = 0; i0 < o0; ++i0)
    for (int64_t i1 = 0; i1 < o1; ++i1) {
      const int64_t pa = ((da[0] > 1 ? i0 : 0) * da[1] + (da[1] > 1 ? i1 : 0)) * m * k;
      const int64_t pb = ((db[0] > 1 ? i0 : 0) * db[1] + (db[1] > 1 ? i1 : 0)) * k * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0;
          for (int64_t kk = 0; kk < k; ++kk)
            sum += a[static_cast<size_t>(pa + (ta ? kk * m + i : i * k + kk))] *
                   b[static_cast<size_t>(pb + (tb ? j * k + kk : kk * n + j))];
          c.push_back(sum);
        }
    }
  return c;
}

// x with axes d0 and d1 swapped.
std::vector<double> ref_transpose(const std::vector<double>& x, const Shape& s, int d0, int d1) {
  if (d0 < 0) d0 += s.rank;
  if (d1 < 0) d1 += s.rank;
  Shape t = s;
  std::swap(t.dims[d0], t.dims[d1]);
  std::vector<double> y(x.size());
  std::array<int64_t, kMaxRank> idx{};
  for (size_t f = 0; f < x.size(); ++f) {
    int64_t rem = static_cast<int64_t>(f);
    for (int i = s.rank - 1; i >= 0; --i) idx[i] = rem % s.dims[i], rem /= s.dims[i];
    std::swap(idx[d0], idx[d1]);
    int64_t o = 0;
    for (int i = 0; i < t.rank; ++i) o = o * t.dims[i] + idx[i];
    y[static_cast<size_t>(o)] = x[f];
  }
  return y;
}

// Pieces [outer, w_i·inner] joined into rows.
std::vector<double> ref_concat(const std::vector<std::vector<double>>& xs, const std::vector<int64_t>& widths,
                               int64_t outer) {
  std::vector<double> y;
  for (int64_t r = 0; r < outer; ++r)
    for (size_t i = 0; i < xs.size(); ++i)
      for (int64_t j = 0; j < widths[i]; ++j) y.push_back(xs[i][static_cast<size_t>(r * widths[i] + j)]);
  return y;
}

// Columns [c0, c0 + w) of rows of width `width`.
std::vector<double> ref_narrow(const std::vector<double>& x, int64_t width, int64_t c0, int64_t w) {
  std::vector<double> y;
  for (size_t r = 0; r < x.size() / static_cast<size_t>(width); ++r)
    for (int64_t j = c0; j < c0 + w; ++j) y.push_back(x[r * static_cast<size_t>(width) + static_cast<size_t>(j)]);
  return y;
}

OpInput batched(const std::string& name, Shape s) { return OpInput{name, s, true}; }
OpInput unbatched(const std::string& name, Shape s) { return OpInput{name, s, false}; }

// A matmul check: shapes as fed (dim 0 the batch for batched inputs).
void check_matmul(OpInput a, OpInput b, bool ta, bool tb, int threads = 1) {
  INFO("a " << a.shape.str() << (a.batched ? " batched" : "") << (ta ? " transposed" : "") << ", b "
            << b.shape.str() << (b.batched ? " batched" : "") << (tb ? " transposed" : ""));
  OpCheck c;
  const Shape sa = a.shape, sb = b.shape;
  c.inputs = {a, b};
  c.build = [=](Graph&, const std::vector<Tensor>& in) { return matmul(in[0], in[1], ta, tb); };
  c.reference = [=](const Inputs& x) { return ref_matmul(x[0], sa, x[1], sb, ta, tb); };
  c.threads = threads;
  check_op(c);
}

// ---- bitwise thread-count invariance ----

struct Outcome {
  std::vector<float> y;
  std::vector<std::vector<float>> grads;
};

// Builds c's graph as check_op does, runs forward and backward with `threads` threads on fixed
// inputs and returns the output and the input gradients.
Outcome run_threads(const OpCheck& c, int threads) {
  Graph g(check_max_batch(c));
  const std::vector<Tensor> ins = check_inputs(g, c, /*all_f32_with_grads=*/true);
  Tensor y = c.build(g, ins);
  g.keep(y);
  Tensor dy = upstream_input(g, y, "dy");
  g.backward(y, dy);
  Executor ex(g, {threads, 0, false});
  Rng rng(7);
  for (const Tensor& t : ins)
    for (int64_t j = 0; j < t.shape().numel(); ++j) ex.f32(t.id())[j] = static_cast<float>(2 * rng.uniform() - 1);
  for (int64_t j = 0; j < dy.shape().numel(); ++j) ex.f32(dy.id())[j] = static_cast<float>(2 * rng.uniform() - 1);
  ex.train_step(nullptr);
  Outcome o;
  o.y.assign(ex.f32(y.id()), ex.f32(y.id()) + y.shape().numel());
  for (const Tensor& t : ins) {
    const Tensor gt = g.grad(t);
    o.grads.emplace_back(ex.f32(gt.id()), ex.f32(gt.id()) + gt.shape().numel());
  }
  return o;
}

void require_bitwise_threads(const OpCheck& c) {
  const Outcome one = run_threads(c, 1), two = run_threads(c, 2);
  REQUIRE(one.y.size() == two.y.size());
  REQUIRE(std::memcmp(one.y.data(), two.y.data(), one.y.size() * sizeof(float)) == 0);
  for (size_t i = 0; i < one.grads.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(one.grads[i].size() == two.grads[i].size());
    REQUIRE(std::memcmp(one.grads[i].data(), two.grads[i].data(), one.grads[i].size() * sizeof(float)) == 0);
  }
}

OpCheck matmul_case(OpInput a, OpInput b, bool ta, bool tb) {
  OpCheck c;
  c.inputs = {a, b};
  c.build = [=](Graph&, const std::vector<Tensor>& in) { return matmul(in[0], in[1], ta, tb); };
  return c;
}

// ---- matmul ----

TEST_CASE("matmul of unbatched matrices") {
  check_matmul(unbatched("a", {7, 17}), unbatched("b", {17, 3}), false, false);
  check_matmul(unbatched("a", {17, 7}), unbatched("b", {17, 3}), true, false);
  check_matmul(unbatched("a", {7, 17}), unbatched("b", {3, 17}), false, true);
  check_matmul(unbatched("a", {17, 7}), unbatched("b", {3, 17}), true, true);
  check_matmul(unbatched("a", {1, 1}), unbatched("b", {1, 1}), false, false);
}

TEST_CASE("matmul of batched activations and an unbatched weight") {
  check_matmul(batched("x", {2, 3, 5}), unbatched("w", {5, 7}), false, false);  // [B, T, D]·[D, E]
  check_matmul(batched("x", {2, 3, 5}), unbatched("w", {7, 5}), false, true);
  check_matmul(batched("x", {3, 33}), unbatched("w", {33, 1}), false, false);  // 2-D [B, k]·[k, n]
  check_matmul(batched("x", {2, 5, 3}), unbatched("w", {5, 7}), true, false);
  check_matmul(batched("x", {2, 2, 3, 5}), unbatched("w", {5, 4}), false, false, 2);
}

TEST_CASE("matmul of batched heads") {
  check_matmul(batched("q", {2, 3, 7, 4}), batched("kt", {2, 3, 4, 7}), false, false);  // q·kᵀ given kᵀ
  check_matmul(batched("q", {2, 3, 7, 4}), batched("k", {2, 3, 7, 4}), false, true);    // q·kᵀ
  check_matmul(batched("p", {2, 3, 7, 7}), batched("v", {2, 3, 7, 4}), false, false);   // p·v
  check_matmul(batched("a", {2, 17, 3}), batched("b", {2, 17, 5}), true, false);
  check_matmul(batched("a", {2, 3, 17}), batched("b", {2, 5, 17}), false, true, 2);
}

TEST_CASE("matmul broadcasts leading dims") {
  // b broadcast over the batch: its gradient sums over the batch.
  check_matmul(batched("a", {2, 3, 5, 4}), unbatched("b", {1, 3, 4, 2}), false, false);
  check_matmul(batched("a", {2, 3, 5, 4}), unbatched("b", {3, 4, 2}), false, false);
  check_matmul(batched("a", {2, 3, 5, 4}), unbatched("b", {3, 2, 4}), false, true);
  // a broadcast over the heads.
  check_matmul(batched("a", {2, 1, 5, 4}), batched("b", {2, 3, 4, 2}), false, false);
  check_matmul(batched("a", {2, 1, 4, 5}), batched("b", {2, 3, 2, 4}), true, true);
  // An unbatched matrix times batched products (a's gradient sums over them).
  check_matmul(unbatched("a", {4, 3}), batched("b", {2, 5, 4}), true, true);
  check_matmul(unbatched("a", {3, 4}), batched("b", {2, 4, 5}), false, false, 2);
  // Unbatched leading dims of 1 on both sides and ranks that differ.
  check_matmul(unbatched("a", {3, 1, 7, 4}), unbatched("b", {2, 4, 1}), false, false);
  check_matmul(unbatched("a", {1, 2, 7, 4}), unbatched("b", {3, 1, 4, 5}), false, false);
}

TEST_CASE("matmul at ragged sizes") {
  for (int64_t s : {1, 3, 7, 17, 33}) {
    check_matmul(batched("x", {2, s, 7}), unbatched("w", {7, s}), false, false);
    check_matmul(batched("q", {2, 2, s, 3}), batched("k", {2, 2, s, 3}), false, true);
    check_matmul(unbatched("a", {s, 5}), unbatched("b", {s, 3}), true, false);
  }
}

TEST_CASE("matmul of a tensor with itself sums both gradients") {
  OpCheck c;
  c.inputs = {unbatched("x", {5, 5})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return matmul(in[0], in[0], false, true); };
  c.reference = [](const Inputs& x) { return ref_matmul(x[0], {5, 5}, x[0], {5, 5}, false, true); };
  check_op(c);
  c.build = [](Graph&, const std::vector<Tensor>& in) { return matmul(in[0], in[0]); };
  c.reference = [](const Inputs& x) { return ref_matmul(x[0], {5, 5}, x[0], {5, 5}, false, false); };
  c.threads = 2;
  check_op(c);
}

TEST_CASE("matmul results are bitwise the same for 1 and 2 threads") {
  require_bitwise_threads(matmul_case(batched("x", {4, 64, 96}), unbatched("w", {96, 80}), false, false));
  require_bitwise_threads(matmul_case(batched("x", {4, 64, 96}), unbatched("w", {80, 96}), false, true));
  require_bitwise_threads(matmul_case(batched("q", {2, 4, 33, 16}), batched("k", {2, 4, 33, 16}), false, true));
  require_bitwise_threads(matmul_case(batched("a", {3, 2, 40, 24}), unbatched("b", {1, 2, 24, 40}), false, false));
  require_bitwise_threads(matmul_case(unbatched("a", {24, 40}), batched("b", {3, 2, 24, 40}), true, false));
  require_bitwise_threads(matmul_case(unbatched("a", {130, 70}), unbatched("b", {70, 90}), false, false));
}

// ---- a per-head Linear (NodeAttrs::heads: the graph passes' per-head value products) ----

// y = Linear with attrs.heads: x [rows, H·k], w [H·k, n] → [rows, H·n], head h's block
// x[:, h·k ..]·w[h·k .., :] (+ b in head 0's block).
std::vector<double> ref_heads_linear(const Inputs& x, int64_t rows, int64_t heads, int64_t k, int64_t n, bool bias) {
  std::vector<double> y(static_cast<size_t>(rows * heads * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < n; ++j) {
        double s = bias && h == 0 ? x[2][static_cast<size_t>(j)] : 0.0;
        for (int64_t c = 0; c < k; ++c)
          s += x[0][static_cast<size_t>(r * heads * k + h * k + c)] * x[1][static_cast<size_t>((h * k + c) * n + j)];
        y[static_cast<size_t>((r * heads + h) * n + j)] = s;
      }
  return y;
}

OpCheck heads_linear_case(bool batched_x, int64_t heads, int64_t k, int64_t n, bool bias, bool x_twice) {
  const int64_t rows = batched_x ? 2 * 3 : 7;
  OpCheck c;
  c.inputs = {batched_x ? batched("x", {2, 3, heads * k}) : unbatched("x", {7, heads * k}),
              unbatched("w", {heads * k, n})};
  if (bias) c.inputs.push_back(unbatched("b", {n}));
  c.build = [=](Graph& g, const std::vector<Tensor>& in) {
    NodeAttrs attrs;
    attrs.heads = heads;
    const Tensor y = g.apply(OpKind::kLinear, {in[0].id(), in[1].id(), bias ? in[2].id() : kNoTensor}, attrs)[0];
    // x read twice: its gradient sums this product's dx and the narrow's.
    return x_twice ? concat({y, narrow(in[0], -1, 0, 1)}, -1) : y;
  };
  c.reference = [=](const Inputs& x) {
    std::vector<double> y = ref_heads_linear(x, rows, heads, k, n, bias);
    if (!x_twice) return y;
    std::vector<double> out;
    for (int64_t r = 0; r < rows; ++r) {
      out.insert(out.end(), y.begin() + r * heads * n, y.begin() + (r + 1) * heads * n);
      out.push_back(x[0][static_cast<size_t>(r * heads * k)]);
    }
    return out;
  };
  return c;
}

TEST_CASE("a per-head Linear (attrs.heads) multiplies each block of x by its rows of W") {
  for (int64_t heads : {2, 3})
    for (bool bias : {false, true})
      for (bool batched_x : {false, true}) {
        INFO("heads " << heads << ", bias " << bias << ", batched " << batched_x);
        check_op(heads_linear_case(batched_x, heads, 5, 17, bias, false));
        check_op(heads_linear_case(batched_x, heads, 16, 3, bias, true));  // dx accumulated
        OpCheck two = heads_linear_case(batched_x, heads, 4, 33, bias, false);
        two.threads = 2;
        check_op(two);
      }
  require_bitwise_threads(heads_linear_case(true, 2, 16, 128, true, false));
  // A second step overwrites the gradients it does not accumulate (the bias's too): the same
  // upstream gradient twice gives the same gradients twice.
  {
    Graph g(3);
    Tensor x = g.input("x", {4, 6}, DType::kF32, true);
    Tensor w = g.input_unbatched("w", {6, 5}, DType::kF32, true);
    Tensor b = g.input_unbatched("b", {5}, DType::kF32, true);
    NodeAttrs attrs;
    attrs.heads = 2;
    Tensor y = g.apply(OpKind::kLinear, {x.id(), w.id(), b.id()}, attrs)[0];
    g.keep(y);
    Tensor dy = test::upstream_input(g, y, "dy");
    g.backward(y, dy);
    Executor ex(g, {1, 0, false});
    for (int64_t i = 0; i < 3 * 4 * 6; ++i) ex.f32(x.id())[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    for (int64_t i = 0; i < 6 * 5; ++i) ex.f32(w.id())[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
    for (int64_t i = 0; i < 5; ++i) ex.f32(b.id())[i] = 0.5f;
    for (int64_t i = 0; i < 3 * 4 * 10; ++i) ex.f32(dy.id())[i] = 0.5f * static_cast<float>(i % 3) - 0.25f;
    std::vector<float> first[3];
    for (int step = 0; step < 2; ++step) {
      ex.train_step(nullptr);
      const Tensor grads[3] = {g.grad(x), g.grad(w), g.grad(b)};
      for (int t = 0; t < 3; ++t) {
        const int64_t n = grads[t].desc().shape.numel();  // (a batched shape includes the batch)
        const float* v = ex.f32(grads[t].id());
        if (step == 0) {
          first[t].assign(v, v + n);
        } else {
          INFO("gradient " << t);
          REQUIRE(std::memcmp(first[t].data(), v, first[t].size() * sizeof(float)) == 0);
        }
      }
    }
    // db = the column sums of head 0's block of dy (12 rows of 0.5·(i mod 3) − 0.25).
    double db0 = 0;
    for (int64_t r = 0; r < 12; ++r) db0 += 0.5 * static_cast<double>((r * 10) % 3) - 0.25;
    REQUIRE(first[2][0] == Approx(db0));
  }
  // A per-head Linear has no fused ReLU or addend, and its heads divide x's width.
  Graph g(2);
  Tensor x = g.input("x", {3, 10}, DType::kF32);
  Tensor w = g.parameter("w", {10, 4}, Init::kZeros);
  NodeAttrs attrs;
  attrs.heads = 3;
  REQUIRE_THROWS_WITH(g.apply(OpKind::kLinear, {x.id(), w.id(), kNoTensor}, attrs),
                      Catch::Contains("linear") && Catch::Contains("heads"));
  attrs.heads = 2;
  attrs.relu = true;
  REQUIRE_THROWS_WITH(g.apply(OpKind::kLinear, {x.id(), w.id(), kNoTensor}, attrs),
                      Catch::Contains("per-head"));
}

TEST_CASE("matmul shape errors name the op and the tensors") {
  Graph g(2);
  Tensor a = g.input("a", {3, 5}, DType::kF32);
  Tensor w = g.parameter("w", {4, 7}, Init::kZeros);
  REQUIRE_THROWS_AS(matmul(a, w), ShapeError);
  REQUIRE_THROWS_WITH(matmul(a, w), Catch::Contains("matmul: the inner dims differ") &&
                                        Catch::Contains("'a' [2, 3, 5]") && Catch::Contains("'w' [4, 7]"));
  Tensor u = g.input_unbatched("u", {2, 3, 4}, DType::kF32), v = g.input_unbatched("v", {3, 4, 5}, DType::kF32);
  REQUIRE_THROWS_WITH(matmul(u, v), Catch::Contains("leading dims do not broadcast") &&
                                        Catch::Contains("'u' [2, 3, 4]") && Catch::Contains("'v' [3, 4, 5]"));
  Tensor r1 = g.input_unbatched("r1", {5}, DType::kF32);
  REQUIRE_THROWS_WITH(matmul(r1, w), Catch::Contains("at least 2 dims") && Catch::Contains("'r1' [5]"));
  Tensor h = g.input("h", {3, 5, 4}, DType::kF32), hb = g.input_unbatched("hb", {2, 3, 4, 2}, DType::kF32);
  REQUIRE_THROWS_WITH(matmul(h, hb), Catch::Contains("must be 1") && Catch::Contains("'hb' [2, 3, 4, 2]"));
  Tensor low = g.input("low", {2, 5}, DType::kF32), hb1 = g.input_unbatched("hb1", {1, 3, 4, 2}, DType::kF32);
  REQUIRE_THROWS_WITH(matmul(hb1, low), Catch::Contains("the output's rank 4") && Catch::Contains("'low' [2, 2, 5]"));
  Tensor ids = g.input("ids", {5, 4}, DType::kI32);
  REQUIRE_THROWS_WITH(matmul(ids, w), Catch::Contains("matmul: needs float tensors"));
  Tensor b2 = g.input("b2", {5}, DType::kF32);
  REQUIRE_THROWS_WITH(matmul(b2, b2, true, false), Catch::Contains("2-D batched operands"));
}

// ---- transpose ----

void check_transpose(OpInput x, int d0, int d1, int threads = 1) {
  INFO("x " << x.shape.str() << (x.batched ? " batched" : "") << " axes " << d0 << " " << d1);
  OpCheck c;
  const Shape s = x.shape;
  c.inputs = {x};
  c.build = [=](Graph&, const std::vector<Tensor>& in) { return transpose(in[0], d0, d1); };
  c.reference = [=](const Inputs& v) { return ref_transpose(v[0], s, d0, d1); };
  c.threads = threads;
  check_op(c);
}

TEST_CASE("transpose of any two axes") {
  check_transpose(unbatched("x", {3, 7}), 0, 1);
  check_transpose(batched("x", {2, 5, 17}), -2, -1);
  check_transpose(batched("x", {2, 3, 7, 4}), 1, 2);  // [B, T, H, dh] → [B, H, T, dh]
  check_transpose(batched("x", {2, 3, 7, 4}), 1, 3);
  check_transpose(unbatched("x", {3, 4, 5}), 0, 2);
  check_transpose(unbatched("x", {3, 4, 5, 2}), -1, 0);
  check_transpose(batched("x", {2, 33, 35}), 2, 1, 2);  // more than one tile each way
  check_transpose(batched("x", {2, 1, 17}), 1, 2);
  for (int64_t s : {1, 3, 7, 17, 33}) check_transpose(batched("x", {2, s, 3, s}), -1, 1);
}

TEST_CASE("transpose of an axis with itself is the tensor") {
  Graph g(2);
  Tensor x = g.input("x", {3, 4}, DType::kF32);
  REQUIRE(transpose(x, 1, -2).id() == x.id());
}

TEST_CASE("transpose gradients accumulate when the input is used twice") {
  OpCheck c;
  c.inputs = {batched("x", {2, 5, 5})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return transpose(in[0], 1, 2) + transpose(in[0], -1, -2); };
  c.reference = [](const Inputs& v) {
    std::vector<double> t = ref_transpose(v[0], {2, 5, 5}, 1, 2);
    for (double& e : t) e *= 2;
    return t;
  };
  check_op(c);
}

TEST_CASE("transpose results are bitwise the same for 1 and 2 threads") {
  OpCheck c;
  c.inputs = {batched("x", {3, 67, 45})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return transpose(in[0], 1, 2); };
  require_bitwise_threads(c);
  c.inputs = {batched("x", {3, 20, 6, 8})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return transpose(in[0], 1, 2); };
  require_bitwise_threads(c);
}

TEST_CASE("transpose shape errors") {
  Graph g(2);
  Tensor x = g.input("x", {3, 4}, DType::kF32);
  REQUIRE_THROWS_AS(transpose(x, 0, 1), ShapeError);
  REQUIRE_THROWS_WITH(transpose(x, 0, 1), Catch::Contains("transpose: axis 0 is the batch dim") &&
                                              Catch::Contains("'x' [2, 3, 4]"));
  REQUIRE_THROWS_WITH(transpose(x, 1, 3), Catch::Contains("transpose: axis 3 is out of range for 3 dims"));
  REQUIRE_THROWS_WITH(transpose(x, -4, 1), Catch::Contains("axis -4 is out of range"));
}

// ---- reshape / view ----

TEST_CASE("reshape keeps the elements and the batch dim") {
  OpCheck c;
  c.inputs = {batched("x", {2, 6, 4})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return reshape(in[0], {2, 3, 2, 4}); };
  c.reference = [](const Inputs& v) { return v[0]; };
  check_op(c);
  c.build = [](Graph&, const std::vector<Tensor>& in) { return view(in[0], {-1, 24}); };
  check_op(c);
  c.inputs = {unbatched("x", {6, 4})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return reshape(in[0], {-1}); };
  check_op(c);
  c.build = [](Graph&, const std::vector<Tensor>& in) { return view(in[0], {3, -1, 1}); };
  check_op(c);
}

TEST_CASE("reshape of an intermediate used only there is free") {
  // t = transpose(x) dies at the reshape, so the reshape's output takes t's buffer: no copy.
  OpCheck c;
  c.inputs = {batched("x", {2, 3, 4, 5})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return reshape(transpose(in[0], 1, 2), {2, 4, 15}); };
  c.reference = [](const Inputs& v) { return ref_transpose(v[0], {2, 3, 4, 5}, 1, 2); };
  check_op(c);
  Graph g(2);
  Tensor x = g.input("x", {3, 4, 5}, DType::kF32);
  Tensor t = transpose(x, 1, 2);
  Tensor y = reshape(t, {2, 4, 15});
  g.keep(transpose(y, 1, 2));  // a kept tensor is never written in place
  const MemoryPlan plan = plan_memory(g);
  check_plan(g, plan);
  REQUIRE(plan.in_place_count == 1);
  REQUIRE(plan.offsets[static_cast<size_t>(y.id())] == plan.offsets[static_cast<size_t>(t.id())]);
  // Used again after the reshape, t keeps its own buffer and the reshape copies.
  Graph g2(2);
  Tensor x2 = g2.input("x", {3, 4, 5}, DType::kF32);
  Tensor t2 = transpose(x2, 1, 2);
  Tensor y2 = reshape(t2, {2, 4, 15});
  g2.keep(y2);
  g2.keep(t2);
  REQUIRE(plan_memory(g2).in_place_count == 0);
}

TEST_CASE("reshape gradients accumulate when the input is used twice") {
  OpCheck c;
  c.inputs = {batched("x", {2, 3, 4})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return reshape(in[0], {2, 12}) + view(in[0], {2, 12}); };
  c.reference = [](const Inputs& v) {
    std::vector<double> y = v[0];
    for (double& e : y) e *= 2;
    return y;
  };
  check_op(c);
}

TEST_CASE("reshape shape errors") {
  Graph g(2);
  Tensor x = g.input("x", {6, 4}, DType::kF32);
  REQUIRE_THROWS_AS(reshape(x, {2, 5, 5}), ShapeError);
  REQUIRE_THROWS_WITH(reshape(x, {2, 5, 5}), Catch::Contains("reshape: the new shape [2, 5, 5] has 50 elements") &&
                                                 Catch::Contains("'x' [2, 6, 4]"));
  REQUIRE_THROWS_WITH(reshape(x, {12, 4}), Catch::Contains("the batch dim stays dim 0"));
  REQUIRE_THROWS_WITH(reshape(x, {-1, -1}), Catch::Contains("at most one -1"));
  REQUIRE_THROWS_WITH(view(x, {5, -1}), Catch::Contains("cannot infer the -1 of [5, -1]"));
}

// ---- concat, split, narrow ----

TEST_CASE("concat along the last and other axes") {
  OpCheck c;
  c.inputs = {batched("a", {2, 3, 4}), batched("b", {2, 3, 1}), batched("c", {2, 3, 7})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return concat(in); };
  c.reference = [](const Inputs& v) { return ref_concat(v, {4, 1, 7}, 6); };
  check_op(c);
  c.threads = 2;
  check_op(c);
  c.threads = 1;
  c.inputs = {unbatched("a", {3, 5}), unbatched("b", {2, 5})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return concat(in, 0); };
  c.reference = [](const Inputs& v) { return ref_concat(v, {15, 10}, 1); };
  check_op(c);
  c.inputs = {batched("a", {2, 3, 2, 4}), batched("b", {2, 1, 2, 4})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return concat(in, -3); };
  c.reference = [](const Inputs& v) { return ref_concat(v, {24, 8}, 2); };
  check_op(c);
  for (int64_t s : {1, 3, 7, 17, 33}) {
    c.inputs = {batched("a", {2, 3, s}), batched("b", {2, 3, 2})};
    c.build = [](Graph&, const std::vector<Tensor>& in) { return concat(in); };
    c.reference = [s](const Inputs& v) { return ref_concat(v, {s, 2}, 6); };
    check_op(c);
  }
}

TEST_CASE("concat of a tensor with itself sums both gradients") {
  OpCheck c;
  c.inputs = {batched("x", {2, 3, 5})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return concat({in[0], in[0]}); };
  c.reference = [](const Inputs& v) { return ref_concat({v[0], v[0]}, {5, 5}, 6); };
  check_op(c);
}

TEST_CASE("split along the last and other axes") {
  // The pieces joined in another order, one of them unused: its gradient is zero.
  OpCheck c;
  c.inputs = {batched("x", {2, 3, 11})};
  c.build = [](Graph&, const std::vector<Tensor>& in) {
    std::vector<Tensor> p = split(in[0], {1, 3, 7});
    REQUIRE(p.size() == 3);
    REQUIRE(p[1].shape() == Shape{2, 3, 3});
    return concat({p[2], p[0]});
  };
  c.reference = [](const Inputs& v) {
    return ref_concat({ref_narrow(v[0], 11, 4, 7), ref_narrow(v[0], 11, 0, 1)}, {7, 1}, 6);
  };
  check_op(c);
  c.threads = 2;
  check_op(c);
  c.threads = 1;
  c.inputs = {unbatched("x", {5, 4})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return split(in[0], {2, 3}, 0)[1]; };
  c.reference = [](const Inputs& v) { return std::vector<double>(v[0].begin() + 8, v[0].end()); };
  check_op(c);
  c.inputs = {batched("x", {2, 33, 3})};
  c.build = [](Graph&, const std::vector<Tensor>& in) {
    std::vector<Tensor> p = split(in[0], {17, 16}, 1);
    return concat({p[1], p[0]}, 1);
  };
  c.reference = [](const Inputs& v) {
    return ref_concat({ref_narrow(v[0], 99, 51, 48), ref_narrow(v[0], 99, 0, 51)}, {48, 51}, 2);
  };
  check_op(c);
}

TEST_CASE("narrow takes a range of an axis") {
  OpCheck c;
  c.inputs = {batched("x", {2, 7, 3})};
  c.build = [](Graph&, const std::vector<Tensor>& in) { return narrow(in[0], -1, 1, 2) + narrow(in[0], 2, 0, 2); };
  c.reference = [](const Inputs& v) {
    std::vector<double> a = ref_narrow(v[0], 3, 1, 2), b = ref_narrow(v[0], 3, 0, 2);
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  };
  check_op(c);
}

TEST_CASE("concat and split results are bitwise the same for 1 and 2 threads") {
  OpCheck c;
  c.inputs = {batched("a", {4, 9, 40}), batched("b", {4, 9, 24})};
  c.build = [](Graph&, const std::vector<Tensor>& in) {
    std::vector<Tensor> p = split(concat(in), {30, 34});
    return concat({p[1], p[0]});
  };
  require_bitwise_threads(c);
}

TEST_CASE("concat and split shape errors") {
  Graph g(2);
  Tensor a = g.input("a", {3, 4}, DType::kF32), b = g.input("b", {2, 5}, DType::kF32);
  Tensor u = g.input_unbatched("u", {2, 3, 4}, DType::kF32);
  REQUIRE_THROWS_AS(concat({a, b}), ShapeError);
  REQUIRE_THROWS_WITH(concat({a, b}), Catch::Contains("concat: the tensors' shapes must match except along axis 2") &&
                                          Catch::Contains("'a' [2, 3, 4]") && Catch::Contains("'b' [2, 2, 5]"));
  REQUIRE_THROWS_WITH(concat({a, u}), Catch::Contains("cannot mix batched and unbatched"));
  REQUIRE_THROWS_WITH(concat({a, a}, 0), Catch::Contains("concat: axis 0 is the batch dim"));
  REQUIRE_THROWS_WITH(split(a, {1, 2}), Catch::Contains("split: sizes {1, 2} sum to 3, not to axis -1's size 4") &&
                                            Catch::Contains("'a' [2, 3, 4]"));
  REQUIRE_THROWS_WITH(split(a, {0, 4}), Catch::Contains("sizes must be positive"));
  REQUIRE_THROWS_WITH(narrow(a, 1, 2, 2), Catch::Contains("narrow: [2, 4) is not a non-empty range of axis 1 (size 3)"));
}

// ---- the ops together: attention written with them ----

TEST_CASE("attention scores from view transpose and matmul") {
  // x [B, T, H·dh] → q [B, H, T, dh]; scores = q·qᵀ [B, H, T, T]; back to [B, T, H·T].
  OpCheck c;
  c.inputs = {batched("x", {2, 3, 4})};
  c.build = [](Graph&, const std::vector<Tensor>& in) {
    Tensor q = transpose(view(in[0], {2, 3, 2, 2}), 1, 2);
    return reshape(transpose(matmul(q, q, false, true), 1, 2), {2, 3, -1});
  };
  c.reference = [](const Inputs& v) {
    const std::vector<double> q = ref_transpose(v[0], {2, 3, 2, 2}, 1, 2);
    return ref_transpose(ref_matmul(q, {2, 2, 3, 2}, q, {2, 2, 3, 2}, false, true), {2, 2, 3, 3}, 1, 2);
  };
  check_op(c);
}

}  // namespace
}  // namespace attnkit

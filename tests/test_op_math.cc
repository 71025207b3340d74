// The elementwise math and reduction ops of engine/functional.h: values and gradients against
// double references and central differences on every SIMD target (tests/op_check.h), with
// broadcasting, scalars and ragged sizes; the unary kernels' accuracy; a loss built from them
// trained with Adam; shape errors; the same bits for 1 and 2 threads; no heap allocation in a
// steady step.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "engine/functional.h"
#include "ops/math.h"
#include "op_check.h"

#include "allocation_counter.h"

namespace attnkit {
namespace {

using test::check_op;
using test::Inputs;
using test::OpCheck;
using test::OpInput;

const int64_t kSizes[] = {1, 3, 7, 17, 33};

std::function<double(Rng&, int64_t)> uniform(double lo, double hi) {
  return [lo, hi](Rng& r, int64_t) { return lo + (hi - lo) * r.uniform(); };
}

// numpy's broadcast of two full shapes (dim 0 of a batched input is its batch).
Shape broadcast(const Shape& a, const Shape& b) {
  Shape o;
  o.rank = std::max(a.rank, b.rank);
  for (int i = 1; i <= o.rank; ++i) {
    const int64_t da = i <= a.rank ? a[-i] : 1, db = i <= b.rank ? b[-i] : 1;
    o.dims[o.rank - i] = da == 1 ? db : da;
  }
  return o;
}

// Flat index into x (shape xs, aligned to out from the last dim) of out's element `flat`.
int64_t source_index(const Shape& out, const Shape& xs, int64_t flat) {
  int64_t idx = 0, step = 1;
  for (int i = 1; i <= out.rank; ++i) {
    const int64_t c = flat % out[-i];
    flat /= out[-i];
    if (i <= xs.rank) {
      if (xs[-i] != 1) idx += c * step;
      step *= xs[-i];
    }
  }
  return idx;
}

using BinaryFn = double (*)(double, double);

std::vector<double> binary_reference(const Inputs& x, const Shape& sa, const Shape& sb, BinaryFn f) {
  const Shape out = broadcast(sa, sb);
  std::vector<double> y(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i)
    y[static_cast<size_t>(i)] = f(x[0][static_cast<size_t>(source_index(out, sa, i))],
                                  x[1][static_cast<size_t>(source_index(out, sb, i))]);
  return y;
}

std::vector<double> map(const std::vector<double>& x, double (*f)(double)) {
  std::vector<double> y;
  for (double v : x) y.push_back(f(v));
  return y;
}

double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

struct Unary {
  const char* name;
  Tensor (*op)(const Tensor&);
  double (*ref)(double);
  double lo, hi;
};

const Unary kUnary[] = {
    {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -3, 3},
    {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.2, 4},
    {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -3, 3},
    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, -6, 6},
    {"gelu", [](const Tensor& x) { return gelu(x); }, ref_gelu, -4, 4},
};

}  // namespace

TEST_CASE("unary math ops match double references and finite differences") {
  for (const Unary& u : kUnary) {
    for (int64_t n : kSizes) {
      for (int layout = 0; layout < 3; ++layout) {
        INFO(u.name << " n=" << n << " layout " << layout);
        OpCheck c;
        OpInput in{"x", layout == 0 ? Shape{n} : layout == 1 ? Shape{2, n} : Shape{2, 3, n}, layout != 0};
        in.fill = uniform(u.lo, u.hi);
        c.inputs = {in};
        c.build = [&](Graph&, const std::vector<Tensor>& t) { return u.op(t[0]); };
        c.reference = [&](const Inputs& x) { return map(x[0], u.ref); };
        check_op(c);
      }
    }
  }
}

namespace {

struct Binary {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  BinaryFn ref;
};

const Binary kBinary[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
    {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
    {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
    {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }},
};

struct Pair {
  Shape a, b;
  bool a_batched, b_batched;
};

// Equal shapes, suffixes either side, dims of 1 either side, batched and not.
std::vector<Pair> pairs(int64_t n) {
  return {
      {{2, 3, n}, {2, 3, n}, true, true},
      {{3, n}, {3, n}, false, false},
      {{2, 3, n}, {n}, true, false},
      {{n}, {2, 3, n}, false, true},
      {{2, 3, n}, {3, n}, true, false},
      {{2, 3, n}, {3, 1}, true, false},
      {{2, 3, n}, {2, 3, 1}, true, true},
      {{2, 1, n}, {2, 3, n}, true, true},
      {{2, 3, 1}, {1, n}, true, false},
      {{3, 1}, {1, n}, false, false},
      {{2, n}, {1, n}, true, false},
  };
}

}  // namespace

TEST_CASE("binary math ops broadcast and match double references and finite differences") {
  for (const Binary& op : kBinary) {
    for (int64_t n : kSizes) {
      for (const Pair& p : pairs(n)) {
        INFO(op.name << " " << p.a.str() << (p.a_batched ? " batched" : "") << " with " << p.b.str()
                     << (p.b_batched ? " batched" : ""));
        OpCheck c;
        OpInput a{"a", p.a, p.a_batched}, b{"b", p.b, p.b_batched};
        if (std::string(op.name) == "div") b.fill = [](Rng& r, int64_t) { return (r.below(2) ? 1 : -1) * (0.5 + 1.5 * r.uniform()); };
        c.inputs = {a, b};
        c.build = [&](Graph&, const std::vector<Tensor>& t) { return op.op(t[0], t[1]); };
        c.reference = [&](const Inputs& x) { return binary_reference(x, p.a, p.b, op.ref); };
        check_op(c);
      }
    }
  }
}

TEST_CASE("add takes the lessons' kAdd where it can and the general add elsewhere") {
  Graph g(4);
  Tensor a = g.input("a", {3, 5}, DType::kF32), b = g.input_unbatched("b", {5}, DType::kF32);
  Tensor c = g.input_unbatched("c", {3, 1}, DType::kF32);
  add(a, b);
  REQUIRE(g.nodes().back().op == OpKind::kAdd);
  add(a, a);
  REQUIRE(g.nodes().back().op == OpKind::kAdd);
  add(a, c);
  REQUIRE(g.nodes().back().op == OpKind::kAddBroadcast);
  a + c;  // a + b is add(a, b)
  REQUIRE(g.nodes().back().op == OpKind::kAddBroadcast);
  a + b;
  REQUIRE(g.nodes().back().op == OpKind::kAdd);
}

TEST_CASE("math with float scalars on either side") {
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*ref)(double);
  };
  const Case cases[] = {
      {"a*2", [](const Tensor& a) { return a * 2.0f; }, [](double a) { return a * 2; }},
      {"3*a", [](const Tensor& a) { return 3.0f * a; }, [](double a) { return 3 * a; }},
      {"2/a", [](const Tensor& a) { return 2.0f / a; }, [](double a) { return 2 / a; }},
      {"a/4", [](const Tensor& a) { return a / 4.0f; }, [](double a) { return a / 4; }},
      {"a+1", [](const Tensor& a) { return a + 1.0f; }, [](double a) { return a + 1; }},
      {"1+a", [](const Tensor& a) { return 1.0f + a; }, [](double a) { return 1 + a; }},
      {"a-0.5", [](const Tensor& a) { return a - 0.5f; }, [](double a) { return a - 0.5; }},
      {"1-a", [](const Tensor& a) { return 1.0f - a; }, [](double a) { return 1 - a; }},
      {"-a", [](const Tensor& a) { return -a; }, [](double a) { return -a; }},
  };
  for (const Case& k : cases) {
    for (int64_t n : kSizes) {
      for (bool batched : {true, false}) {
        INFO(k.name << " n=" << n << (batched ? " batched" : ""));
        OpCheck c;
        OpInput in{"a", batched ? Shape{2, n} : Shape{n}, batched};
        in.fill = [](Rng& r, int64_t) { return (r.below(2) ? 1 : -1) * (0.5 + 1.5 * r.uniform()); };
        c.inputs = {in};
        c.build = [&](Graph&, const std::vector<Tensor>& t) { return k.op(t[0]); };
        c.reference = [&](const Inputs& x) { return map(x[0], k.ref); };
        check_op(c);
      }
    }
  }
}

TEST_CASE("sum and mean over everything and over the last dim") {
  for (int64_t n : kSizes) {
    for (int layout = 0; layout < 4; ++layout) {
      const Shape s = layout == 0 ? Shape{n} : layout == 1 ? Shape{4, n} : layout == 2 ? Shape{2, 3, n} : Shape{3, n};
      const bool batched = layout == 1 || layout == 2;
      for (int which = 0; which < 4; ++which) {
        const bool is_mean = which & 1, last = which & 2;
        INFO((is_mean ? "mean" : "sum") << (last ? "(x, -1)" : "(x)") << " of " << s.str() << (batched ? " batched" : ""));
        OpCheck c;
        c.inputs = {OpInput{"x", s, batched}};
        c.build = [&](Graph&, const std::vector<Tensor>& t) {
          if (last) return is_mean ? mean(t[0], -1) : sum(t[0], -1);
          return is_mean ? mean(t[0]) : sum(t[0]);
        };
        c.reference = [&](const Inputs& x) {
          const int64_t len = last ? s.last() : s.numel();
          std::vector<double> y;
          for (int64_t r = 0; r < s.numel() / len; ++r) {
            double acc = 0;
            for (int64_t j = 0; j < len; ++j) acc += x[0][static_cast<size_t>(r * len + j)];
            y.push_back(is_mean ? acc / static_cast<double>(len) : acc);
          }
          return y;
        };
        check_op(c);
      }
    }
  }
  Graph g(2);
  Tensor x = g.input("x", {3, 5}, DType::kF32);
  REQUIRE(sum(x).shape() == Shape{1});
  REQUIRE_FALSE(sum(x).desc().batched);
  REQUIRE(mean(x, -1).shape() == Shape{2, 3});
  REQUIRE(mean(x, 2).shape() == Shape{2, 3});
  REQUIRE(mean(x, -1).desc().batched);
}

TEST_CASE("gradients through shared tensors and repeated operands") {
  // y = u·v + u: the add shares its gradient with u and u·v, and mul's backward then adds
  // into the gradient it reads; also u·u, u − u, u / u and broadcast repeats.
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&, const Tensor&);
    double (*ref)(double, double);
  };
  const Case cases[] = {
      {"u*v+u", [](const Tensor& x, const Tensor& w) { Tensor u = x * 1.5f, v = w + 0.5f; return u * v + u; },
       [](double x, double w) { return 1.5 * x * (w + 0.5) + 1.5 * x; }},
      {"u+u*v", [](const Tensor& x, const Tensor& w) { Tensor u = x * 1.5f, v = w + 0.5f; return u + u * v; },
       [](double x, double w) { return 1.5 * x * (w + 0.5) + 1.5 * x; }},
      {"u*u-u/v", [](const Tensor& x, const Tensor& w) { Tensor u = exp(x), v = w + 3.0f; return u * u - u / v; },
       [](double x, double w) { return std::exp(2 * x) - std::exp(x) / (w + 3); }},
      {"(u-u)+u*w", [](const Tensor& x, const Tensor& w) { Tensor u = tanh(x); return (u - u) + add(u, w) * w; },
       [](double x, double w) { return (std::tanh(x) + w) * w; }},
      {"add(u,u)*sigmoid(u)-w", [](const Tensor& x, const Tensor& w) { Tensor u = gelu(x); return add(u, u) * sigmoid(u) - w; },
       [](double x, double w) { const double u = ref_gelu(x); return 2 * u * ref_sigmoid(u) - w; }},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    OpCheck c;
    c.inputs = {OpInput{"x", {2, 3, 7}}, OpInput{"w", {2, 3, 7}}};
    c.build = [&](Graph&, const std::vector<Tensor>& t) { return k.op(t[0], t[1]); };
    c.reference = [&](const Inputs& x) {
      std::vector<double> y;
      for (size_t i = 0; i < x[0].size(); ++i) y.push_back(k.ref(x[0][i], x[1][i]));
      return y;
    };
    check_op(c);
  }
  // A broadcast operand used twice: b [7] in (a·b) / b² summed to b's shape twice.
  OpCheck c;
  OpInput b{"b", {7}, false};
  b.fill = uniform(0.5, 2.0);
  c.inputs = {OpInput{"a", {2, 3, 7}}, b};
  c.build = [](Graph&, const std::vector<Tensor>& t) { return (t[0] * t[1]) / (t[1] * t[1]) + t[1]; };
  c.reference = [](const Inputs& x) {
    std::vector<double> y;
    for (size_t i = 0; i < x[0].size(); ++i) y.push_back(x[0][i] / x[1][i % 7] + x[1][i % 7]);
    return y;
  };
  check_op(c);
}

namespace {

struct Accuracy {
  double max_rel = 0, max_abs = 0, worst_x = 0;
};

// The kernel of fn over xs on the current target against ref in double: the largest
// relative error where |ref| >= floor, the largest absolute error everywhere.
Accuracy measure(MathFn fn, const std::vector<float>& xs, double (*ref)(double), double floor) {
  std::vector<float> y(xs.size());
  Strided s;
  s.rank = 1;
  s.dims[0] = static_cast<int64_t>(xs.size());
  s.stride[0][0] = 1;
  elementwise(fn, s, xs.data(), nullptr, nullptr, 0.0f, y.data(), false);
  Accuracy a;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = ref(xs[i]), err = std::fabs(static_cast<double>(y[i]) - want);
    a.max_abs = std::max(a.max_abs, err);
    if (std::fabs(want) >= floor && err / std::fabs(want) > a.max_rel) {
      a.max_rel = err / std::fabs(want);
      a.worst_x = xs[i];
    }
  }
  return a;
}

std::vector<float> grid(double lo, double hi, int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(lo + (hi - lo) * i / (n - 1)));
  return v;
}

}  // namespace

TEST_CASE("unary kernels' accuracy against double") {
  test::for_each_simd_target([](const std::string& target) {
    struct Row {
      const char* name;
      MathFn fn;
      double (*ref)(double);
      std::vector<float> xs;
      double floor, rel_bound;
    };
    std::vector<float> logs;  // 1e-30 … 1e30, geometric
    for (int i = 0; i <= 60000; ++i) logs.push_back(static_cast<float>(std::pow(10.0, -30 + 60.0 * i / 60000)));
    const Row rows[] = {
        {"exp", MathFn::kExp, [](double v) { return std::exp(v); }, grid(-87, 88, 100001), 0, 4e-7},
        {"log", MathFn::kLog, [](double v) { return std::log(v); }, logs, 1e-3, 4e-7},
        {"tanh", MathFn::kTanh, [](double v) { return std::tanh(v); }, grid(-10, 10, 100001), 1e-30, 1e-6},
        {"sigmoid", MathFn::kSigmoid, ref_sigmoid, grid(-80, 30, 100001), 0, 1e-6},
        {"gelu", MathFn::kGelu, ref_gelu, grid(-5, 10, 100001), 1e-30, 3e-6},
        // Far in the tail e^(−x²/2) loses digits to the rounding of x²/2 (|gelu| < 1e-6 there).
        {"gelu", MathFn::kGelu, ref_gelu, grid(-10, -5, 100001), 1e-30, 1e-5},
    };
    for (const Row& r : rows) {
      const Accuracy a = measure(r.fn, r.xs, r.ref, r.floor);
      std::printf("accuracy %-8s %-10s max relative error %.3g (at x = %.6g), max absolute error %.3g\n", target.c_str(),
                  r.name, a.max_rel, a.worst_x, a.max_abs);
      INFO(r.name << ": max relative error " << a.max_rel << " at x = " << a.worst_x);
      REQUIRE(a.max_rel <= r.rel_bound);
    }
    // Edges: NaN stays NaN, exp saturates, log of 0 and of negatives, tanh and sigmoid limits.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> xs = {nan, 100.0f, -200.0f, 0.0f, -1.0f, 1e-40f, inf};
    std::vector<float> y(xs.size());
    Strided s;
    s.rank = 1;
    s.dims[0] = static_cast<int64_t>(xs.size());
    s.stride[0][0] = 1;
    elementwise(MathFn::kExp, s, xs.data(), nullptr, nullptr, 0, y.data(), false);
    REQUIRE(std::isnan(y[0]));
    REQUIRE(y[1] == inf);
    REQUIRE(y[2] == 0.0f);
    elementwise(MathFn::kLog, s, xs.data(), nullptr, nullptr, 0, y.data(), false);
    REQUIRE(std::isnan(y[0]));
    REQUIRE(y[3] == -inf);
    REQUIRE(std::isnan(y[4]));
    REQUIRE(std::fabs(y[5] - std::log(1e-40)) < 1e-4 * 92);
    REQUIRE(y[6] == inf);
    elementwise(MathFn::kSigmoid, s, xs.data(), nullptr, nullptr, 0, y.data(), false);
    REQUIRE(std::isnan(y[0]));
    REQUIRE(y[1] == 1.0f);
    REQUIRE(y[2] == 0.0f);
    elementwise(MathFn::kTanh, s, xs.data(), nullptr, nullptr, 0, y.data(), false);
    REQUIRE(y[1] == 1.0f);
    REQUIRE(y[2] == -1.0f);
    elementwise(MathFn::kGelu, s, xs.data(), nullptr, nullptr, 0, y.data(), false);
    REQUIRE(y[1] == 100.0f);
    REQUIRE(y[2] == 0.0f);
    REQUIRE(std::isnan(y[0]));
    elementwise(MathFn::kTanh, s, xs.data(), nullptr, nullptr, 0, y.data(), false);
    REQUIRE(std::isnan(y[0]));
  });
}

namespace {

// loss = mean((a·w + b − c)²) over a batch, w [n] and b [1] parameters, c = a·w* + b*.
struct Regression {
  std::unique_ptr<Graph> g;
  Tensor a, c, w, b, loss;
};

Regression regression(int64_t batch, int64_t rows, int64_t n) {
  Regression r;
  r.g = std::make_unique<Graph>(batch);
  Graph& g = *r.g;
  r.a = g.input("a", {rows, n}, DType::kF32);
  r.c = g.input("c", {rows, n}, DType::kF32);
  r.w = g.parameter("w", {n}, Init::kZeros);
  r.b = g.parameter("b", {1}, Init::kZeros);
  Tensor e = r.a * r.w + r.b - r.c;  // [n] and [1] broadcast over the batch and the rows
  r.loss = mean(e * e);
  g.keep(r.loss);
  g.backward(r.loss);
  return r;
}

void feed(Executor& ex, const Regression& r, int64_t batch, int64_t rows, int64_t n, uint64_t seed) {
  Rng rng(seed);
  float* a = ex.data(r.a);
  float* c = ex.data(r.c);
  for (int64_t i = 0; i < batch * rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      a[i * n + j] = static_cast<float>(2 * rng.uniform() - 1);
      c[i * n + j] = a[i * n + j] * (0.5f + 0.1f * static_cast<float>(j)) - 0.25f;
    }
}

}  // namespace

TEST_CASE("a loss built from the math ops trains with Adam") {
  const int64_t batch = 8, rows = 5, n = 7;
  Regression r = regression(batch, rows, n);
  Executor ex(*r.g, {2, 0, false});
  Adam adam(ex.param_count(), {0.05f});
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    feed(ex, r, batch, rows, n, 100 + static_cast<uint64_t>(step));
    ex.train_step(&adam);
    last = ex.data(r.loss)[0];
    if (step == 0) first = last;
  }
  INFO("loss " << first << " -> " << last);
  REQUIRE(last < 1e-3f * first);
  const float* w = ex.data(r.w);
  for (int64_t j = 0; j < n; ++j) REQUIRE(std::fabs(w[j] - (0.5f + 0.1f * static_cast<float>(j))) < 0.02f);
  REQUIRE(std::fabs(ex.data(r.b)[0] + 0.25f) < 0.02f);
}

TEST_CASE("math shape errors name the op and the tensors") {
  Graph g(2);
  Tensor a = g.input("a", {3, 4}, DType::kF32), b = g.input_unbatched("b", {5}, DType::kF32);
  Tensor ids = g.input("ids", {3}, DType::kI32), c = g.input("c", {4}, DType::kF32);
  Tensor big = g.input_unbatched("big", {2, 3, 4}, DType::kF32);
  REQUIRE_THROWS_WITH(a * b, Catch::Contains("mul: shapes do not broadcast") && Catch::Contains("'a' [2, 3, 4]") &&
                                 Catch::Contains("'b' [5]"));
  REQUIRE_THROWS_AS(a - b, ShapeError);
  REQUIRE_THROWS_WITH(a / c, Catch::Contains("div: batched operands must have the same rank"));
  REQUIRE_THROWS_WITH(add(a, big), Catch::Contains("add: an unbatched operand's dim at the batch position must be 1"));
  REQUIRE_THROWS_WITH(exp(ids), Catch::Contains("exp: needs a float tensor") && Catch::Contains("'ids'"));
  REQUIRE_THROWS_WITH(ids * 2.0f, Catch::Contains("mul: needs a float tensor"));
  REQUIRE_THROWS_WITH(sum(a, 1), Catch::Contains("sum: only the last dim (-1) can be reduced") && Catch::Contains("'a' [2, 3, 4]"));
  Tensor per_sample = g.input("s", Shape(), DType::kF32);  // [batch]
  REQUIRE_THROWS_WITH(mean(per_sample, -1), Catch::Contains("mean: the last dim of this tensor is the batch"));
  REQUIRE_THROWS_AS(sum(ids), ShapeError);
}

TEST_CASE("math ops give the same bits with 1 and 2 threads") {
  // Sums over long rows and over the batch (the broadcast parameters' gradients), every op.
  auto run = [](int threads, std::vector<float>* out) {
    Graph g(6);
    Tensor x = g.input("x", {17, 333}, DType::kF32);
    Tensor w = g.parameter("w", {333}, Init::kNormal, 0.5f);
    Tensor v = g.parameter("v", {17, 1}, Init::kNormal, 0.5f);
    Tensor h = gelu(x * w + v) - tanh(x / (exp(v) + 1.0f)) + sigmoid(2.0f - x) * log(exp(x) + 0.5f);
    Tensor loss = mean(sum(h * h, -1)) + sum(x * v) / 100.0f;
    g.keep(loss);
    g.backward(loss);
    Executor ex(g, {threads, 7, false});
    Rng rng(3);
    for (int64_t i = 0; i < 6 * 17 * 333; ++i) ex.data(x)[i] = static_cast<float>(2 * rng.uniform() - 1);
    Adam adam(ex.param_count(), {0.01f});
    for (int i = 0; i < 3; ++i) ex.train_step(&adam);
    out->assign(ex.params(), ex.params() + ex.param_count());
    out->push_back(ex.data(loss)[0]);
    out->insert(out->end(), ex.grads(), ex.grads() + ex.param_count());
  };
  std::vector<float> one, two;
  run(1, &one);
  run(2, &two);
  REQUIRE(one.size() == two.size());
  REQUIRE(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
}

TEST_CASE("executor runs flush subnormal floats to zero unless asked not to, and restore the caller's mode") {
  for (int threads : {1, 2}) {
    for (bool flush : {true, false}) {
      INFO(threads << " threads, flush_denormals " << flush);
      Graph g(2);
      Tensor x = g.input("x", {64}, DType::kF32);
      Tensor y = x * 1e-20f, z = x * 2.0f;
      g.keep(y);
      g.keep(z);
      ExecutorOptions options;
      options.threads = threads;
      options.flush_denormals = flush;
      Executor ex(g, options);
      ex.set_batch(2);
      for (int64_t i = 0; i < 64; ++i) ex.data(x)[i] = 1e-20f;  // × 1e-20: a subnormal result
      for (int64_t i = 64; i < 128; ++i) ex.data(x)[i] = 1e-40f;  // a subnormal input
      REQUIRE(std::fpclassify(ex.data(x)[64]) == FP_SUBNORMAL);
#if defined(__x86_64__)
      const unsigned before = _mm_getcsr() & ~0x3fu;  // the control bits (not the exception flags)
#endif
      ex.forward();
#if defined(__x86_64__)
      REQUIRE((_mm_getcsr() & ~0x3fu) == before);
#endif
      for (int64_t i = 0; i < 64; ++i) {
        if (flush) {
          REQUIRE(ex.data(y)[i] == 0.0f);
          REQUIRE(ex.data(z)[64 + i] == 0.0f);
        } else {
          REQUIRE(std::fpclassify(ex.data(y)[i]) == FP_SUBNORMAL);
          REQUIRE(ex.data(z)[64 + i] == 2.0f * ex.data(x)[64 + i]);  // (exact: 2 × a subnormal)
          REQUIRE(ex.data(z)[64 + i] > 0.0f);
        }
        REQUIRE(ex.data(z)[i] == 2e-20f);  // normal values as ever
      }
    }
  }
}

TEST_CASE("a steady training step of math ops makes no heap allocation") {
  for (int threads : {1, 2}) {
    const int64_t batch = 8, rows = 5, n = 7;
    Regression r = regression(batch, rows, n);
    Executor ex(*r.g, {threads, 0});
    Adam adam(ex.param_count(), {0.01f});
    feed(ex, r, batch, rows, n, 1);
    for (int i = 0; i < 3; ++i) ex.train_step(&adam);  // warm-up: thread pools, scratch
    const long before = g_allocations.load();
    for (int i = 0; i < 20; ++i) {
      ex.set_batch(i % 4 == 3 ? 5 : batch);  // partial batches too
      ex.train_step(&adam);
      ex.forward();
    }
    const long allocations = g_allocations.load() - before;
    INFO(threads << " threads");
    REQUIRE(allocations == 0);
  }
}

}  // namespace attnkit

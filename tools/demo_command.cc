// attnkit demo: lesson 000's demonstrations, computed by attnkit and printed the way the
// lesson's numpy code prints them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "engine/error.h"
#include "engine/executor.h"
#include "engine/graph.h"
#include "engine/modules.h"
#include "engine/npy.h"
#include "engine/rng.h"
#include "ops/softmax.h"
#include "tools/commands.h"
#include "tools/render/attention_array.h"

namespace attnkit::cli {
namespace {

// numpy's str() of an array rounded with .round(decimals): shortest digits (up to 8 after the
// point), integer parts right-aligned, fractions left-aligned and padded to the longest.
// matrix: a 2-d array ([[…]] even for one row), else a 1-d one.
std::string numpy_str(const std::vector<double>& values, int64_t rows, int64_t cols, int decimals,
                      bool matrix = true) {
  std::vector<std::string> ints, fracs;
  size_t int_w = 0, frac_w = 0;
  const double p = std::pow(10.0, decimals);
  for (double v : values) {
    double r = std::nearbyint(v * p) / p;
    std::string s = fmt::format("{:.8f}", r);
    while (s.back() == '0') s.pop_back();  // keeps the point: "3."
    if (std::signbit(r) && s[0] != '-') s = "-" + s;
    const size_t dot = s.find('.');
    ints.push_back(s.substr(0, dot));
    fracs.push_back(s.substr(dot));
    int_w = std::max(int_w, ints.back().size());
    frac_w = std::max(frac_w, fracs.back().size());
  }
  std::string out = matrix ? "[" : "";
  for (int64_t r = 0; r < rows; ++r) {
    if (r > 0) out += "\n ";
    out += "[";
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      if (c > 0) out += " ";
      out += std::string(int_w - ints[i].size(), ' ') + ints[i] + fracs[i] + std::string(frac_w - fracs[i].size(), ' ');
    }
    out += "]";
  }
  return out + (matrix ? "]" : "");
}

std::string numpy_str(const std::vector<double>& v, int decimals) {
  return numpy_str(v, 1, static_cast<int64_t>(v.size()), decimals, /*matrix=*/false);
}

// Pads a UTF-8 string to `width` characters (code points), on the right or the left.
std::string pad(const std::string& s, size_t width, bool left = false) {
  size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  const std::string fill(width > n ? width - n : 0, ' ');
  return left ? fill + s : s + fill;
}

// Soft dictionary lookup: 4 keys, one-hot values, 3 queries (attnkit's softmax kernel).
void demo_lookup() {
  const float keys[4][2] = {{1.0f, 0.0f}, {0.9f, 0.3f}, {0.0f, 1.0f}, {0.1f, 0.9f}};
  const char* names[4] = {"фрукты", "ягоды", "машины", "велосипеды"};
  struct Query { float q[2]; const char* desc; };
  const Query queries[3] = {{{3.0f, 0.0f}, "про еду"}, {{0.0f, 3.0f}, "про транспорт"}, {{1.5f, 1.5f}, "непонятно про что"}};
  fmt::print("ключи: {} {} {} {}; значения — one-hot\n", names[0], names[1], names[2], names[3]);
  for (const Query& q : queries) {
    float scores[4], alpha[4];
    for (int j = 0; j < 4; ++j) scores[j] = keys[j][0] * q.q[0] + keys[j][1] * q.q[1];
    softmax_forward(scores, alpha, 1, 1, 4, 1.0f, SoftmaxMask{});
    // The answer α·values with one-hot values is α itself.
    const std::vector<double> s(scores, scores + 4), a(alpha, alpha + 4);
    fmt::print("запрос {}: оценки {}, веса {}\n", pad(q.desc, 18), numpy_str(s, 2), numpy_str(a, 2));
    fmt::print("{}ответ = {}\n", std::string(27, ' '), numpy_str(a, 2));
  }
}

// Why divide by √d: spread of scores and mean max weight over 200 random queries × 10 keys.
void demo_scaling() {
  Rng rng(0);
  fmt::print("(random data from attnkit's generator: the numbers differ from numpy's, the picture does not)\n");
  for (int d : {4, 64, 512}) {
    for (bool scaled : {false, true}) {
      double spread_sum = 0, maxw_sum = 0;
      for (int trial = 0; trial < 200; ++trial) {
        std::vector<double> q(static_cast<size_t>(d)), s(10);
        for (double& x : q) x = rng.normal();
        for (double& sj : s) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += rng.normal() * q[static_cast<size_t>(i)];
          sj = dot / (scaled ? std::sqrt(static_cast<double>(d)) : 1.0);
        }
        double mean = 0, mx = -1e300;
        for (double x : s) mean += x / 10, mx = std::max(mx, x);
        double var = 0, sum = 0, wmax = 0;
        for (double x : s) var += (x - mean) * (x - mean) / 10, sum += std::exp(x - mx);
        for (double x : s) wmax = std::max(wmax, std::exp(x - mx) / sum);
        spread_sum += std::sqrt(var);
        maxw_sum += wmax;
      }
      fmt::print("d = {:3}, {}: разброс оценок {:6.2f}, максимальный вес в среднем {:.2f}\n", d,
                 scaled ? "с делением на √d" : "без деления     ", spread_sum / 200, maxw_sum / 200);
    }
  }
}

// An array of the user's for a demo: a 2-d .npy of numbers, as float32.
struct Matrix {
  std::vector<float> values;
  int64_t rows = 0, cols = 0;
};

Matrix load_matrix(const std::string& path, const char* flag) {
  const NpyArray a = read_npy(path);
  if (a.shape.size() != 2 || a.shape[0] < 1 || a.shape[1] < 1)
    throw FileError(fmt::format("{} {}: expected a 2-d array [rows, columns], got shape {}", flag, path,
                                 render::shape_string(a.shape)));
  Matrix m{to_float32(a, path), a.shape[0], a.shape[1]};
  for (size_t i = 0; i < m.values.size(); ++i)
    if (!std::isfinite(m.values[i]))
      throw FileError(fmt::format("{} {}: value {} at [{}, {}] is not a finite float32", flag, path, m.values[i],
                                  static_cast<int64_t>(i) / m.cols, static_cast<int64_t>(i) % m.cols));
  return m;
}

Matrix random_matrix(Rng& rng, int64_t rows, int64_t cols) {
  Matrix m{std::vector<float>(static_cast<size_t>(rows * cols)), rows, cols};
  for (float& x : m.values) x = static_cast<float>(rng.normal());
  return m;
}

std::string shape_pair(int64_t a, int64_t b) { return fmt::format("({}, {})", a, b); }

// softmax(Q·Kᵀ/√d, forbidden := −1e9)·V through the engine's scaled_dot_product_attention.
struct Attended {
  std::vector<float> out, weights;
};

Attended attend(const Matrix& q, const Matrix& k, const Matrix& v, const std::vector<uint8_t>& mask, bool causal) {
  const int64_t m = q.rows, n = k.rows, d = q.cols, dv = v.cols;
  Graph g(1);
  Tensor tq = g.input("Q", {m, d}, DType::kF32), tk = g.input("K", {n, d}, DType::kF32);
  Tensor tv = g.input("V", {n, dv}, DType::kF32);
  Tensor tmask = mask.empty() ? Tensor{} : g.input("mask", {m, n}, DType::kU8);
  Attention a = scaled_dot_product_attention(tq, tk, tv, tmask, causal);
  g.keep(a.out);
  g.keep(a.weights);
  Executor ex(g);
  std::copy(q.values.begin(), q.values.end(), ex.f32(tq.id()));
  std::copy(k.values.begin(), k.values.end(), ex.f32(tk.id()));
  std::copy(v.values.begin(), v.values.end(), ex.f32(tv.id()));
  if (!mask.empty()) std::copy(mask.begin(), mask.end(), ex.u8(tmask.id()));
  ex.forward();
  const float *o = ex.f32(a.out.id()), *w = ex.f32(a.weights.id());
  return {std::vector<float>(o, o + m * dv), std::vector<float>(w, w + m * n)};
}

std::string rounded(const std::vector<float>& x, int64_t rows, int64_t cols) {
  return numpy_str(std::vector<double>(x.begin(), x.end()), rows, cols, 2);
}

// Many queries at once (the lesson's "matrix form"): Q [m, d], K [n, d], V [n, dv], the
// weights [m, n] (rows sum to 1) and the output [m, dv]; the user's arrays or random ones.
void demo_attention(const DemoArgs& args) {
  const int given = !args.q.empty() + !args.k.empty() + !args.v.empty();
  if (given != 0 && given != 3)
    throw UsageError("demo attention: give --q, --k and --v together (or none of them for random ones)");
  Matrix q, k, v;
  if (given == 3) {
    q = load_matrix(args.q, "--q");
    k = load_matrix(args.k, "--k");
    v = load_matrix(args.v, "--v");
    if (k.cols != q.cols)
      throw FileError(fmt::format("demo attention: --k {} has {} columns, --q {} has {}: queries and keys need the "
                                   "same size d",
                                   args.k, k.cols, args.q, q.cols));
    if (v.rows != k.rows)
      throw FileError(fmt::format("demo attention: --v {} has {} rows, --k {} has {}: one value per key", args.v,
                                   v.rows, args.k, k.rows));
  } else {
    Rng rng(0);  // the lesson's sizes: 3 queries, 5 keys of size 8, values of size 4
    q = random_matrix(rng, 3, 8);
    k = random_matrix(rng, 5, 8);
    v = random_matrix(rng, 5, 4);
    fmt::print("(random Q, K, V from attnkit's generator: the numbers differ from numpy's; the lesson's own arrays "
               "go in with --q Q.npy --k K.npy --v V.npy)\n");
  }
  const int64_t m = q.rows, n = k.rows;
  std::vector<uint8_t> mask;
  if (!args.mask.empty()) {
    const NpyArray a = read_npy(args.mask);
    const bool row = a.shape.size() == 1 && a.shape[0] == n;
    if (!row && !(a.shape.size() == 2 && a.shape[0] == m && a.shape[1] == n))
      throw FileError(fmt::format("--mask {}: expected shape ({}, {}) (queries, keys) or ({},) (one row for every "
                                   "query), got {}",
                                   args.mask, m, n, n, render::shape_string(a.shape)));
    if (a.kind() == 'f' || a.kind() == 'S')
      throw FileError(fmt::format("--mask {}: expected booleans or integers (true = forbidden), got dtype {}",
                                   args.mask, a.descr));
    const std::vector<int64_t> flags = to_int64(a, args.mask);
    mask.resize(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m * n; ++i) mask[static_cast<size_t>(i)] = flags[static_cast<size_t>(row ? i % n : i)] != 0;
  }
  const Attended r = attend(q, k, v, mask, args.causal);
  std::vector<double> sums(static_cast<size_t>(m), 0.0);
  for (int64_t i = 0; i < m * n; ++i) sums[static_cast<size_t>(i / n)] += r.weights[static_cast<size_t>(i)];
  fmt::print("веса: {} \n {}\n", shape_pair(m, n), rounded(r.weights, m, n));
  fmt::print("суммы строк: {}\n", numpy_str(sums, 6));
  fmt::print("выход: {} \n {}\n", shape_pair(m, v.cols), rounded(r.out, m, v.cols));
  if (!args.out.empty()) {
    write_npy(args.out, r.weights.data(), {m, n});
    fmt::print("wrote {} (float32 [{}, {}], rows = queries, columns = keys; draw it with attnkit render)\n", args.out,
               m, n);
  }
}

// Padding and causal masks through the engine's scaled_dot_product_attention (−1e9 fill):
// Q, K [n, d] (the user's or random, n = 4), V = the identity, the last token padding.
void demo_masks(const DemoArgs& args) {
  if (args.q.empty() != args.k.empty()) throw UsageError("demo masks: give --q and --k together (or neither)");
  Matrix q, k;
  if (!args.q.empty()) {
    q = load_matrix(args.q, "--q");
    k = load_matrix(args.k, "--k");
    if (k.rows != q.rows || k.cols != q.cols)
      throw FileError(fmt::format("demo masks: --q {} is {} and --k {} is {}: self-attention needs the same shape",
                                   args.q, render::shape_string({q.rows, q.cols}), args.k, render::shape_string({k.rows, k.cols})));
  } else {
    Rng rng(1);
    q = random_matrix(rng, 4, 8);
    k = random_matrix(rng, 4, 8);
    fmt::print("(random Q, K from attnkit's generator: the numbers differ from numpy's; the zeros are the point; the "
               "lesson's own arrays go in with --q Q.npy --k K.npy)\n");
  }
  const int64_t n = q.rows;
  Matrix v{std::vector<float>(static_cast<size_t>(n * n)), n, n};
  for (int64_t i = 0; i < n; ++i) v.values[static_cast<size_t>(i * n + i)] = 1.0f;
  std::vector<uint8_t> pad(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n * n; ++i) pad[static_cast<size_t>(i)] = i % n == n - 1;  // the last token is padding
  fmt::print("маска паддинга:\n {}\n", rounded(attend(q, k, v, pad, false).weights, n, n));
  fmt::print("причинная маска (нельзя смотреть вперёд):\n {}\n", rounded(attend(q, k, v, {}, true).weights, n, n));
}

// Translation alignment: the lesson's 5×7 weights, as a table and as links.
void demo_alignment(const std::string& out) {
  const std::vector<std::string> src = {"the", "black", "cat", "sat", "on", "the", "mat"};
  const std::vector<std::string> dst = {"чёрная", "кошка", "сидела", "на", "коврике"};
  const float W[5][7] = {
      {0.02f, 0.90f, 0.05f, 0.01f, 0.00f, 0.01f, 0.01f},
      {0.10f, 0.05f, 0.82f, 0.02f, 0.00f, 0.00f, 0.01f},
      {0.01f, 0.01f, 0.08f, 0.88f, 0.01f, 0.00f, 0.01f},
      {0.00f, 0.00f, 0.00f, 0.03f, 0.94f, 0.02f, 0.01f},
      {0.01f, 0.00f, 0.00f, 0.01f, 0.04f, 0.12f, 0.82f},
  };
  fmt::print("Куда смотрит переводчик (строки — слова перевода, столбцы — исходная фраза):\n{}", pad("", 9));
  for (const auto& s : src) fmt::print("{}", pad(s, 7, true));
  fmt::print("\n");
  for (size_t i = 0; i < dst.size(); ++i) {
    fmt::print("{}", pad(dst[i], 9));
    for (size_t j = 0; j < src.size(); ++j) fmt::print("{:7.2f}", W[i][j]);
    fmt::print("\n");
  }
  fmt::print("связи (вес ≥ 0.05):\n");
  for (size_t i = 0; i < dst.size(); ++i) {
    std::string links;
    for (size_t j = 0; j < src.size(); ++j)
      if (W[i][j] >= 0.05f) links += fmt::format("{}{} {:.2f}", links.empty() ? "" : ", ", src[j], W[i][j]);
    fmt::print("  {} ← {}\n", pad(dst[i], 8), links);
  }
  if (!out.empty()) {
    write_npy(out, &W[0][0], {5, 7});
    fmt::print("wrote {} (float32 [5, 7], rows = queries: {}; columns = keys: {})\n", out,
               "чёрная кошка сидела на коврике", "the black cat sat on the mat");
  }
}

}  // namespace

int run_demo(const DemoArgs& args) {
  const std::string& name = args.name;
  if (!args.out.empty() && name != "alignment" && name != "attention")
    throw UsageError("--out is only for 'demo attention' and 'demo alignment'");
  if ((!args.q.empty() || !args.k.empty()) && name != "attention" && name != "masks")
    throw UsageError("--q and --k are only for 'demo attention' and 'demo masks'");
  if ((!args.v.empty() || !args.mask.empty() || args.causal) && name != "attention")
    throw UsageError("--v, --mask and --causal are only for 'demo attention'");
  if (name == "lookup") demo_lookup();
  else if (name == "scaling") demo_scaling();
  else if (name == "attention") demo_attention(args);
  else if (name == "masks") demo_masks(args);
  else if (name == "alignment") demo_alignment(args.out);
  else throw UsageError("demo: unknown demo '" + name + "'");
  return 0;
}

}  // namespace attnkit::cli

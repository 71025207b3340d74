// attnkit demo: lesson 000's demonstrations, computed by attnkit and printed the way the
// lesson's numpy code prints them.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "engine/executor.h"
#include "engine/graph.h"
#include "engine/modules.h"
#include "engine/npy.h"
#include "engine/rng.h"
#include "ops/softmax.h"
#include "tools/commands.h"

namespace attnkit::cli {
namespace {

// numpy's str() of an array rounded with .round(decimals): shortest digits (up to 8 after the
// point), integer parts right-aligned, fractions left-aligned and padded to the longest.
std::string numpy_str(const std::vector<double>& values, int64_t rows, int64_t cols, int decimals) {
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
  std::string out = rows > 1 ? "[" : "";
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
  return out + (rows > 1 ? "]" : "");
}

std::string numpy_str(const std::vector<double>& v, int decimals) {
  return numpy_str(v, 1, static_cast<int64_t>(v.size()), decimals);
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

// Padding and causal masks through the engine's scaled_dot_product_attention (−1e9 fill).
void demo_masks() {
  const int64_t n = 4, d = 8;
  Graph g(1);
  Tensor q = g.input("Q", {n, d}, DType::kF32), k = g.input("K", {n, d}, DType::kF32);
  Tensor v = g.input("V", {n, n}, DType::kF32), mask = g.input("mask", {n, n}, DType::kU8);
  Attention padded = scaled_dot_product_attention(q, k, v, mask);
  Attention causal = scaled_dot_product_attention(q, k, v, {}, /*causal=*/true);
  g.keep(padded.weights);
  g.keep(causal.weights);
  Executor ex(g);
  Rng rng(1);
  for (Tensor t : {q, k})
    for (int64_t i = 0; i < n * d; ++i) ex.f32(t.id())[i] = static_cast<float>(rng.normal());
  for (int64_t i = 0; i < n * n; ++i) ex.f32(v.id())[i] = i / n == i % n ? 1.0f : 0.0f;
  for (int64_t i = 0; i < n * n; ++i) ex.u8(mask.id())[i] = i % n == n - 1;  // the last token is padding
  ex.forward();
  auto weights = [&](const Attention& a) {
    const float* w = ex.f32(a.weights.id());
    return numpy_str(std::vector<double>(w, w + n * n), n, n, 2);
  };
  fmt::print("(random Q, K from attnkit's generator: the numbers differ from numpy's; the zeros are the point)\n");
  fmt::print("маска паддинга:\n {}\n", weights(padded));
  fmt::print("причинная маска (нельзя смотреть вперёд):\n {}\n", weights(causal));
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

int run_demo(const std::string& name, const std::string& out) {
  if (!out.empty() && name != "alignment") throw UsageError("--out is only for 'demo alignment'");
  if (name == "lookup") demo_lookup();
  else if (name == "scaling") demo_scaling();
  else if (name == "masks") demo_masks();
  else if (name == "alignment") demo_alignment(out);
  else throw UsageError("demo: unknown demo '" + name + "'");
  return 0;
}

}  // namespace attnkit::cli

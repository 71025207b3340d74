// A plain double-precision forward of the lesson models (the reference the engine's
// gradients are checked against by finite differences).
#pragma once
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/lessons.h"

namespace attnkit::test {

struct RefParams {
  std::map<std::string, std::vector<double>> values;
  std::map<std::string, Shape> shapes;
  const std::vector<double>& operator[](const std::string& n) const { return values.at(n); }
  bool has(const std::string& n) const { return values.count(n) != 0; }
};

inline RefParams ref_params(const Graph& g, const float* flat) {
  RefParams p;
  for (const ParamInfo& info : g.params()) {
    p.values[info.name].assign(flat + info.offset, flat + info.offset + info.numel);
    p.shapes[info.name] = g.tensor(info.tensor).shape;
  }
  return p;
}

// y[rows, out] = x[rows, in]·W[in, out] + b
inline std::vector<double> ref_linear(const std::vector<double>& x, int64_t rows, int64_t in,
                                      const RefParams& p, const std::string& name, int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  const auto& w = p[name + ".weight"];
  const auto& b = p[name + ".bias"];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) s += x[static_cast<size_t>(r * in + i)] * w[static_cast<size_t>(i * out + o)];
      y[static_cast<size_t>(r * out + o)] = s;
    }
  return y;
}

// LayerNorm over the last dim (eps 1e-5) with parameters name.weight / name.bias.
inline std::vector<double> ref_layernorm(const std::vector<double>& h, int64_t rows, int64_t D,
                                         const RefParams& p, const std::string& name) {
  std::vector<double> n(h.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t d = 0; d < D; ++d) mean += h[static_cast<size_t>(r * D + d)];
    mean /= static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d) var += std::pow(h[static_cast<size_t>(r * D + d)] - mean, 2);
    var /= static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d)
      n[static_cast<size_t>(r * D + d)] = (h[static_cast<size_t>(r * D + d)] - mean) / std::sqrt(var + 1e-5) *
                                              p[name + ".weight"][static_cast<size_t>(d)] +
                                          p[name + ".bias"][static_cast<size_t>(d)];
  }
  return n;
}

// Mean cross-entropy of the model on one batch [batch, T].
inline double ref_loss(const ModelConfig& c, const RefParams& p, const std::vector<int32_t>& ids,
                       const std::vector<int32_t>& targets, int64_t batch) {
  const int64_t T = c.seq_len, D = c.d_model, H = c.heads, dh = D / H, rows = batch * T;
  std::vector<double> h(static_cast<size_t>(rows * D));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) {
      double v = p["tok.weight"][static_cast<size_t>(ids[static_cast<size_t>(r)] * D + d)];
      if (c.positions) v += p["pos.weight"][static_cast<size_t>((r % T) * D + d)];
      h[static_cast<size_t>(r * D + d)] = v;
    }
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string prefix = layer_prefix(c, l), name = prefix + "attn";
    const std::vector<double> x = c.pre_norm ? ref_layernorm(h, rows, D, p, prefix + "ln1") : h;
    auto q = ref_linear(x, rows, D, p, name + ".q", D);
    auto k = ref_linear(x, rows, D, p, name + ".k", D);
    auto v = ref_linear(x, rows, D, p, name + ".v", D);
    std::vector<double> a(static_cast<size_t>(rows * D), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> s(static_cast<size_t>(T));
          double mx = -1e300;
          for (int64_t j = 0; j < T; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < dh; ++e)
              dot += q[static_cast<size_t>((b * T + i) * D + hh * dh + e)] * k[static_cast<size_t>((b * T + j) * D + hh * dh + e)];
            s[static_cast<size_t>(j)] = (c.causal && j > i) ? -1e9 : dot * scale;
            mx = std::max(mx, s[static_cast<size_t>(j)]);
          }
          double sum = 0;
          for (auto& x : s) sum += (x = std::exp(x - mx));
          for (int64_t e = 0; e < dh; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < T; ++j) acc += s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((b * T + j) * D + hh * dh + e)];
            a[static_cast<size_t>((b * T + i) * D + hh * dh + e)] = acc;
          }
        }
    auto o = ref_linear(a, rows, D, p, name + ".o", D);
    for (size_t i = 0; i < h.size(); ++i) h[i] += o[i];
    if (c.block_mlp > 0) {
      const std::vector<double> y = c.pre_norm ? ref_layernorm(h, rows, D, p, prefix + "ln2") : h;
      auto z = ref_linear(y, rows, D, p, prefix + "mlp.0", c.block_mlp);
      for (auto& e : z) e = e > 0 ? e : 0;
      auto f = ref_linear(z, rows, c.block_mlp, p, prefix + "mlp.2", D);
      for (size_t i = 0; i < h.size(); ++i) h[i] += f[i];
    }
  }
  std::vector<double> logits;
  if (c.head == HeadKind::kMlp) {
    auto z = ref_linear(h, rows, D, p, "head.0", c.mlp_hidden);
    for (auto& x : z) x = x > 0 ? x : 0;
    logits = ref_linear(z, rows, c.mlp_hidden, p, "head.2", c.classes);
  } else {
    const std::vector<double> n = ref_layernorm(h, rows, D, p, "head.0");
    logits = ref_linear(n, rows, D, p, "head.1", c.classes);
  }
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t t = targets[static_cast<size_t>(r)];
    if (t < 0) continue;
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < c.classes; ++j) mx = std::max(mx, logits[static_cast<size_t>(r * c.classes + j)]);
    for (int64_t j = 0; j < c.classes; ++j) sum += std::exp(logits[static_cast<size_t>(r * c.classes + j)] - mx);
    total += std::log(sum) + mx - logits[static_cast<size_t>(r * c.classes + t)];
    ++counted;
  }
  return counted ? total / static_cast<double>(counted) : 0.0;
}

}  // namespace attnkit::test

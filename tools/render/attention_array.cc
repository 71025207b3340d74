#include "tools/render/attention_array.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/error.h"
#include "engine/file_bytes.h"

namespace attnkit::render {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<float> finite_weights(const NpyArray& a, const std::string& what) {
  if (a.kind() != 'f')
    throw FileError(what + ": dtype " + printable(a.descr) +
                    " is not a float type; attention weights are floats (rows of softmax)");
  std::vector<float> w = to_float32(a, what);
  const size_t r = a.shape.size();
  const int64_t cols = r >= 1 ? std::max<int64_t>(1, a.shape[r - 1]) : 1;
  const int64_t rows = r >= 2 ? std::max<int64_t>(1, a.shape[r - 2]) : 1;
  for (size_t i = 0; i < w.size(); ++i)
    if (!std::isfinite(w[i])) {
      const int64_t k = static_cast<int64_t>(i), row = k / cols % rows, col = k % cols;
      const std::string where = " at query " + std::to_string(row) + ", key " + std::to_string(col) + " (map " +
                                std::to_string(k / (rows * cols)) + ")";
      double stored = w[i];  // a float64 file's own value (finite, but beyond float32)
      if (a.descr == "<f8") std::memcpy(&stored, a.bytes.data() + i * 8, 8);
      if (std::isfinite(stored)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", stored);
        throw FileError(what + ": weight " + buf + where + " is outside float32's range");
      }
      throw FileError(what + ": weight " + std::to_string(w[i]) + where + " is not finite");
    }
  return w;
}

AttentionArray attention_from_npy(const NpyArray& a, const std::string& what) {
  const std::string shape = shape_string(a.shape);
  if (a.kind() != 'f')
    throw FileError(what + ": dtype " + printable(a.descr) +
                    " is not a float type; attention weights are floats (rows of softmax)");
  if (a.shape.size() < 2 || a.shape.size() > 4)
    throw FileError(what + ": shape " + shape + " has rank " + std::to_string(a.shape.size()) +
                    "; attention is [T_q, T_k], [heads, T_q, T_k] or [layers, heads, T_q, T_k]" +
                    (a.shape.size() == 5 ? " (an [N, layers, heads, T, T] array — infer --data's attention.npy, a run's "
                                           "snapshots.npy: draw one entry with --index K, or render the run folder)"
                                         : ""));
  for (int64_t d : a.shape)
    if (d <= 0) throw FileError(what + ": shape " + shape + " has an empty axis");
  AttentionArray out;
  out.rank = static_cast<int>(a.shape.size());
  const size_t r = a.shape.size();
  out.rows = a.shape[r - 2], out.cols = a.shape[r - 1];
  if (r >= 3) out.heads = a.shape[r - 3];
  if (r == 4) out.layers = a.shape[0];
  if (out.rows > kMaxMapSide || out.cols > kMaxMapSide)
    throw FileError(what + ": shape " + shape + ": maps larger than " + std::to_string(kMaxMapSide) + " x " +
                    std::to_string(kMaxMapSide) + " are not drawn");
  if (a.numel() > kMaxAttentionWeights)
    throw FileError(what + ": shape " + shape + " holds " + std::to_string(a.numel()) + " weights; at most " +
                    std::to_string(kMaxAttentionWeights) + " (4 maps of 4096 x 4096) are drawn — pick layers or heads "
                    "in numpy first");
  out.weights = finite_weights(a, what);
  return out;
}

AttentionArray read_attention(const std::string& path) {
  // Float64 weights within the limit, plus a header, take at most this many bytes.
  constexpr uintmax_t kMaxFileBytes = static_cast<uintmax_t>(kMaxAttentionWeights) * 8 + (1 << 20);
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (!ec && bytes > kMaxFileBytes)
    throw FileError(path + ": " + std::to_string(bytes) + " bytes is larger than an attention array of at most " +
                    std::to_string(kMaxAttentionWeights) + " weights (4 maps of 4096 x 4096) as float64");
  return attention_from_npy(read_npy(path), path);
}

std::vector<std::string> attention_warnings(const AttentionArray& a, const std::string& what) {
  std::vector<std::string> warnings;
  int64_t outside = 0, bad_rows = 0, worst_row = -1;
  double lo = 0, hi = 1, worst_sum = 1;
  const int64_t n_rows = a.layers * a.heads * a.rows;
  for (int64_t r = 0; r < n_rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < a.cols; ++c) {
      const double w = a.weights[static_cast<size_t>(r * a.cols + c)];
      sum += w;
      if (w < 0 || w > 1) ++outside, lo = std::min(lo, w), hi = std::max(hi, w);
    }
    if (std::fabs(sum - 1) > 0.01) {
      if (worst_row < 0 || std::fabs(sum - 1) > std::fabs(worst_sum - 1)) worst_row = r, worst_sum = sum;
      ++bad_rows;
    }
  }
  char buf[512];
  if (outside > 0) {
    std::snprintf(buf, sizeof buf,
                  "%s: %lld weights lie outside [0, 1] (from %.4g to %.4g); the colour scale is fixed to 0..1, so "
                  "they are drawn clamped — is this a map of scores before the softmax?",
                  what.c_str(), static_cast<long long>(outside), lo, hi);
    warnings.push_back(buf);
  }
  if (bad_rows > 0) {
    const int64_t map = worst_row / a.rows, row = worst_row % a.rows;
    std::snprintf(buf, sizeof buf,
                  "%s: %lld of %lld rows do not sum to 1 (query %lld of map %lld sums to %.4g); attention rows "
                  "(queries) should each sum to 1 — is the array transposed, or not a softmax?",
                  what.c_str(), static_cast<long long>(bad_rows), static_cast<long long>(n_rows),
                  static_cast<long long>(row), static_cast<long long>(map), worst_sum);
    warnings.push_back(buf);
  }
  return warnings;
}

}  // namespace attnkit::render

// Attention maps from a .npy file, whoever wrote it (attnkit, or numpy holding a PyTorch or
// HuggingFace model's attentions): [Tq, Tk], [heads, Tq, Tk] or [layers, heads, Tq, Tk],
// rows = queries, columns = keys.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/npy.h"

namespace attnkit::render {

struct AttentionArray {
  int64_t layers = 1, heads = 1, rows = 0, cols = 0;
  int rank = 4;                 // rank as stored (2, 3 or 4)
  std::vector<float> weights;   // [layers, heads, rows, cols]

  const float* map(int64_t layer, int64_t head) const { return weights.data() + (layer * heads + head) * rows * cols; }
  int64_t map_size() const { return rows * cols; }
};

// The largest arrays drawn: maps up to 4096 × 4096, and up to 2^26 weights in all (four such
// maps, 256 MiB as float32), which bounds what reading and drawing one take in memory.
constexpr int64_t kMaxMapSide = 4096;
constexpr int64_t kMaxAttentionWeights = int64_t(1) << 26;

// Checks and converts: float dtype ('<f4', '<f8'), rank 2–4, no empty axis, within the limits
// above, finite values. Anything else is a FileError naming `what`, the shape and what is
// expected. read_attention refuses files too large for the limits before reading them.
// An attention array's weights ([..., queries, keys], any rank) as float32: a float dtype and
// every weight finite, else a FileError naming the map, query and key (and a float64 weight
// beyond float32's range as such). What attention_from_npy and a run folder's arrays use.
std::vector<float> finite_weights(const NpyArray& a, const std::string& what);
AttentionArray attention_from_npy(const NpyArray& a, const std::string& what);
AttentionArray read_attention(const std::string& path);

// What makes an array look unlike attention, one sentence each (empty if it looks fine):
// weights outside [0, 1], rows that do not sum to 1 (within 0.01).
std::vector<std::string> attention_warnings(const AttentionArray& a, const std::string& what);

// "[2, 1, 10, 10]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace attnkit::render

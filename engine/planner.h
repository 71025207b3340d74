// The memory planner: every intermediate of a graph (forward and backward) gets an offset in
// one arena, by liveness over the execution order. Buffers are placed largest first, each at
// the lowest offset that overlaps no buffer alive at the same time (TensorFlow Lite Micro's
// greedy planner); an op may write in place over an input whose last use it is.
#pragma once
#include <cstdint>
#include <vector>

#include "graph.h"

namespace attnkit {

constexpr int64_t kArenaAlignment = 64;

// How a graph is planned. Default: every batched tensor at the graph's max_batch rows, kept
// tensors in the arena. A chunked plan (Executor: inference graphs run large batches a few rows
// at a time, see ExecutorOptions::chunk_bytes) sizes the arena's batched tensors for `rows`
// rows and places the batched kept tensors (the results) outside it, at max_batch rows each,
// in a block of their own, so that every chunk writes its rows of the results in place.
struct PlanOptions {
  // Rows of the batched arena tensors; 0: the graph's max_batch (not chunked). max_batch
  // itself is a chunked plan of one chunk (the results outside the arena, an inference
  // graph's weights-only results kept to the end of the run).
  int64_t rows = 0;
};

struct MemoryPlan {
  int64_t rows = 0;               // PlanOptions::rows (0: not chunked)
  int64_t arena_bytes = 0;        // size of the arena
  int64_t lower_bound_bytes = 0;  // peak of bytes alive at once: no plan can be smaller
  // Per tensor id: byte offset in the arena, -1 for tensors not in the arena.
  std::vector<int64_t> offsets;
  // Per tensor id: [first, last] node index during which it must keep its bytes (-1 if not
  // in the arena). Tensors sharing a buffer in place share one interval.
  std::vector<int64_t> first_use, last_use;
  std::vector<int> buffer;        // per tensor id: its buffer (shared by in-place pairs), -1 if none
  int64_t in_place_count = 0;     // buffers reused in place
  // Chunked plans: per tensor id, the byte offset of a batched kept tensor in the results
  // block (-1 for every other tensor), and that block's size.
  std::vector<int64_t> kept_offsets;
  int64_t kept_bytes = 0;
  // Bytes of t in the arena: its full size, or for a chunked plan's batched tensors `rows` rows.
  int64_t bytes(const Graph& g, TensorId t) const;
};

MemoryPlan plan_memory(const Graph& g, const PlanOptions& options = {});

// Throws if two arena tensors alive at the same node overlap in memory (excluding in-place
// pairs, which share a buffer by design). Used by tests.
void check_plan(const Graph& g, const MemoryPlan& plan);

}  // namespace attnkit

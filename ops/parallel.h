// Work splitting shared by every kernel: a kernel is told which slice of the threads it is
// (index, count) and does only its share. The engine runs one OpenMP parallel region per
// graph run and passes each thread its slice; standalone callers pass the default {0, 1}.
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>

namespace attnkit {

// A counter the threads of one kernel call share to hand out tasks dynamically (each
// fetch_add takes the next task), on its own cache line.
struct alignas(64) TaskCounter {
  std::atomic<int64_t> next{0};
};

// Task counters the engine gives each node (see Slice::tasks).
inline constexpr int kNodeTaskCounters = 2;

struct Slice {
  int index = 0;  // this thread, 0 <= index < count
  int count = 1;  // threads sharing the work
  // When set (by the engine, with count > 1): kNodeTaskCounters counters at zero when the
  // node starts, shared by all `count` slices of this node run. A kernel may then hand its
  // work out dynamically instead of by index — a thread slowed down by other work on the
  // machine leaves its share to the others — as long as every value is computed the same
  // way whatever thread computes it. Kernels that split by index ignore it.
  TaskCounter* tasks = nullptr;
  // Mixed precision (ExecutorOptions::precision): the matrix products this slice runs take
  // bf16 inputs with float32 sums (ops/gemm_bf16.h) where their shape makes it pay. Set by
  // the engine only when this CPU has a bf16 kernel.
  bool bf16 = false;

  // This slice with counter i (< kNodeTaskCounters) first: for a second dynamic kernel call
  // in the same node.
  Slice with_counter(int i) const { return Slice{index, count, tasks ? tasks + i : nullptr, bf16}; }
  bool dynamic() const { return tasks != nullptr && count > 1; }
};

// Contiguous, balanced share [begin, end) of n items for slice s. Slices cover [0, n) exactly.
inline std::pair<int64_t, int64_t> slice_range(int64_t n, Slice s) {
  const int64_t base = n / s.count, extra = n % s.count;
  const int64_t begin = s.index * base + (s.index < extra ? s.index : extra);
  return {begin, begin + base + (s.index < extra ? 1 : 0)};
}

// Like slice_range, but pieces are whole multiples of `grain` items (the last may be short),
// so that blocked kernels keep their blocks whole.
inline std::pair<int64_t, int64_t> slice_range_grain(int64_t n, int64_t grain, Slice s) {
  const int64_t blocks = (n + grain - 1) / grain;
  auto [b0, b1] = slice_range(blocks, s);
  const int64_t begin = b0 * grain, end = b1 * grain;
  return {begin < n ? begin : n, end < n ? end : n};
}

}  // namespace attnkit

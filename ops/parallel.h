// Work splitting shared by every kernel: a kernel is told which slice of the threads it is
// (index, count) and does only its share. The engine runs one OpenMP parallel region per
// graph run and passes each thread its slice; standalone callers pass the default {0, 1}.
#pragma once
#include <cstdint>
#include <utility>

namespace attnkit {

struct Slice {
  int index = 0;  // this thread, 0 <= index < count
  int count = 1;  // threads sharing the work
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

#include "finite.h"

#include <cstring>

namespace attnkit {
namespace {

constexpr uint32_t kExponent = 0x7f800000u;  // all ones: Inf (mantissa 0) or NaN

// Adding one exponent step to the exponent field carries into the sign bit only when the
// field is all ones, so OR-ing those sums has bit 31 set iff some element is non-finite.
// Plain integer and/add/or: the compiler vectorizes it with SSE2 already.
bool any_nonfinite(const float* x, int64_t n) {
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    acc |= (bits & kExponent) + 0x00800000u;
  }
  return (acc & 0x80000000u) != 0;
}

}  // namespace

int64_t first_nonfinite(const float* x, int64_t n) {
  constexpr int64_t kBlock = 256;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t len = n - start < kBlock ? n - start : kBlock;
    if (!any_nonfinite(x + start, len)) continue;
    for (int64_t i = start; i < start + len; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, 4);
      if ((bits & kExponent) == kExponent) return i;
    }
  }
  return -1;
}

}  // namespace attnkit

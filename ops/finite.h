// Finding NaN and Inf in a block of floats: the trainer checks the loss, every gradient and
// every parameter after each step, so the check must cost little next to the step itself.
#pragma once
#include <cstdint>

namespace attnkit {

// Index of the first NaN or ±Inf in x[0, n), or −1 when all are finite. Blocks of 256 are
// first screened with integer operations on the exponent bits (vectorized by the compiler);
// only a block that holds a non-finite value is searched element by element.
int64_t first_nonfinite(const float* x, int64_t n);

}  // namespace attnkit

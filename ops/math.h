// Elementwise math over broadcast operands and sums over some dims, for the primitive ops of
// engine/functional.h (engine/op_math.cc, engine/op_reduce.cc).
#pragma once
#include <cstdint>

#include "parallel.h"

namespace attnkit {

// An iteration space of up to 4 dims (row-major, the last innermost) and, for up to 3
// operands, each operand's element stride along each dim; stride 0: the operand is broadcast
// along that dim. The output of an elementwise kernel (and the input of a sum) is contiguous
// over the space.
struct Strided {
  static constexpr int kMaxOperands = 3;
  int rank = 0;
  int64_t dims[4] = {1, 1, 1, 1};
  int64_t stride[kMaxOperands][4] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[i];
    return n;
  }
};

// Drops dims of size 1 and merges neighbouring dims along which every operand steps
// contiguously (or is broadcast along both), so that a plain elementwise op over equal shapes
// is one dim and a bias-like broadcast two. Operands beyond `operands` are ignored.
Strided coalesce(const Strided& s, int operands);

// The function an elementwise kernel applies, lane by lane. a, b, c are the operands in
// order, s the scalar.
enum class MathFn : uint8_t {
  kCopy,         // a
  kAdd,          // a + b
  kSub,          // a − b
  kMul,          // a · b
  kDiv,          // a / b
  kAddScalar,    // a + s
  kMulScalar,    // a · s
  kRsubScalar,   // s − a
  kDivScalar,    // a / s
  kRdivScalar,   // s / a
  kExp,          // e^a
  kLog,          // ln a
  kTanh,         // tanh a
  kSigmoid,      // 1 / (1 + e^−a)
  kGelu,         // a · Φ(a), Φ the standard normal CDF (PyTorch's default, erf form)
  kTanhBackward,     // a · (1 − b²): a = dy, b = tanh(x)
  kSigmoidBackward,  // a · b · (1 − b): a = dy, b = sigmoid(x)
  kGeluBackward,     // a · (Φ(b) + b·φ(b)): a = dy, b = x
  kDivBackward,      // −(a · b) / c: a = dy, b = y = p / q, c = q (d(p/q)/dq = −y/q)
};

// out[i] = (accumulate ? out[i] : 0) + fn(a[i], b[i], c[i], scalar) over the space `s` (out
// contiguous, operands through their strides; unused operands may be null). out may alias an
// operand with the same layout as out. Slices split the elements; a value's bits do not depend
// on the slicing.
void elementwise(MathFn fn, const Strided& s, const float* a, const float* b, const float* c,
                 float scalar, float* out, bool accumulate, Slice sl = {});

// out (+)= (scale · Σ x) / divisor, summed over the dims along which out's stride (operand 0
// of `s`) is 0; x is contiguous over the space and out contiguous over the other dims. Each
// output element sums its terms in one fixed order, and slices split the output elements, so
// the bits do not depend on the thread count.
void reduce_sum(const Strided& s, const float* x, float scale, float divisor, float* out,
                bool accumulate, Slice sl = {});

}  // namespace attnkit

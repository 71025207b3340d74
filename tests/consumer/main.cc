// Uses the installed library the way a C++ developer would; exits non-zero on a wrong result.
#include <attnkit/attnkit.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  // 2×3 · 3×2 product against a hand-computed result.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  std::vector<float> c(4, NAN);
  attnkit::sgemm(false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f, c.data(), 2);
  const float want[4] = {58, 64, 139, 154};
  for (int i = 0; i < 4; ++i) {
    if (c[i] != want[i]) { std::printf("sgemm wrong at %d: %g\n", i, c[i]); return 1; }
  }
  // A masked softmax row: the forbidden score gets no weight.
  const float x[3] = {1.0f, 2.0f, 3.0f};
  const uint8_t mask[3] = {0, 0, 1};
  float y[3];
  attnkit::SoftmaxMask m;
  m.data = mask;
  attnkit::softmax_forward(x, y, 1, 1, 3, 1.0f, m);
  if (std::fabs(y[0] + y[1] - 1.0f) > 1e-6f || y[2] != 0.0f) { std::printf("softmax wrong\n"); return 1; }
  std::printf("consumer ok (%s)\n", attnkit::simd_target_name());
  return 0;
}

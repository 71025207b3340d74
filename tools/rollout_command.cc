// attnkit rollout: attention rollout of any [layers, heads, T, T] .npy (ours or PyTorch's).
#include <cmath>

#include <fmt/core.h>

#include "engine/error.h"
#include "engine/npy.h"
#include "models/rollout.h"
#include "tools/commands.h"

namespace attnkit::cli {

int run_rollout(const std::string& input, const std::string& output) {
  const NpyArray a = read_npy(input);
  const auto& s = a.shape;
  if (s.size() != 4 || s[2] != s[3] || s[0] < 1 || s[1] < 1 || s[2] < 1) {
    std::string shape;
    for (int64_t d : s) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw FileError(input + ": shape (" + shape + ") is not [layers, heads, T, T]");
  }
  if (a.kind() != 'f') throw FileError(input + ": dtype " + a.descr + " is not a float type");
  if (s[2] > kMaxRolloutT)
    throw FileError(input + ": T = " + std::to_string(s[2]) + " is over rollout's limit of " +
                    std::to_string(kMaxRolloutT) + " (each layer is a [T, T] · [T, T] product)");
  const std::vector<double> maps = to_float64(a, input);
  for (size_t i = 0; i < maps.size(); ++i)
    if (!(maps[i] >= 0) || !std::isfinite(maps[i]))
      throw FileError(input + ": element " + std::to_string(i) + " = " + std::to_string(maps[i]) +
                      " is not a finite non-negative attention weight");
  const std::vector<float> r = attention_rollout(maps.data(), s[0], s[1], s[2]);
  write_npy(output, r.data(), {s[2], s[2]});
  fmt::print("rollout of {} layers × {} heads, T = {}: wrote {} (float32 [{}, {}], rows sum to 1)\n", s[0], s[1], s[2],
             output, s[2], s[2]);
  return 0;
}

}  // namespace attnkit::cli

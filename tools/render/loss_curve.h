// The loss curve: loss per training step with axes, ticks and grid lines; over many steps a
// moving average is drawn on top of the (lighter) per-step losses.
#pragma once
#include <string>
#include <vector>

#include "tools/render/figure.h"

namespace attnkit::render {

struct LossCurveOptions {
  std::string title = "Training loss";
  std::string x_caption = "step", y_caption = "loss";
  std::vector<std::pair<double, std::string>> markers;  // vertical marks at steps, e.g. snapshots
};

// losses[k] is the loss of step k + 1. Non-finite losses are skipped (the line breaks there).
Figure loss_curve_figure(const std::vector<float>& losses, const LossCurveOptions& options);

// Ticks at "round" values (1, 2 or 5 times a power of ten) covering [lo, hi], about `count`.
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace attnkit::render

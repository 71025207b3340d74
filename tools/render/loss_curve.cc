#include "tools/render/loss_curve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/error.h"

namespace attnkit::render {
namespace {

constexpr double kPad = 16;
constexpr TextStyle kTitle{17, true}, kCaption{13, false}, kTick{11, false}, kLegend{12, false};
constexpr Color kRaw{158, 202, 225}, kSmooth{8, 81, 156}, kMarker{214, 39, 40};

double nice_step(double range, int count) {
  const double raw = range / std::max(1, count);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

std::string tick_label(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo)) hi = lo + 1;
  const double step = nice_step(hi - lo, count);
  std::vector<double> ticks;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return ticks;
}

Figure loss_curve_figure(const std::vector<float>& losses, const LossCurveOptions& o) {
  const double plot_w = 640, plot_h = 300;
  double hi = 0;
  size_t finite = 0;
  for (float l : losses)
    if (std::isfinite(l)) hi = std::max(hi, static_cast<double>(l)), ++finite;
  if (finite == 0) hi = 1;
  // The y axis starts at 0: a cross-entropy is never below it, and the eye reads the drop.
  const double y_step = nice_step(hi, 5);
  const double y_max = std::ceil(hi / y_step - 1e-9) * y_step;
  const double n = static_cast<double>(std::max<size_t>(losses.size(), 1));
  const std::vector<double> xt = nice_ticks(0, n, 6), yt = nice_ticks(0, y_max, 5);
  double ytick_w = 0;
  for (double v : yt) ytick_w = std::max(ytick_w, text_width(tick_label(v, y_step), kTick));
  // Title and captions shrink and wrap to fit the picture (title) or the plot (captions).
  const double caption_line = std::ceil(kCaption.size * 1.3);
  const TextBlock x_caption = fit_text(o.x_caption, kCaption, plot_w, 9);
  const TextBlock y_caption = fit_text(o.y_caption, kCaption, plot_h, 9);
  const double x0 = kPad + std::max(caption_line, y_caption.height()) + 6 + ytick_w + 8;
  const double width = std::ceil(x0 + plot_w + kPad + 12);
  const TextBlock title = fit_text(o.title, kTitle, width - 2 * kPad, 11);
  const double title_h = title.lines.empty() ? 0 : title.height() + 10;
  const double y0 = kPad + title_h + 8;
  const double x_caption_top = y0 + plot_h + 8 + std::ceil(kTick.size * 1.3) + 4;
  Figure f(width, std::ceil(x_caption_top + std::max(caption_line, x_caption.height()) + 2 + kPad));
  auto X = [&](double step) { return x0 + step / n * plot_w; };
  auto Y = [&](double loss) { return y0 + plot_h - loss / y_max * plot_h; };
  f.text_block(std::clamp(x0 + plot_w / 2, kPad + title.width() / 2, std::max(kPad, width - kPad - title.width() / 2)),
               kPad, title, kInk, Anchor::kMiddle);
  for (double v : yt) {
    f.line(x0, Y(v), x0 + plot_w, Y(v), 1, kGrid);
    f.text(x0 - 8, Y(v) + text_ascent(kTick) / 2, tick_label(v, y_step), kTick, kMuted, Anchor::kEnd);
  }
  const double x_step = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double v : xt) {
    f.line(X(v), y0 + plot_h, X(v), y0 + plot_h + 4, 1, kMuted);
    f.text(X(v), y0 + plot_h + 8 + text_ascent(kTick), tick_label(v, x_step), kTick, kMuted, Anchor::kMiddle);
  }
  f.line(x0, y0 + plot_h, x0 + plot_w, y0 + plot_h, 1, kMuted);
  f.line(x0, y0, x0, y0 + plot_h, 1, kMuted);
  f.text_block(x0 + plot_w / 2, x_caption_top, x_caption, kMuted, Anchor::kMiddle);
  f.text_block(y0 + plot_h / 2, kPad, y_caption, kMuted, Anchor::kMiddle, true);
  for (const auto& [step, name] : o.markers) {
    if (step < 0 || step > n) continue;
    f.line(X(step), y0, X(step), y0 + plot_h, 1, Color{kMarker.r, kMarker.g, kMarker.b, 90});
    // Right of the mark, or left of it where the name would pass the picture's edge.
    const std::string shown = elide(name, kTick, plot_w / 2);
    const bool left = X(step) + 3 + text_width(shown, kTick) > width - kPad;
    f.text(left ? X(step) - 3 : X(step) + 3, y0 + text_ascent(kTick), shown, kTick, kMarker,
           left ? Anchor::kEnd : Anchor::kStart);
  }
  // Per-step losses (broken at non-finite values); a trailing moving average over many steps.
  const size_t window = losses.size() >= 60 ? std::max<size_t>(5, losses.size() / 40) | 1 : 0;  // odd
  std::vector<std::pair<double, double>> pts;
  auto flush = [&](Color c, double width) {
    if (pts.size() == 1) f.circle(pts[0].first, pts[0].second, width, c);
    if (pts.size() > 1) f.polyline(pts, width, c, "loss");
    pts.clear();
  };
  for (size_t k = 0; k < losses.size(); ++k) {
    if (!std::isfinite(losses[k])) {
      flush(window ? kRaw : kSmooth, window ? 1 : 2);
      continue;
    }
    pts.emplace_back(X(static_cast<double>(k + 1)), Y(losses[k]));
  }
  flush(window ? kRaw : kSmooth, window ? 1 : 2);
  if (window) {
    // Centred (not trailing) mean, so the smooth curve does not lag behind the steps.
    std::vector<double> sum(losses.size() + 1, 0.0), count(losses.size() + 1, 0.0);
    for (size_t k = 0; k < losses.size(); ++k) {
      const bool ok = std::isfinite(losses[k]);
      sum[k + 1] = sum[k] + (ok ? losses[k] : 0.0), count[k + 1] = count[k] + ok;
    }
    const size_t half = window / 2;
    for (size_t k = half; k + half < losses.size(); ++k) {
      const double c = count[k + half + 1] - count[k - half];
      if (c > 0) pts.emplace_back(X(static_cast<double>(k + 1)), Y((sum[k + half + 1] - sum[k - half]) / c));
    }
    flush(kSmooth, 2.2);
    // Legend, top right inside the plot.
    const std::string a = "per step", b = "mean of " + std::to_string(window) + " steps";
    const double lw = 22 + text_width(a, kLegend) + 16 + 22 + text_width(b, kLegend);
    double lx = x0 + plot_w - lw - 8;
    const double ly = y0 + 14;
    f.rect(lx - 8, ly - 12, lw + 16, 24, Color{255, 255, 255, 230});
    f.line(lx, ly, lx + 16, ly, 1.5, kRaw);
    f.text(lx + 22, ly + text_ascent(kLegend) / 2, a, kLegend, kInk);
    lx += 22 + text_width(a, kLegend) + 16;
    f.line(lx, ly, lx + 16, ly, 2.2, kSmooth);
    f.text(lx + 22, ly + text_ascent(kLegend) / 2, b, kLegend, kInk);
  }
  return f;
}

}  // namespace attnkit::render

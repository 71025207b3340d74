#include "tools/render/links.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/error.h"
#include "tools/render/heatmap.h"

namespace attnkit::render {
namespace {

constexpr double kPad = 16;
constexpr TextStyle kTitle{17, true}, kPanelTitle{13, true}, kCaption{12, false};

std::vector<std::string> labels_or_positions(const std::vector<std::string>& labels, int64_t n, const char* what) {
  if (labels.empty()) {
    std::vector<std::string> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
    return out;
  }
  if (static_cast<int64_t>(labels.size()) != n)
    throw Error(std::string("link diagram: ") + std::to_string(labels.size()) + " " + what + " labels for " +
                std::to_string(n) + " " + what + "s");
  return labels;
}

// Compared in float: a weight stored as 0.01f (just below 0.01) is drawn at min_weight 0.01.
bool drawn(float w, double min_weight) { return std::isfinite(w) && w >= static_cast<float>(min_weight); }

}  // namespace

double effective_min_weight(const LinkOptions& o, int64_t rows, int64_t cols) {
  return o.min_weight >= 0 ? o.min_weight : std::max(rows, cols) > 32 ? 0.05 : 0.01;
}

int64_t count_links(const std::vector<LinkPanel>& panels, int64_t rows, int64_t cols, double min_weight) {
  int64_t n = 0;
  for (const auto& p : panels)
    for (const auto& [w, head] : p.maps)
      for (int64_t k = 0; k < rows * cols; ++k) n += drawn(w[k], min_weight);
  return n;
}

Figure link_figure(const std::vector<LinkPanel>& panels, int64_t grid_cols, int64_t rows, int64_t cols,
                   const std::vector<std::string>& query_labels, const std::vector<std::string>& key_labels,
                   const LinkOptions& o) {
  if (panels.empty() || rows <= 0 || cols <= 0 || grid_cols <= 0)
    throw Error("link diagram: nothing to draw");
  const double min_weight = effective_min_weight(o, rows, cols);
  const std::vector<std::string> ql = labels_or_positions(query_labels, rows, "query");
  const std::vector<std::string> kl = labels_or_positions(key_labels, cols, "key");
  const int64_t n = std::max(rows, cols);
  const double row_h = std::clamp(std::floor(360.0 / static_cast<double>(n)), 11.0, 26.0);
  const TextStyle label{std::min(14.0, row_h * 0.6), false};
  double left_w = text_width(o.left_caption, kCaption), right_w = text_width(o.right_caption, kCaption);
  for (const auto& s : ql) left_w = std::max(left_w, text_width(s, label));
  for (const auto& s : kl) right_w = std::max(right_w, text_width(s, label));
  const double span = n > 32 ? 220 : 170;  // horizontal room for the links
  bool legend = false;
  for (const auto& p : panels) legend |= p.maps.size() > 1;
  const double panel_w = left_w + 8 + span + 8 + right_w;
  bool panel_titles = false;
  for (const auto& p : panels) panel_titles |= !p.title.empty();
  const double panel_title_h = panel_titles ? std::ceil(kPanelTitle.size * 1.3) + 4 : 0;
  const double header_h = panel_title_h + std::ceil(kCaption.size * 1.3) + 4;
  const double legend_h = legend ? 26 : 0;
  const double panel_h = header_h + static_cast<double>(n) * row_h + legend_h;
  grid_cols = std::min<int64_t>(grid_cols, static_cast<int64_t>(panels.size()));
  const int64_t grid_rows = (static_cast<int64_t>(panels.size()) + grid_cols - 1) / grid_cols;
  const double gap_x = 40, gap_y = 24;
  const double title_h = o.title.empty() ? 0 : std::ceil(kTitle.size * 1.25) + 12;
  const double grid_w = static_cast<double>(grid_cols) * (panel_w + gap_x) - gap_x;
  Figure f(std::ceil(2 * kPad + grid_w),
           std::ceil(2 * kPad + title_h + static_cast<double>(grid_rows) * (panel_h + gap_y) - gap_y));
  if (!o.title.empty()) f.text(kPad + grid_w / 2, kPad + text_ascent(kTitle), o.title, kTitle, kInk, Anchor::kMiddle);
  const double mid = (text_ascent(label) - text_descent(label)) / 2;
  for (size_t k = 0; k < panels.size(); ++k) {
    const LinkPanel& p = panels[k];
    const double px = kPad + static_cast<double>(static_cast<int64_t>(k) % grid_cols) * (panel_w + gap_x);
    const double py = kPad + title_h + static_cast<double>(static_cast<int64_t>(k) / grid_cols) * (panel_h + gap_y);
    const Color title_color = p.maps.size() == 1 ? head_color(p.maps[0].second) : kInk;
    f.text(px + panel_w / 2, py + text_ascent(kPanelTitle), p.title, kPanelTitle, title_color, Anchor::kMiddle);
    const double cap_y = py + panel_title_h + text_ascent(kCaption);
    const double xl = px + left_w + 8, xr = xl + span;
    f.text(xl - 8, cap_y, o.left_caption, kCaption, kMuted, Anchor::kEnd);
    f.text(xr + 8, cap_y, o.right_caption, kCaption, kMuted, Anchor::kStart);
    const double top = py + header_h;
    // Rows of the shorter column are centred against the longer one.
    const double q0 = top + static_cast<double>(n - rows) * row_h / 2, k0 = top + static_cast<double>(n - cols) * row_h / 2;
    auto qy = [&](int64_t i) { return q0 + (static_cast<double>(i) + 0.5) * row_h; };
    auto ky = [&](int64_t j) { return k0 + (static_cast<double>(j) + 0.5) * row_h; };
    for (int64_t i = 0; i < rows; ++i) f.text(xl - 8, qy(i) + mid, ql[static_cast<size_t>(i)], label, kInk, Anchor::kEnd);
    for (int64_t j = 0; j < cols; ++j) f.text(xr + 8, ky(j) + mid, kl[static_cast<size_t>(j)], label, kInk);
    // Lighter links first, so strong ones are drawn on top.
    std::vector<std::tuple<float, int64_t, size_t>> links;  // weight, cell, map
    for (size_t m = 0; m < p.maps.size(); ++m)
      for (int64_t c = 0; c < rows * cols; ++c)
        if (drawn(p.maps[m].first[c], min_weight)) links.emplace_back(p.maps[m].first[c], c, m);
    std::stable_sort(links.begin(), links.end(),
                     [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
    for (const auto& [w, c, m] : links) {
      const int64_t i = c / cols, j = c % cols;
      Color color = head_color(p.maps[m].second);
      const double v = std::min(1.0, static_cast<double>(w));
      color.a = static_cast<uint8_t>(std::lround(255 * std::max(0.04, v)));
      f.line(xl, qy(i), xr, ky(j), 0.75 + 3.0 * v, color, "link",
             ql[static_cast<size_t>(i)] + " \u2192 " + kl[static_cast<size_t>(j)] + ": " + format_weight(w, 3));
    }
    for (int64_t i = 0; i < rows; ++i) f.circle(xl, qy(i), 2.2, kMuted);
    for (int64_t j = 0; j < cols; ++j) f.circle(xr, ky(j), 2.2, kMuted);
    if (p.maps.size() > 1) {
      double lx = px, ly = top + static_cast<double>(n) * row_h + 12;
      double total = 0;
      for (const auto& mh : p.maps) total += 16 + text_width("head " + std::to_string(mh.second), kCaption) + 14;
      lx = px + (panel_w - total + 14) / 2;
      for (const auto& mh : p.maps) {
        const std::string name = "head " + std::to_string(mh.second);
        f.rect(lx, ly - 5, 12, 10, head_color(mh.second));
        f.text(lx + 16, ly + text_ascent(kCaption) / 2, name, kCaption, kInk);
        lx += 16 + text_width(name, kCaption) + 14;
      }
    }
  }
  return f;
}

}  // namespace attnkit::render

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
constexpr double kMinTitle = 11, kMinPanelTitle = 9, kMaxLabelWidth = 160;

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

using LegendRows = std::vector<std::vector<std::pair<int64_t, double>>>;  // (head, entry width)

// A panel's legend entries ("head k" after a colour swatch) in rows no wider than `width`.
LegendRows legend_layout(const LinkPanel& p, double width) {
  LegendRows rows(1);
  double used = 0;
  for (const auto& mh : p.maps) {
    const double w = 16 + text_width("head " + std::to_string(mh.second), kCaption) + 14;
    if (used > 0 && used + w - 14 > width) rows.emplace_back(), used = 0;
    rows.back().emplace_back(mh.second, w);
    used += w;
  }
  return rows;
}

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
  if (std::max(rows, cols) > kMaxLinkTokens)
    throw Error("link diagram: " + std::to_string(rows) + " queries x " + std::to_string(cols) +
                " keys; link diagrams are drawn for at most " + std::to_string(kMaxLinkTokens) + " tokens a side");
  const double min_weight = effective_min_weight(o, rows, cols);
  std::vector<std::string> ql = labels_or_positions(query_labels, rows, "query");
  std::vector<std::string> kl = labels_or_positions(key_labels, cols, "key");
  const int64_t n = std::max(rows, cols);
  const double row_h = std::clamp(std::floor(360.0 / static_cast<double>(n)), 11.0, 26.0);
  const TextStyle label{std::min(14.0, row_h * 0.6), false};
  // Long tokens end in "…" on the picture (tooltips keep them whole).
  std::vector<std::string> qshown, kshown;
  for (const auto& s : ql) qshown.push_back(elide(s, label, kMaxLabelWidth));
  for (const auto& s : kl) kshown.push_back(elide(s, label, kMaxLabelWidth));
  double left_w = text_width(o.left_caption, kCaption), right_w = text_width(o.right_caption, kCaption);
  for (const auto& s : qshown) left_w = std::max(left_w, text_width(s, label));
  for (const auto& s : kshown) right_w = std::max(right_w, text_width(s, label));
  const double span = n > 32 ? 220 : 170;  // horizontal room for the links
  bool legend = false;
  for (const auto& p : panels) legend |= p.maps.size() > 1;
  const double panel_w = left_w + 8 + span + 8 + right_w;
  // Panel titles shrink and wrap to the panel; the header is as tall as the tallest.
  // Their lines are 1.3 font sizes apart.
  std::vector<TextBlock> panel_titles;
  double panel_title_h = 0;
  auto title_line = [](const TextBlock& b) { return std::ceil(b.style.size * 1.3); };
  for (const auto& p : panels) {
    const TextBlock& b = panel_titles.emplace_back(fit_text(p.title, kPanelTitle, panel_w, kMinPanelTitle));
    if (!b.lines.empty()) panel_title_h = std::max(panel_title_h, static_cast<double>(b.lines.size()) * title_line(b) + 4);
  }
  const double header_h = panel_title_h + std::ceil(kCaption.size * 1.3) + 4;
  // The legend wraps onto as many rows as the longest one needs.
  size_t legend_rows = 1;
  for (const auto& p : panels) legend_rows = std::max(legend_rows, legend_layout(p, panel_w).size());
  const double legend_h = legend ? 26 + 18 * static_cast<double>(legend_rows - 1) : 0;
  const double panel_h = header_h + static_cast<double>(n) * row_h + legend_h;
  grid_cols = std::min<int64_t>(grid_cols, static_cast<int64_t>(panels.size()));
  const int64_t grid_rows = (static_cast<int64_t>(panels.size()) + grid_cols - 1) / grid_cols;
  const double gap_x = 40, gap_y = 24;
  const double grid_w = static_cast<double>(grid_cols) * (panel_w + gap_x) - gap_x;
  const TextBlock title = fit_text(o.title, kTitle, grid_w, kMinTitle);
  const double title_h = title.lines.empty() ? 0 : title.height() + 12;
  Figure f(std::ceil(2 * kPad + grid_w),
           std::ceil(2 * kPad + title_h + static_cast<double>(grid_rows) * (panel_h + gap_y) - gap_y));
  f.text_block(kPad + grid_w / 2, kPad, title, kInk, Anchor::kMiddle);
  const double mid = (text_ascent(label) - text_descent(label)) / 2;
  for (size_t k = 0; k < panels.size(); ++k) {
    const LinkPanel& p = panels[k];
    const double px = kPad + static_cast<double>(static_cast<int64_t>(k) % grid_cols) * (panel_w + gap_x);
    const double py = kPad + title_h + static_cast<double>(static_cast<int64_t>(k) / grid_cols) * (panel_h + gap_y);
    const Color title_color = p.maps.size() == 1 ? head_color(p.maps[0].second) : kInk;
    const TextBlock& panel_title = panel_titles[k];
    for (size_t line = 0; line < panel_title.lines.size(); ++line)
      f.text(px + panel_w / 2,
             py + text_ascent(panel_title.style) + static_cast<double>(line) * title_line(panel_title),
             panel_title.lines[line], panel_title.style, title_color, Anchor::kMiddle);
    const double cap_y = py + panel_title_h + text_ascent(kCaption);
    const double xl = px + left_w + 8, xr = xl + span;
    f.text(xl - 8, cap_y, o.left_caption, kCaption, kMuted, Anchor::kEnd);
    f.text(xr + 8, cap_y, o.right_caption, kCaption, kMuted, Anchor::kStart);
    const double top = py + header_h;
    // Rows of the shorter column are centred against the longer one.
    const double q0 = top + static_cast<double>(n - rows) * row_h / 2, k0 = top + static_cast<double>(n - cols) * row_h / 2;
    auto qy = [&](int64_t i) { return q0 + (static_cast<double>(i) + 0.5) * row_h; };
    auto ky = [&](int64_t j) { return k0 + (static_cast<double>(j) + 0.5) * row_h; };
    for (int64_t i = 0; i < rows; ++i)
      f.text(xl - 8, qy(i) + mid, qshown[static_cast<size_t>(i)], label, kInk, Anchor::kEnd);
    for (int64_t j = 0; j < cols; ++j) f.text(xr + 8, ky(j) + mid, kshown[static_cast<size_t>(j)], label, kInk);
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
      // Opacity w^0.6: a weak link the lesson points at (сидела → cat, 0.08) stays visible (0.22
      // against 0.08), 0.01s stay a haze (0.06), the weights' order kept; the width is linear.
      color.a = static_cast<uint8_t>(std::lround(255 * std::max(0.04, std::pow(v, 0.6))));
      f.line(xl, qy(i), xr, ky(j), 0.75 + 3.0 * v, color, "link",
             ql[static_cast<size_t>(i)] + " \u2192 " + kl[static_cast<size_t>(j)] + ": " + format_weight(w, 3));
    }
    for (int64_t i = 0; i < rows; ++i) f.circle(xl, qy(i), 2.2, kMuted);
    for (int64_t j = 0; j < cols; ++j) f.circle(xr, ky(j), 2.2, kMuted);
    if (p.maps.size() > 1) {
      // Each legend row centred under the panel.
      double ly = top + static_cast<double>(n) * row_h + 12;
      for (const auto& row : legend_layout(p, panel_w)) {
        double total = 0;
        for (const auto& e : row) total += e.second;
        double lx = px + (panel_w - total + 14) / 2;
        for (const auto& [head, w] : row) {
          f.rect(lx, ly - 5, 12, 10, head_color(head));
          f.text(lx + 16, ly + text_ascent(kCaption) / 2, "head " + std::to_string(head), kCaption, kInk);
          lx += w;
        }
        ly += 18;
      }
    }
  }
  return f;
}

}  // namespace attnkit::render

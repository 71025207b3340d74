#include "tools/render/heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/error.h"

namespace attnkit::render {
namespace {

constexpr double kPad = 16;
constexpr TextStyle kTitle{17, true}, kPanelTitle{13, true}, kCaption{13, false}, kTick{11, false};

std::vector<std::string> resolve_labels(const std::vector<std::string>& labels, int64_t n, const char* what) {
  if (labels.empty()) {
    std::vector<std::string> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
    return out;
  }
  if (static_cast<int64_t>(labels.size()) != n)
    throw Error(std::string("heatmap: ") + std::to_string(labels.size()) + " " + what + " labels for " +
                std::to_string(n) + " " + what + "s");
  return labels;
}

// The smallest "round" step (1, 2, 4, 5, 10, 20, 25, 50, …) of at least `needed` labels.
int64_t label_step(double needed) {
  for (int64_t scale = 1;; scale *= 100)
    for (int64_t s : {1, 2, 4, 5, 10, 20, 25, 50})
      if (static_cast<double>(s * scale) >= needed) return s * scale;
}

// One map with its tick labels, measured first so figures can be laid out around it.
struct MapPanel {
  int64_t rows = 0, cols = 0;
  double cell = 0;
  std::vector<std::string> row_labels, col_labels;
  TextStyle label;
  int64_t row_step = 1, col_step = 1;  // every k-th label, so small cells do not overlap
  bool vertical_cols = false;
  double row_label_w = 0, col_label_h = 0;
  int decimals = 0;
  Colormap map = Colormap::kBlues;

  MapPanel(int64_t r, int64_t c, double cell_size, std::vector<std::string> rl, std::vector<std::string> cl,
           int requested_decimals, Colormap m)
      : rows(r), cols(c), cell(cell_size), row_labels(std::move(rl)), col_labels(std::move(cl)), map(m) {
    label.size = std::clamp(cell * 0.75, 7.0, 13.0);
    const double spacing = label.size * 1.2;
    row_step = col_step = label_step(spacing / cell);
    for (const auto& s : row_labels) row_label_w = std::max(row_label_w, text_width(s, label));
    double col_w = 0;
    for (const auto& s : col_labels) col_w = std::max(col_w, text_width(s, label));
    vertical_cols = col_w > cell * static_cast<double>(col_step) - 4;
    col_label_h = vertical_cols ? col_w : text_ascent(label) + text_descent(label);
    decimals = requested_decimals >= 0 ? requested_decimals : cell >= 36 ? 2 : cell >= 26 ? 1 : 0;
  }
  double map_w() const { return cell * static_cast<double>(cols); }
  double map_h() const { return cell * static_cast<double>(rows); }

  // The map with its top-left corner at (x, y); labels to the left and below when asked.
  void draw(Figure& f, const float* w, double x, double y, bool with_row_labels, bool with_col_labels) const {
    const double gap = cell >= 14 ? 1 : 0;  // white hairlines between cells where there is room
    const TextStyle value{std::min(13.0, cell * (decimals == 2 ? 0.3 : 0.36)), false};
    f.rect(x, y, map_w(), map_h(), kGrid);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const double v = w[i * cols + j];
        const Color c = colormap(map, v);
        const double cx = x + static_cast<double>(j) * cell, cy = y + static_cast<double>(i) * cell;
        f.rect(cx + gap / 2, cy + gap / 2, cell - gap, cell - gap, c, "cell",
               row_labels[static_cast<size_t>(i)] + " \u2192 " + col_labels[static_cast<size_t>(j)] + ": " +
                   format_weight(v, 3));
        if (decimals > 0) {
          // Values that round to zero in a lighter grey, so the weights that matter stand out.
          const std::string text = format_weight(v, decimals);
          const bool zero = text.find_first_not_of("0.") == std::string::npos;
          const Color ink = text_on(c);
          f.text(cx + cell / 2, cy + cell / 2 + text_ascent(value) / 2, text, value,
                 zero ? (ink == kWhite ? Color{190, 190, 205} : kFaint) : ink, Anchor::kMiddle);
        }
      }
    if (with_row_labels)
      for (int64_t i = 0; i < rows; i += row_step)
        f.text(x - 6, y + (static_cast<double>(i) + 0.5) * cell + (text_ascent(label) - text_descent(label)) / 2,
               row_labels[static_cast<size_t>(i)], label, kInk, Anchor::kEnd);
    if (with_col_labels)
      for (int64_t j = 0; j < cols; j += col_step) {
        const double cx = x + (static_cast<double>(j) + 0.5) * cell;
        if (vertical_cols)
          f.text(cx + (text_ascent(label) - text_descent(label)) / 2, y + map_h() + 6, col_labels[static_cast<size_t>(j)],
                 label, kInk, Anchor::kEnd, true);
        else
          f.text(cx, y + map_h() + 6 + text_ascent(label), col_labels[static_cast<size_t>(j)], label, kInk,
                 Anchor::kMiddle);
      }
  }
};

constexpr double kBarGap = 18, kBarWidth = 14;

double colorbar_width() { return kBarGap + kBarWidth + 6 + text_width("1.0", kTick) + 4; }

// The colour bar with ticks 0 … 1 at (x, y), `h` tall.
void draw_colorbar(Figure& f, double x, double y, double h, Colormap map) {
  x += kBarGap;
  f.rect(x - 0.5, y - 0.5, kBarWidth + 1, h + 1, kGrid);
  f.ramp(x, y, kBarWidth, h, map);
  const int steps = h >= 150 ? 5 : h >= 60 ? 2 : 1;
  for (int k = 0; k <= steps; ++k) {
    const double v = static_cast<double>(k) / steps, ty = y + h - v * h;
    f.line(x + kBarWidth, ty, x + kBarWidth + 4, ty, 1, kMuted);
    f.text(x + kBarWidth + 6, ty + text_ascent(kTick) / 2, format_weight(v, 1), kTick, kMuted);
  }
}

double auto_cell(int64_t rows, int64_t cols) {
  return std::clamp(std::floor(440.0 / static_cast<double>(std::max(rows, cols)) * 4) / 4, 1.0, 48.0);
}

double line_height(const TextStyle& s) { return std::ceil(s.size * 1.25); }

}  // namespace

std::string format_weight(double w, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, w);
  std::string s = buf;
  return s.rfind("-0.", 0) == 0 && s.find_first_not_of("-0.") == std::string::npos ? s.substr(1) : s;
}

Figure heatmap_figure(const float* weights, int64_t rows, int64_t cols, const std::vector<std::string>& row_labels,
                      const std::vector<std::string>& col_labels, const HeatmapOptions& o) {
  if (rows <= 0 || cols <= 0) throw Error("heatmap: empty map " + std::to_string(rows) + " x " + std::to_string(cols));
  const MapPanel p(rows, cols, o.cell > 0 ? o.cell : auto_cell(rows, cols), resolve_labels(row_labels, rows, "row"),
                   resolve_labels(col_labels, cols, "column"), o.decimals, o.map);
  const double caption_w = o.row_caption.empty() ? 0 : line_height(kCaption) + 4;
  const double title_h = o.title.empty() ? 0 : line_height(kTitle) + 10;
  const double caption_h = o.col_caption.empty() ? 0 : line_height(kCaption) + 4;
  const double bar_h = std::max(p.map_h(), 100.0);
  const double map_x = kPad + caption_w + p.row_label_w + 6, map_y = kPad + title_h;
  const double width = map_x + p.map_w() + (o.colorbar ? colorbar_width() : 0) + kPad;
  const double height = map_y + std::max(p.map_h() + 6 + p.col_label_h + 6 + caption_h, bar_h) + kPad;
  Figure f(std::ceil(width), std::ceil(height));
  if (!o.title.empty())
    f.text(map_x + p.map_w() / 2, kPad + text_ascent(kTitle), o.title, kTitle, kInk, Anchor::kMiddle);
  p.draw(f, weights, map_x, map_y, true, true);
  if (!o.row_caption.empty())
    f.text(kPad + text_ascent(kCaption), map_y + p.map_h() / 2, o.row_caption, kCaption, kMuted, Anchor::kMiddle, true);
  if (!o.col_caption.empty())
    f.text(map_x + p.map_w() / 2, map_y + p.map_h() + 6 + p.col_label_h + 6 + text_ascent(kCaption), o.col_caption,
           kCaption, kMuted, Anchor::kMiddle);
  if (o.colorbar) draw_colorbar(f, map_x + p.map_w(), map_y, bar_h, o.map);
  return f;
}

Figure heatmap_grid(const std::vector<const float*>& maps, const std::vector<std::string>& titles, int64_t grid_cols,
                    int64_t rows, int64_t cols, const std::vector<std::string>& row_labels,
                    const std::vector<std::string>& col_labels, const HeatmapOptions& o) {
  if (maps.empty() || rows <= 0 || cols <= 0 || grid_cols <= 0)
    throw Error("heatmap grid: nothing to draw (" + std::to_string(maps.size()) + " maps of " + std::to_string(rows) +
                " x " + std::to_string(cols) + ")");
  if (titles.size() != maps.size()) throw Error("heatmap grid: one title per map expected");
  grid_cols = std::min<int64_t>(grid_cols, static_cast<int64_t>(maps.size()));
  const int64_t grid_rows = (static_cast<int64_t>(maps.size()) + grid_cols - 1) / grid_cols;
  // Cells as large as a single map's, but the whole grid at most ~1400 px wide.
  double cell = o.cell > 0 ? o.cell : std::min(auto_cell(rows, cols) * 0.8, 40.0);
  cell = std::max(1.0, std::min(cell, std::floor(1300.0 / static_cast<double>(grid_cols * cols) * 4) / 4));
  const MapPanel p(rows, cols, cell, resolve_labels(row_labels, rows, "row"), resolve_labels(col_labels, cols, "column"),
                   o.decimals, o.map);
  const double panel_title_h = line_height(kPanelTitle) + 4;
  double panel_w = p.map_w();
  for (const auto& t : titles) panel_w = std::max(panel_w, text_width(t, kPanelTitle));
  const double gap_x = 18, gap_y = 14;
  const double caption_w = o.row_caption.empty() ? 0 : line_height(kCaption) + 4;
  const double title_h = o.title.empty() ? 0 : line_height(kTitle) + 12;
  const double caption_h = o.col_caption.empty() ? 0 : line_height(kCaption) + 4;
  const double grid_x = kPad + caption_w + p.row_label_w + 6, grid_y = kPad + title_h;
  const double step_x = panel_w + gap_x, step_y = panel_title_h + p.map_h() + gap_y;
  const double grid_w = static_cast<double>(grid_cols) * step_x - gap_x;
  const double grid_h = static_cast<double>(grid_rows) * step_y - gap_y;
  const double bar_h = std::clamp(grid_h - panel_title_h, 100.0, 320.0);
  const double width = grid_x + grid_w + (o.colorbar ? colorbar_width() : 0) + kPad;
  const double height = grid_y + std::max(grid_h + 6 + p.col_label_h + 6 + caption_h, panel_title_h + bar_h) + kPad;
  Figure f(std::ceil(width), std::ceil(height));
  if (!o.title.empty()) f.text(grid_x + grid_w / 2, kPad + text_ascent(kTitle), o.title, kTitle, kInk, Anchor::kMiddle);
  for (size_t k = 0; k < maps.size(); ++k) {
    const int64_t gr = static_cast<int64_t>(k) / grid_cols, gc = static_cast<int64_t>(k) % grid_cols;
    const double px = grid_x + static_cast<double>(gc) * step_x, py = grid_y + static_cast<double>(gr) * step_y;
    const double mx = px + (panel_w - p.map_w()) / 2;
    f.text(mx + p.map_w() / 2, py + text_ascent(kPanelTitle), titles[k], kPanelTitle, kInk, Anchor::kMiddle);
    // Column labels under each map of the last row, and under maps with nothing below them.
    const bool last_in_column = static_cast<int64_t>(k) + grid_cols >= static_cast<int64_t>(maps.size());
    p.draw(f, maps[k], mx, py + panel_title_h, gc == 0, last_in_column);
  }
  if (!o.row_caption.empty())
    f.text(kPad + text_ascent(kCaption), grid_y + grid_h / 2, o.row_caption, kCaption, kMuted, Anchor::kMiddle, true);
  if (!o.col_caption.empty())
    f.text(grid_x + grid_w / 2, grid_y + grid_h + 6 + p.col_label_h + 6 + text_ascent(kCaption), o.col_caption,
           kCaption, kMuted, Anchor::kMiddle);
  if (o.colorbar) draw_colorbar(f, grid_x + grid_w, grid_y + panel_title_h, bar_h, o.map);
  return f;
}

}  // namespace attnkit::render

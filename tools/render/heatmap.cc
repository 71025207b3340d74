#include "tools/render/heatmap.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

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

constexpr double kMaxLabelWidth = 160;  // longer tick labels end in "…"
constexpr double kMinTitle = 11, kMinPanelTitle = 9, kMinCaption = 9;

// A map as drawn: cell by cell, or reduced to the largest weight of each block × block block.
struct DrawnMap {
  int64_t rows = 0, cols = 0, block = 1;
  std::vector<std::string> row_labels, col_labels;  // of each drawn row / column: its first one's
  std::vector<std::string> row_tips, col_tips;      // tooltips: the label, or "first…last" of a block

  DrawnMap(int64_t r, int64_t c, int64_t b, const std::vector<std::string>& rl, const std::vector<std::string>& cl)
      : rows((r + b - 1) / b), cols((c + b - 1) / b), block(b) {
    auto side = [b](const std::vector<std::string>& labels, int64_t drawn, std::vector<std::string>& first,
                    std::vector<std::string>& tips) {
      const int64_t n = static_cast<int64_t>(labels.size());
      for (int64_t i = 0; i < drawn; ++i) {
        const int64_t a = i * b, z = std::min(n, a + b) - 1;
        first.push_back(labels[static_cast<size_t>(a)]);
        tips.push_back(a == z ? labels[static_cast<size_t>(a)]
                              : labels[static_cast<size_t>(a)] + "\u2026" + labels[static_cast<size_t>(z)]);
      }
    };
    side(rl, rows, row_labels, row_tips);
    side(cl, cols, col_labels, col_tips);
  }

  // The weights to draw: the map itself, or its block maxima (into `store`).
  const float* weights(const float* w, int64_t src_rows, int64_t src_cols, std::vector<float>& store) const {
    if (block == 1) return w;
    store.assign(static_cast<size_t>(rows * cols), -std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < src_rows; ++i) {
      float* out = store.data() + (i / block) * cols;
      const float* in = w + i * src_cols;
      for (int64_t j = 0; j < src_cols; ++j) out[j / block] = std::max(out[j / block], in[j]);
    }
    return store.data();
  }
};

// One map with its tick labels, measured first so figures can be laid out around it.
struct MapPanel {
  int64_t rows = 0, cols = 0;
  double cell = 0;
  std::vector<std::string> row_labels, col_labels, row_tips, col_tips;
  std::string tip_value;  // before the weight in tooltips: "" or "max " (blocks)
  TextStyle label;
  int64_t row_step = 1, col_step = 1;  // every k-th label, so small cells do not overlap
  bool vertical_cols = false;
  double row_label_w = 0, col_label_h = 0;
  int decimals = 0;
  Colormap map = Colormap::kBlues;

  MapPanel(const DrawnMap& d, double cell_size, int requested_decimals, Colormap m)
      : rows(d.rows), cols(d.cols), cell(cell_size), row_tips(d.row_tips), col_tips(d.col_tips),
        tip_value(d.block > 1 ? "max " : ""), map(m) {
    label.size = std::clamp(cell * 0.75, 7.0, 13.0);
    for (const auto& s : d.row_labels) row_labels.push_back(elide(s, label, kMaxLabelWidth));
    for (const auto& s : d.col_labels) col_labels.push_back(elide(s, label, kMaxLabelWidth));
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
  // Horizontal column labels are kept within [x_min, x_max] (the picture's inner edges).
  void draw(Figure& f, const float* w, double x, double y, bool with_row_labels, bool with_col_labels, double x_min,
            double x_max) const {
    const double gap = cell >= 14 ? 1 : 0;  // white hairlines between cells where there is room
    const TextStyle value{std::min(13.0, cell * (decimals == 2 ? 0.3 : 0.36)), false};
    f.rect(x, y, map_w(), map_h(), kGrid);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const double v = w[i * cols + j];
        const Color c = colormap(map, v);
        const double cx = x + static_cast<double>(j) * cell, cy = y + static_cast<double>(i) * cell;
        f.rect(cx + gap / 2, cy + gap / 2, cell - gap, cell - gap, c, "cell",
               row_tips[static_cast<size_t>(i)] + " \u2192 " + col_tips[static_cast<size_t>(j)] + ": " + tip_value +
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
        const std::string& s = col_labels[static_cast<size_t>(j)];
        if (vertical_cols) {
          f.text(cx + (text_ascent(label) - text_descent(label)) / 2, y + map_h() + 6, s, label, kInk, Anchor::kEnd,
                 true);
        } else {
          const double half = text_width(s, label) / 2;
          f.text(std::clamp(cx, x_min + half, std::max(x_min + half, x_max - half)), y + map_h() + 6 + text_ascent(label),
                 s, label, kInk, Anchor::kMiddle);
        }
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

// Where a block of `extent` centred on `centre` goes so that it stays within [lo, hi].
double keep_inside(double centre, double extent, double lo, double hi) {
  return std::clamp(centre, lo + extent / 2, std::max(lo + extent / 2, hi - extent / 2));
}

// The texts around a map or a grid, fitted once the picture's size is known: the title above
// (wrapped to the width), the row caption along the left (to the height), the column caption
// and the blocks note below (to the width).
struct Frame {
  TextBlock title, row_caption, col_caption, note;
  double caption_w() const { return row_caption.lines.empty() ? 0 : row_caption.height() + 4; }
  double caption_h() const { return col_caption.lines.empty() ? 0 : col_caption.height() + 4; }
  double note_h() const { return note.lines.empty() ? 0 : note.height() + 4; }
  double title_h(double gap) const { return title.lines.empty() ? 0 : title.height() + gap; }
};

}  // namespace

std::string format_weight(double w, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, w);
  std::string s = buf;
  return s.rfind("-0.", 0) == 0 && s.find_first_not_of("-0.") == std::string::npos ? s.substr(1) : s;
}

int64_t heatmap_block(int64_t rows, int64_t cols, int64_t maps) {
  // Grids share a budget of 4 maps' cells: each of n maps gets 1024 / sqrt(n) cells a side, at
  // most 512 (so 8 × 8 heads of 128 tokens are still drawn cell by cell) and at least 32.
  const double side = std::clamp(std::floor(2.0 * static_cast<double>(kMaxDrawnCells) /
                                            std::sqrt(static_cast<double>(std::max<int64_t>(1, maps)))),
                                 32.0, static_cast<double>(kMaxDrawnCells));
  const int64_t budget = static_cast<int64_t>(side), n = std::max(rows, cols);
  return std::max<int64_t>(1, (n + budget - 1) / budget);
}

std::string heatmap_block_note(int64_t rows, int64_t cols, int64_t maps) {
  const int64_t b = heatmap_block(rows, cols, maps);
  if (b == 1) return "";
  const std::string bb = std::to_string(b) + " \u00d7 " + std::to_string(b);
  return std::to_string(rows) + " \u00d7 " + std::to_string(cols) + (maps > 1 ? " maps" : " map") + " drawn in " +
         bb + " blocks: each cell shows the largest weight of its block";
}

Figure heatmap_figure(const float* weights, int64_t rows, int64_t cols, const std::vector<std::string>& row_labels,
                      const std::vector<std::string>& col_labels, const HeatmapOptions& o) {
  if (rows <= 0 || cols <= 0) throw Error("heatmap: empty map " + std::to_string(rows) + " x " + std::to_string(cols));
  const DrawnMap d(rows, cols, heatmap_block(rows, cols), resolve_labels(row_labels, rows, "row"),
                   resolve_labels(col_labels, cols, "column"));
  std::vector<float> store;
  const float* drawn = d.weights(weights, rows, cols, store);
  const MapPanel p(d, o.cell > 0 ? o.cell : auto_cell(d.rows, d.cols), o.decimals, o.map);
  const double bar_h = std::max(p.map_h(), 100.0);
  // Sizes first without the texts that are fitted to them: the height (for the row caption)
  // does not depend on the width, the width not on the title.
  Frame t;
  t.col_caption = fit_text(o.col_caption, kCaption, 1e9, kMinCaption);
  const double below = p.map_h() + 6 + p.col_label_h + 6;
  const double inner_h = std::max(below + t.caption_h(), bar_h);
  t.row_caption = fit_text(o.row_caption, kCaption, inner_h, kMinCaption);
  const double map_x = kPad + t.caption_w() + p.row_label_w + 6;
  const double width = std::ceil(map_x + p.map_w() + (o.colorbar ? colorbar_width() : 0) + kPad);
  t.title = fit_text(o.title, kTitle, width - 2 * kPad, kMinTitle);
  t.col_caption = fit_text(o.col_caption, kCaption, width - 2 * kPad, kMinCaption);
  t.note = fit_text(heatmap_block_note(rows, cols), kCaption, width - 2 * kPad, kMinCaption);
  const double map_y = kPad + t.title_h(10);
  const double height = std::ceil(map_y + std::max(below + t.caption_h() + t.note_h(), bar_h) + kPad);
  Figure f(width, height);
  f.text_block(keep_inside(map_x + p.map_w() / 2, t.title.width(), kPad, width - kPad), kPad, t.title, kInk,
               Anchor::kMiddle);
  p.draw(f, drawn, map_x, map_y, true, true, kPad, width - kPad);
  f.text_block(keep_inside(map_y + p.map_h() / 2, t.row_caption.width(), kPad, height - kPad), kPad, t.row_caption,
               kMuted, Anchor::kMiddle, true);
  f.text_block(keep_inside(map_x + p.map_w() / 2, t.col_caption.width(), kPad, width - kPad), map_y + below,
               t.col_caption, kMuted, Anchor::kMiddle);
  f.text_block(width / 2, map_y + below + t.caption_h(), t.note, kMuted, Anchor::kMiddle);
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
  const int64_t n_maps = static_cast<int64_t>(maps.size());
  const int64_t grid_rows = (n_maps + grid_cols - 1) / grid_cols;
  const DrawnMap d(rows, cols, heatmap_block(rows, cols, n_maps), resolve_labels(row_labels, rows, "row"),
                   resolve_labels(col_labels, cols, "column"));
  // Cells as large as a single map's, but the whole grid at most ~1400 px wide.
  double cell = o.cell > 0 ? o.cell : std::min(auto_cell(d.rows, d.cols) * 0.8, 40.0);
  cell = std::max(1.0, std::min(cell, std::floor(1300.0 / static_cast<double>(grid_cols * d.cols) * 4) / 4));
  const MapPanel p(d, cell, o.decimals, o.map);
  // Panels are as wide as the map, or as the widest title up to 220 px; longer titles shrink
  // and wrap to the panel.
  double widest_title = 0;
  for (const auto& t : titles) widest_title = std::max(widest_title, text_width(t, kPanelTitle));
  const double panel_w = std::max(p.map_w(), std::min(widest_title, 220.0));
  std::vector<TextBlock> panel_titles;
  double panel_title_h = 0;
  for (const auto& t : titles) {
    panel_titles.push_back(fit_text(t, kPanelTitle, panel_w, kMinPanelTitle));
    panel_title_h = std::max(panel_title_h, panel_titles.back().height());
  }
  panel_title_h = std::max(panel_title_h, line_height(kPanelTitle)) + 4;
  const double gap_x = 18, gap_y = 14;
  const double step_x = panel_w + gap_x, step_y = panel_title_h + p.map_h() + gap_y;
  const double grid_w = static_cast<double>(grid_cols) * step_x - gap_x;
  const double grid_h = static_cast<double>(grid_rows) * step_y - gap_y;
  const double bar_h = std::clamp(grid_h - panel_title_h, 100.0, 320.0);
  Frame t;
  t.col_caption = fit_text(o.col_caption, kCaption, 1e9, kMinCaption);
  const double below = grid_h + 6 + p.col_label_h + 6;
  const double inner_h = std::max(below + t.caption_h(), panel_title_h + bar_h);
  t.row_caption = fit_text(o.row_caption, kCaption, inner_h, kMinCaption);
  const double grid_x = kPad + t.caption_w() + p.row_label_w + 6;
  const double width = std::ceil(grid_x + grid_w + (o.colorbar ? colorbar_width() : 0) + kPad);
  t.title = fit_text(o.title, kTitle, width - 2 * kPad, kMinTitle);
  t.col_caption = fit_text(o.col_caption, kCaption, width - 2 * kPad, kMinCaption);
  t.note = fit_text(heatmap_block_note(rows, cols, n_maps), kCaption, width - 2 * kPad, kMinCaption);
  const double grid_y = kPad + t.title_h(12);
  const double height = std::ceil(grid_y + std::max(below + t.caption_h() + t.note_h(), panel_title_h + bar_h) + kPad);
  Figure f(width, height);
  f.text_block(keep_inside(grid_x + grid_w / 2, t.title.width(), kPad, width - kPad), kPad, t.title, kInk,
               Anchor::kMiddle);
  std::vector<float> store;
  for (size_t k = 0; k < maps.size(); ++k) {
    const int64_t gr = static_cast<int64_t>(k) / grid_cols, gc = static_cast<int64_t>(k) % grid_cols;
    const double px = grid_x + static_cast<double>(gc) * step_x, py = grid_y + static_cast<double>(gr) * step_y;
    const double mx = px + (panel_w - p.map_w()) / 2;
    f.text_block(px + panel_w / 2, py, panel_titles[k], kInk, Anchor::kMiddle);
    // Column labels under each map of the last row, and under maps with nothing below them.
    const bool last_in_column = static_cast<int64_t>(k) + grid_cols >= n_maps;
    p.draw(f, d.weights(maps[k], rows, cols, store), mx, py + panel_title_h, gc == 0, last_in_column, kPad,
           width - kPad);
  }
  f.text_block(keep_inside(grid_y + grid_h / 2, t.row_caption.width(), kPad, height - kPad), kPad, t.row_caption,
               kMuted, Anchor::kMiddle, true);
  f.text_block(keep_inside(grid_x + grid_w / 2, t.col_caption.width(), kPad, width - kPad), grid_y + below,
               t.col_caption, kMuted, Anchor::kMiddle);
  f.text_block(width / 2, grid_y + below + t.caption_h(), t.note, kMuted, Anchor::kMiddle);
  if (o.colorbar) draw_colorbar(f, grid_x + grid_w, grid_y + panel_title_h, bar_h, o.map);
  return f;
}

}  // namespace attnkit::render

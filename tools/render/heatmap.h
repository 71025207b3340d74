// Heatmaps of attention weights: rows = queries (who looks), columns = keys (at whom), colours
// on the fixed 0–1 scale with a colour bar, token labels on both axes, optional values in the
// cells; and grids of them (layers × heads, snapshots over training).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/render/figure.h"

namespace attnkit::render {

struct HeatmapOptions {
  std::string title;
  std::string row_caption = "queries", col_caption = "keys";
  int decimals = -1;  // values in cells: -1 when they fit (2 decimals, or 1), 0 never, 1 or 2 always
  Colormap map = Colormap::kBlues;
  double cell = 0;    // cell side in logical pixels; 0 = chosen from the map's size
  bool colorbar = true;
};

// Maps with more rows or columns than this are drawn in square blocks of cells: each drawn cell
// shows the largest weight of its block (so a one-cell-wide diagonal stays visible), and a note
// under the picture says so. It bounds the shapes a picture holds (about 512² cells, whatever
// the map's size) and so its memory and drawing time. Grids of n maps draw 1024/√n cells a side
// (at most 512, at least 32), about 4 maps' worth in all.
constexpr int64_t kMaxDrawnCells = 512;

// The block side (1: cell by cell) for a grid of `maps` maps of rows × cols, and the note the
// picture carries when it is above 1 ("" otherwise).
int64_t heatmap_block(int64_t rows, int64_t cols, int64_t maps = 1);
std::string heatmap_block_note(int64_t rows, int64_t cols, int64_t maps = 1);

// One [rows, cols] map (row-major). Labels may be empty (positions 0, 1, …), otherwise one per
// row / column. Cells are rects of class "cell" whose tooltip names query, key and weight (for
// blocks: the first and last query and key, and the largest weight). Titles, captions and
// labels fit inside the picture: titles shrink and wrap (fit_text), labels wider than 160
// pixels are elided, label lists thin out where cells are smaller than the text.
Figure heatmap_figure(const float* weights, int64_t rows, int64_t cols, const std::vector<std::string>& row_labels,
                      const std::vector<std::string>& col_labels, const HeatmapOptions& options);

// Maps of the same shape in a grid of `grid_cols` columns, each with its title (e.g.
// "layer 0 · head 1", "step 10"), one shared colour bar. Row labels are drawn on the first
// column, column labels under the last row; options.title is the grid's title.
Figure heatmap_grid(const std::vector<const float*>& maps, const std::vector<std::string>& titles, int64_t grid_cols,
                    int64_t rows, int64_t cols, const std::vector<std::string>& row_labels,
                    const std::vector<std::string>& col_labels, const HeatmapOptions& options);

// "0.87" / "0.9": a weight with the given decimals, as the lessons' .2f / .1f print it.
std::string format_weight(double w, int decimals);

}  // namespace attnkit::render

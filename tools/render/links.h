// Link diagrams in the style of BertViz's head view: queries in a column on the left, keys on
// the right, a line from each query to each key whose opacity and width grow with the weight,
// one colour per head. Lines lighter than min_weight are left out (they would be invisible).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/render/figure.h"

namespace attnkit::render {

struct LinkOptions {
  std::string title;
  std::string left_caption = "queries", right_caption = "keys";
  // Lighter links are left out: < 0 means 0.01, or 0.05 for more than 32 tokens (where the
  // many faint lines of a long sequence would only grey the picture).
  double min_weight = -1;
};

double effective_min_weight(const LinkOptions& options, int64_t rows, int64_t cols);

// One diagram: one or more heads' [rows, cols] maps drawn over each other, each in
// head_color(head); the legend names the heads when there are several.
struct LinkPanel {
  std::vector<std::pair<const float*, int64_t>> maps;  // (weights, head index)
  std::string title;
};

// Link diagrams draw at most this many queries and keys: a line per weight and a label per
// token stop being readable (or small) beyond it.
constexpr int64_t kMaxLinkTokens = 512;

// Panels side by side, `grid_cols` per row. Each drawn link is a line of class "link" whose
// tooltip names query, key and weight. Titles shrink and wrap to fit (fit_text), labels wider
// than 160 pixels are elided, the legend wraps onto more rows. Throws Error beyond
// kMaxLinkTokens.
Figure link_figure(const std::vector<LinkPanel>& panels, int64_t grid_cols, int64_t rows, int64_t cols,
                   const std::vector<std::string>& query_labels, const std::vector<std::string>& key_labels,
                   const LinkOptions& options);

// How many links link_figure draws for these panels (weights >= min_weight, as resolved by
// effective_min_weight).
int64_t count_links(const std::vector<LinkPanel>& panels, int64_t rows, int64_t cols, double min_weight);

}  // namespace attnkit::render

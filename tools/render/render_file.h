// `attnkit render`'s work, as library calls: one attention .npy to a PNG, SVG or HTML file, or a
// whole run folder (attention.npy, meta.json, loss.csv, …) to its pictures and report.html.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/render/attention_array.h"
#include "tools/render/color.h"

namespace attnkit::render {

struct RenderRequest {
  std::string input;                      // .npy: [Tq, Tk], [H, Tq, Tk] or [L, H, Tq, Tk]
  std::string output;                     // .png, .svg or .html
  std::vector<std::string> key_tokens;    // labels of the keys (columns); empty: positions
  std::vector<std::string> query_tokens;  // labels of the queries (rows); empty: key_tokens if square
  int64_t layer = -1, head = -1;          // one map only (−1: all)
  int64_t index = -1;                     // entry of an [N, L, H, Tq, Tk] array (infer --data's
                                          // attention.npy, snapshots.npy), read alone; −1: none
  std::string view = "heatmap";           // "heatmap" or "links" (PNG/SVG)
  std::string title;                      // default: the file's name and what is drawn
  int decimals = -1;                      // values in cells: −1 auto, 0 none, 1 or 2
  Colormap map = Colormap::kBlues;
  double scale = 2;                       // PNG pixels per logical pixel
};

// Draws the request's picture or report; returns warnings about the input (see
// attention_warnings). Throws attnkit::Error with a clear message on bad input: unreadable or
// non-attention array, wrong number of tokens, layer or head out of range, unknown format.
std::vector<std::string> render_attention_file(const RenderRequest& request);

struct RunRenderOptions {
  double scale = 2;
  Colormap map = Colormap::kBlues;
};

// A run's data, in memory (tools/run_folder.h reads or builds it): the pictures are drawn from
// this, never from files read back.
struct RunPictures {
  AttentionArray attention;             // [layers, heads, T, T]
  std::vector<float> rollout;           // [T, T] (empty: none)
  std::vector<int64_t> snapshot_steps;  // and the maps at those steps, [steps, layers, heads, T, T]
  std::vector<float> snapshots;
  std::vector<float> losses;            // one per step (empty: none)
  nlohmann::json meta;                  // meta.json: task, step, sample, labels, tokens, targets, predictions
  nlohmann::json metrics;               // metrics.json (an object, possibly empty)
  std::string task;                     // the title's name when meta has none
};

// Writes into out_dir: attention.png (layers × heads heatmaps), links.png (link diagrams),
// rollout.png, snapshots.png, loss.png (each when its data is there) and report.html. Returns the
// names written. Maps over kMaxLinkTokens (kMaxReportTokens) a side get no links.png
// (report.html): *skipped, when given, gets one line naming what was left out and why ("" when
// nothing was). Throws attnkit::Error when a picture cannot be drawn or written.
std::vector<std::string> render_run(const RunPictures& run, const std::string& out_dir,
                                    const RunRenderOptions& options = {}, std::string* skipped = nullptr);

// Whitespace-separated tokens of a --tokens argument.
std::vector<std::string> split_tokens(const std::string& text);

}  // namespace attnkit::render

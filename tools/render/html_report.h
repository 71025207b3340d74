// report.html: one self-contained page per run — all CSS, JavaScript and data inline, nothing
// loaded over the network — with the run's settings and accuracy, the loss curve, the head view
// (link diagram; hover a token to isolate its links, toggle heads), the model view (layers ×
// heads thumbnails; click one to enlarge it), heatmaps with values on hover, the rollout and
// the snapshots over training with a slider. Maps are drawn on <canvas>, so T = 128 with
// 8 × 8 heads stays responsive.
//
// When its script has run, the element #attnkit-status has data-status="ready" (or "error"
// with data-error, also on any uncaught error or console.error), data-layers and data-heads.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/render/attention_array.h"
#include "tools/render/color.h"

namespace attnkit::render {

// The largest maps a report shows (tokens a side): each is drawn on canvases and as a link per
// weight in the head view, and its weights are inlined; html_report throws Error beyond it.
constexpr int64_t kMaxReportTokens = 512;

struct ReportData {
  std::string title;                                          // page heading
  std::string subtitle;                                       // one line under it
  std::vector<std::pair<std::string, std::string>> summary;   // headline numbers (accuracy, loss, …)
  std::vector<std::pair<std::string, std::string>> settings;  // model and training settings
  AttentionArray attention;                                   // the maps of one sequence
  std::vector<std::string> query_labels, key_labels;          // empty: positions
  // Rows of the sequence table (e.g. tokens, targets, predictions); a row named "predictions"
  // is marked where it differs from a row named "targets".
  std::vector<std::pair<std::string, std::vector<std::string>>> sequence;
  std::vector<float> losses;             // per step
  std::vector<float> rollout;            // [rows, rows], or empty
  std::vector<int64_t> snapshot_steps;   // with snapshots [steps, layers, heads, rows, cols]
  std::vector<float> snapshots;
  std::vector<std::string> notes;        // warnings shown at the top
  Colormap map = Colormap::kBlues;
};

std::string html_report(const ReportData& data);
void write_html_report(const std::string& path, const ReportData& data);

}  // namespace attnkit::render

// render_run: the pictures and the report of a run folder.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/npy.h"
#include "tools/render/attention_array.h"
#include "tools/render/heatmap.h"
#include "tools/render/html_report.h"
#include "tools/render/links.h"
#include "tools/render/loss_curve.h"
#include "tools/render/render_file.h"

namespace attnkit::render {
namespace fs = std::filesystem;
namespace {

// A JSON value as text: strings bare, floats with 6 significant digits (0.003, not 0.003000000026).
std::string text_of(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v.get<double>());
    return buf;
  }
  return v.dump();
}

std::string str(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return text_of(j[key]);
}

std::string number(double v, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::vector<std::string> strings(const nlohmann::json& j) {
  std::vector<std::string> out;
  for (const auto& v : j) out.push_back(v.is_null() ? "-" : v.is_string() ? v.get<std::string>() : v.dump());
  return out;
}

std::string head_name(const AttentionArray& a, int64_t l, int64_t h) {
  return a.layers > 1 ? "layer " + std::to_string(l) + " · head " + std::to_string(h) : "head " + std::to_string(h);
}

}  // namespace

std::vector<std::string> render_run(const RunPictures& run, const std::string& out_dir, const RunRenderOptions& o,
                                    std::string* skipped) {
  const fs::path out(out_dir);
  const AttentionArray& a = run.attention;
  const nlohmann::json& meta = run.meta.is_object() ? run.meta : nlohmann::json::object();
  const nlohmann::json& metrics = run.metrics.is_object() ? run.metrics : nlohmann::json::object();
  std::vector<std::string> labels;
  if (meta.contains("labels") && meta["labels"].is_array() && static_cast<int64_t>(meta["labels"].size()) == a.cols &&
      a.rows == a.cols)
    labels = strings(meta["labels"]);
  const std::string task = str(meta, "task", str(metrics, "task", run.task));
  const std::string step = str(meta, "step", "");
  fs::create_directories(out);
  std::vector<std::string> written;
  // Link diagrams and the report stop being readable beyond their limits; the heatmaps scale.
  const int64_t side = std::max(a.rows, a.cols);
  const bool links_fit = side <= kMaxLinkTokens, report_fits = side <= kMaxReportTokens;
  if (skipped) {
    skipped->clear();
    if (!links_fit)
      *skipped += "links.png not drawn (link diagrams show at most " + std::to_string(kMaxLinkTokens) + " tokens a side)";
    if (!report_fits)
      *skipped += std::string(skipped->empty() ? "" : "; ") + "report.html not written (a report shows at most " +
                  std::to_string(kMaxReportTokens) + " tokens a side)";
    if (!skipped->empty()) *skipped = "T = " + std::to_string(side) + ": " + *skipped;
  }

  // attention.png: every head of every layer.
  {
    HeatmapOptions ho;
    ho.map = o.map;
    const std::string what = meta.contains("sample") && !meta["sample"].is_null()
                                 ? "validation sequence " + meta["sample"].dump()
                                 : std::string("the sequence");
    ho.title = task + ": attention on " + what + (step.empty() ? "" : ", step " + step);
    std::vector<const float*> maps;
    std::vector<std::string> titles;
    for (int64_t l = 0; l < a.layers; ++l)
      for (int64_t h = 0; h < a.heads; ++h) maps.push_back(a.map(l, h)), titles.push_back(head_name(a, l, h));
    const Figure f = maps.size() == 1 ? heatmap_figure(maps[0], a.rows, a.cols, labels, labels, ho)
                                      : heatmap_grid(maps, titles, a.heads, a.rows, a.cols, labels, labels, ho);
    save_figure(f, (out / "attention.png").string(), o.scale);
    written.push_back("attention.png");
  }
  // links.png: one link diagram per head, a row per layer (at most 4 per row).
  if (links_fit) {
    LinkOptions lo;
    lo.title = task + ": who looks at whom";
    std::vector<LinkPanel> panels;
    for (int64_t l = 0; l < a.layers; ++l)
      for (int64_t h = 0; h < a.heads; ++h) panels.push_back({{{a.map(l, h), h}}, head_name(a, l, h)});
    save_figure(link_figure(panels, std::min<int64_t>(a.heads, 4), a.rows, a.cols, labels, labels, lo),
                (out / "links.png").string(), o.scale);
    written.push_back("links.png");
  }
  const std::vector<float>& rollout = run.rollout;
  if (!rollout.empty()) {
    HeatmapOptions ho;
    ho.map = o.map;
    ho.title = task + ": attention rollout over " + std::to_string(a.layers) + " layers";
    save_figure(heatmap_figure(rollout.data(), a.rows, a.rows, labels, labels, ho), (out / "rollout.png").string(), o.scale);
    written.push_back("rollout.png");
  }
  const std::vector<int64_t>& snapshot_steps = run.snapshot_steps;
  const std::vector<float>& snapshots = run.snapshots;
  if (!snapshot_steps.empty()) {
    // Columns = steps, a row per head: the lesson's picture of the pattern forming.
    const int64_t S = static_cast<int64_t>(snapshot_steps.size()), per = a.layers * a.heads * a.map_size();
    std::vector<const float*> maps;
    std::vector<std::string> titles;
    for (int64_t l = 0; l < a.layers; ++l)
      for (int64_t h = 0; h < a.heads; ++h)
        for (int64_t k = 0; k < S; ++k) {
          maps.push_back(snapshots.data() + k * per + (l * a.heads + h) * a.map_size());
          titles.push_back((a.layers * a.heads > 1 ? head_name(a, l, h) + ", " : std::string()) + "step " +
                           std::to_string(snapshot_steps[static_cast<size_t>(k)]));
        }
    HeatmapOptions ho;
    ho.map = o.map;
    ho.decimals = 0;
    ho.title = task + ": attention during training";
    const int64_t cols = a.layers * a.heads > 1 ? S : std::min<int64_t>(S, 8);
    save_figure(heatmap_grid(maps, titles, cols, a.rows, a.cols, labels, labels, ho), (out / "snapshots.png").string(),
                o.scale);
    written.push_back("snapshots.png");
  }
  const std::vector<float>& losses = run.losses;
  if (!losses.empty()) {
    LossCurveOptions lo;
    lo.title = task + ": training loss";
    for (int64_t s : snapshot_steps) lo.markers.emplace_back(static_cast<double>(s), std::to_string(s));
    save_figure(loss_curve_figure(losses, lo), (out / "loss.png").string(), o.scale);
    written.push_back("loss.png");
  }

  if (!report_fits) return written;
  ReportData d;
  d.title = "attnkit · " + task;
  d.subtitle = std::to_string(a.layers) + " layer" + (a.layers > 1 ? "s" : "") + " × " + std::to_string(a.heads) +
               " head" + (a.heads > 1 ? "s" : "") + ", T = " + std::to_string(a.rows) +
               (step.empty() ? "" : ", after step " + step);
  if (metrics.contains("val_accuracy") && metrics["val_accuracy"].is_number())
    d.summary.emplace_back("validation accuracy", number(100 * metrics["val_accuracy"].get<double>(), "%.1f %%"));
  if (metrics.contains("val_majority_accuracy") && metrics["val_majority_accuracy"].is_number() &&
      metrics.contains("val_majority_class") && metrics["val_majority_class"].is_number_integer())
    d.summary.emplace_back("always answering " + std::to_string(metrics["val_majority_class"].get<int64_t>()),
                           number(100 * metrics["val_majority_accuracy"].get<double>(), "%.1f %%"));
  if (metrics.contains("final_loss") && metrics["final_loss"].is_number())
    d.summary.emplace_back("final loss", number(metrics["final_loss"].get<double>(), "%.4f"));
  if (metrics.contains("steps")) d.summary.emplace_back("steps", str(metrics, "steps"));
  if (metrics.contains("train_seconds") && metrics["train_seconds"].is_number())
    d.summary.emplace_back("training time", number(metrics["train_seconds"].get<double>(), "%.2f s"));
  if (metrics.contains("steps_per_second") && metrics["steps_per_second"].is_number())
    d.summary.emplace_back("steps per second", number(metrics["steps_per_second"].get<double>(), "%.0f"));
  for (const char* key : {"task", "seed", "epochs", "batch_size", "lr", "train_size", "val_size", "threads", "data",
                          "param_count", "arena_bytes", "arena_lower_bound_bytes"})
    if (metrics.contains(key)) d.settings.emplace_back(key, str(metrics, key));
  if (metrics.contains("model") && metrics["model"].is_object())
    for (const auto& [k, v] : metrics["model"].items()) d.settings.emplace_back("model." + k, text_of(v));
  if (meta.contains("tokens") && meta["tokens"].is_array()) d.sequence.emplace_back("tokens", strings(meta["tokens"]));
  if (meta.contains("targets") && meta["targets"].is_array()) d.sequence.emplace_back("targets", strings(meta["targets"]));
  if (meta.contains("predictions") && meta["predictions"].is_array())
    d.sequence.emplace_back("predictions", strings(meta["predictions"]));
  for (auto& row : d.sequence)
    for (auto& v : row.second)
      if (v == "-1") v = "-";  // no answer at this position
  d.attention = a;
  d.query_labels = labels, d.key_labels = labels;
  d.losses = losses;
  d.rollout = rollout;
  d.snapshot_steps = snapshot_steps;
  d.snapshots = snapshots;
  d.notes = attention_warnings(a, "attention.npy");
  d.map = o.map;
  write_html_report((out / "report.html").string(), d);
  written.push_back("report.html");
  return written;
}

}  // namespace attnkit::render

#include "tools/render/render_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "engine/error.h"
#include "engine/npy.h"
#include "tools/render/attention_array.h"
#include "tools/render/heatmap.h"
#include "tools/render/html_report.h"
#include "tools/render/links.h"

namespace attnkit::render {
namespace fs = std::filesystem;

std::vector<std::string> split_tokens(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream ss(text);
  for (std::string t; ss >> t;) out.push_back(t);
  return out;
}

namespace {

std::string extension(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

std::string map_name(const AttentionArray& a, int64_t l, int64_t h) {
  if (a.rank == 2) return "";
  return a.rank == 4 ? "layer " + std::to_string(l) + " · head " + std::to_string(h) : "head " + std::to_string(h);
}

}  // namespace

std::vector<std::string> render_attention_file(const RenderRequest& r) {
  const std::string ext = extension(r.output);
  if (ext != ".png" && ext != ".svg" && ext != ".html")
    throw Error("--out " + r.output + ": unknown format '" + ext + "' (use .png, .svg or .html)");
  if (r.view != "heatmap" && r.view != "links") throw Error("--view " + r.view + ": use heatmap or links");
  // With --index only that entry's bytes are read (the file may hold maps of millions of sequences).
  const std::string input = r.index < 0 ? r.input : r.input + " entry " + std::to_string(r.index);
  AttentionArray a = r.index < 0 ? read_attention(r.input) : attention_from_npy(read_npy_entry(r.input, r.index), input);
  std::vector<std::string> warnings = attention_warnings(a, input);
  const std::string shape = "[" + (a.rank == 4 ? std::to_string(a.layers) + ", " : "") +
                            (a.rank >= 3 ? std::to_string(a.heads) + ", " : "") + std::to_string(a.rows) + ", " +
                            std::to_string(a.cols) + "]";
  if (!r.key_tokens.empty() && static_cast<int64_t>(r.key_tokens.size()) != a.cols)
    throw Error("--tokens: " + std::to_string(r.key_tokens.size()) + " tokens given, but " + input + " " + shape +
                " has " + std::to_string(a.cols) + " keys (columns)");
  std::vector<std::string> queries = r.query_tokens;
  if (queries.empty() && a.rows == a.cols) queries = r.key_tokens;
  if (!r.query_tokens.empty() && static_cast<int64_t>(queries.size()) != a.rows)
    throw Error("--query-tokens: " + std::to_string(queries.size()) + " tokens given, but " + input + " " + shape +
                " has " + std::to_string(a.rows) + " queries (rows)");
  if (r.layer >= 0 && a.rank < 4) throw Error("--layer: " + input + " " + shape + " has no layer axis");
  if (r.head >= 0 && a.rank < 3) throw Error("--head: " + input + " " + shape + " has no head axis");
  if (r.layer >= a.layers) throw Error("--layer " + std::to_string(r.layer) + " is out of range (" + std::to_string(a.layers) + " layers)");
  if (r.head >= a.heads) throw Error("--head " + std::to_string(r.head) + " is out of range (" + std::to_string(a.heads) + " heads)");

  // The maps selected by --layer / --head, as (layer, head) pairs.
  std::vector<std::pair<int64_t, int64_t>> picked;
  for (int64_t l = 0; l < a.layers; ++l)
    for (int64_t h = 0; h < a.heads; ++h)
      if ((r.layer < 0 || l == r.layer) && (r.head < 0 || h == r.head)) picked.emplace_back(l, h);
  const std::string name = fs::path(r.input).filename().string() + (r.index < 0 ? "" : " [" + std::to_string(r.index) + "]");

  if (ext == ".html") {
    // The report draws every map on canvases and a link per weight in its head view.
    if (std::max(a.rows, a.cols) > kMaxReportTokens)
      throw Error("--out " + r.output + ": report.html shows maps of at most " + std::to_string(kMaxReportTokens) +
                  " tokens a side; " + input + " " + shape + " has " + std::to_string(a.rows) + " x " +
                  std::to_string(a.cols) + " (a .png or .svg draws it, in blocks)");
    ReportData d;
    d.title = r.title.empty() ? name : r.title;
    d.subtitle = "Attention " + shape + " from " + input;
    AttentionArray sel = a;
    if (picked.size() != static_cast<size_t>(a.layers * a.heads)) {  // keep only the chosen maps
      sel.weights.clear();
      for (const auto& [l, h] : picked) sel.weights.insert(sel.weights.end(), a.map(l, h), a.map(l, h) + a.map_size());
      sel.layers = r.layer >= 0 ? 1 : a.layers, sel.heads = r.head >= 0 ? 1 : a.heads;
    }
    d.attention = std::move(sel);
    d.query_labels = queries, d.key_labels = r.key_tokens;
    d.notes = warnings;
    d.map = r.map;
    write_html_report(r.output, d);
    return warnings;
  }

  // A picture wider or taller than a PNG may be (32768 pixels, at one pixel per point at the
  // least): an error naming the array and what to draw instead, before anything is rasterized.
  auto save = [&](const Figure& f, size_t maps) {
    const double scale = png_pixel_scale(f, r.scale);
    const double w = std::ceil(f.width() * scale), h = std::ceil(f.height() * scale);
    if (is_png_path(r.output) && std::max(w, h) > 32768)
      throw Error(input + " " + shape + ": " + std::to_string(maps) + " map" + (maps == 1 ? "" : "s") + " of " +
                  std::to_string(a.rows) + " x " + std::to_string(a.cols) + " make a picture of " +
                  std::to_string(static_cast<long long>(w)) + " x " + std::to_string(static_cast<long long>(h)) +
                  " pixels, over a PNG's 32768 a side: pick maps with --layer L and --head H, or write .svg");
    save_figure(f, r.output, r.scale);
  };

  if (r.view == "links") {
    if (std::max(a.rows, a.cols) > kMaxLinkTokens)
      throw Error("--view links: " + input + " " + shape + " has " + std::to_string(a.rows) + " queries x " +
                  std::to_string(a.cols) + " keys; link diagrams are drawn for at most " +
                  std::to_string(kMaxLinkTokens) + " tokens a side (the heatmap view draws any size)");
    LinkOptions o;
    o.title = r.title.empty() ? name : r.title;
    std::vector<LinkPanel> panels;
    for (const auto& [l, h] : picked) {
      const std::string title = map_name(a, l, h);
      panels.push_back({{{a.map(l, h), h}}, title});
    }
    save(link_figure(panels, std::min<int64_t>(4, a.heads), a.rows, a.cols, queries, r.key_tokens, o), panels.size());
    return warnings;
  }
  HeatmapOptions o;
  o.decimals = r.decimals;
  o.map = r.map;
  if (picked.size() == 1) {
    const auto [l, h] = picked[0];
    const std::string what = map_name(a, l, h);
    o.title = !r.title.empty() ? r.title : what.empty() ? name : name + ": " + what;
    if (const std::string note = heatmap_block_note(a.rows, a.cols); !note.empty()) warnings.push_back(name + ": " + note);
    save(heatmap_figure(a.map(l, h), a.rows, a.cols, queries, r.key_tokens, o), 1);
  } else {
    o.title = r.title.empty() ? name : r.title;
    std::vector<const float*> maps;
    std::vector<std::string> titles;
    for (const auto& [l, h] : picked) maps.push_back(a.map(l, h)), titles.push_back(map_name(a, l, h));
    const int64_t cols = r.head >= 0 ? std::min<int64_t>(8, static_cast<int64_t>(picked.size())) : a.heads;
    const std::string note = heatmap_block_note(a.rows, a.cols, static_cast<int64_t>(maps.size()));
    if (!note.empty()) warnings.push_back(name + ": " + note);
    save(heatmap_grid(maps, titles, cols, a.rows, a.cols, queries, r.key_tokens, o), maps.size());
  }
  return warnings;
}

}  // namespace attnkit::render

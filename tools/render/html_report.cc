#include "tools/render/html_report.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/file_io.h"
#include "tools/render/embedded.h"
#include "tools/render/figure.h"

namespace attnkit::render {
namespace {

// Little-endian float32 values as base64: exact, and ~4× smaller than JSON numbers.
std::string base64_floats(const std::vector<float>& values) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &values[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<uint8_t>(u >> (8 * b));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (static_cast<uint32_t>(bytes[i]) << 16) |
                       (i + 1 < bytes.size() ? static_cast<uint32_t>(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? bytes[i + 2] : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

std::string settings_list(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string out = "<dl class=\"settings\">";
  for (const auto& [k, v] : rows) out += "<div><dt>" + xml_escape(k) + "</dt><dd>" + xml_escape(v) + "</dd></div>";
  return out + "</dl>";
}

std::string sequence_table(const ReportData& d) {
  if (d.sequence.empty()) return {};
  const std::vector<std::string>* targets = nullptr;
  for (const auto& [name, values] : d.sequence)
    if (name == "targets") targets = &values;
  std::string out = "<section id=\"sequence-section\"><h2>The sequence</h2><div class=\"scroll\"><table class=\"sequence\">";
  for (const auto& [name, values] : d.sequence) {
    out += "<tr><th>" + xml_escape(name) + "</th>";
    for (size_t i = 0; i < values.size(); ++i) {
      const bool wrong = name == "predictions" && targets && i < targets->size() && (*targets)[i] != values[i] &&
                         (*targets)[i] != "-";
      out += std::string(wrong ? "<td class=\"wrong\" title=\"differs from the target\">" : "<td>") +
             xml_escape(values[i]) + "</td>";
    }
    out += "</tr>";
  }
  return out + "</table></div></section>";
}

}  // namespace

std::string html_report(const ReportData& d) {
  const AttentionArray& a = d.attention;
  if (a.weights.empty() || static_cast<int64_t>(a.weights.size()) != a.layers * a.heads * a.rows * a.cols)
    throw Error("report: the attention maps are missing or do not match their shape");
  if (std::max(a.rows, a.cols) > kMaxReportTokens)
    throw Error("report: maps of " + std::to_string(a.rows) + " x " + std::to_string(a.cols) + " tokens; a report shows at most " +
                std::to_string(kMaxReportTokens) + " a side");
  nlohmann::json j;
  j["layers"] = a.layers, j["heads"] = a.heads, j["rows"] = a.rows, j["cols"] = a.cols;
  j["attention"] = base64_floats(a.weights);
  auto labels = [](const std::vector<std::string>& l, int64_t n) {
    if (!l.empty()) return l;
    std::vector<std::string> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
    return out;
  };
  j["queryLabels"] = labels(d.query_labels, a.rows);
  j["keyLabels"] = labels(d.key_labels, a.cols);
  if (j["queryLabels"].size() != static_cast<size_t>(a.rows) || j["keyLabels"].size() != static_cast<size_t>(a.cols))
    throw Error("report: the number of token labels does not match the maps' shape");
  j["losses"] = d.losses;
  j["rollout"] = d.rollout.empty() ? nlohmann::json(nullptr) : nlohmann::json(base64_floats(d.rollout));
  if (!d.rollout.empty() && static_cast<int64_t>(d.rollout.size()) != a.rows * a.rows)
    throw Error("report: the rollout map is not [T, T]");
  j["snapshotSteps"] = d.snapshot_steps;
  j["snapshots"] = d.snapshots.empty() ? nlohmann::json(nullptr) : nlohmann::json(base64_floats(d.snapshots));
  if (d.snapshots.size() != d.snapshot_steps.size() * a.weights.size())
    throw Error("report: snapshots do not match their steps and the maps' shape");
  nlohmann::json ramp = nlohmann::json::array();
  for (int k = 0; k <= 72; ++k) {
    const Color c = colormap(d.map, k / 72.0);
    ramp.push_back({c.r, c.g, c.b});
  }
  j["colormap"] = ramp;
  nlohmann::json heads = nlohmann::json::array();
  for (int64_t h = 0; h < a.heads; ++h) heads.push_back(head_color(h).hex());
  j["headColors"] = heads;
  std::string json = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // No "<" in the data block, so a label like "</script>" or "<!--" cannot end or bend it;
  // "\u003c" is the same JSON string ("<" only occurs inside strings).
  for (size_t p = json.find('<'); p != std::string::npos; p = json.find('<', p + 6)) json.replace(p, 1, "\\u003c");

  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>" + xml_escape(d.title) + "</title>\n<style>\n";
  html += report_style();
  html += "</style>\n</head>\n<body>\n";
  html += "<div id=\"attnkit-status\" data-status=\"loading\" role=\"status\">Drawing the report… (it needs JavaScript)</div>\n";
  html += "<header><h1>" + xml_escape(d.title) + "</h1>";
  if (!d.subtitle.empty()) html += "<p class=\"subtitle\">" + xml_escape(d.subtitle) + "</p>";
  if (!d.summary.empty()) {
    html += "<div class=\"summary\">";
    for (const auto& [k, v] : d.summary)
      html += "<div class=\"stat\"><div class=\"value\">" + xml_escape(v) + "</div><div class=\"label\">" + xml_escape(k) +
              "</div></div>";
    html += "</div>";
  }
  html += "</header>\n<main>\n";
  for (const auto& note : d.notes) html += "<p class=\"note\">" + xml_escape(note) + "</p>\n";
  if (!d.settings.empty())
    html += "<section id=\"settings-section\"><h2>Settings</h2>" + settings_list(d.settings) + "</section>\n";
  html += sequence_table(d) + "\n";
  html += "<section id=\"loss-section\" hidden><h2>Loss</h2><p class=\"hint\">Loss per training step; hover for values.</p>"
          "<div id=\"loss\"></div></section>\n";
  html += "<section id=\"head-view\"><h2>Head view</h2><p class=\"hint\">Each line joins a query (left) to a key (right); "
          "the stronger the weight, the more opaque the line. Hover a token to see only its links; click the heads to "
          "show or hide them.</p><div id=\"head-controls\" class=\"controls\"></div><div id=\"links\" class=\"scroll\"></div></section>\n";
  html += "<section id=\"model-view\"><h2>Model view</h2><p class=\"hint\">Every head of every layer; click one to "
          "enlarge it below.</p><div id=\"thumbs\" class=\"scroll\"></div></section>\n";
  html += "<section id=\"detail-section\"><h2 id=\"detail-title\">Heatmap</h2><p class=\"hint\">Rows are queries "
          "(who looks), columns are keys (at whom); hover a cell for its weight.</p><div id=\"detail\" class=\"scroll\"></div></section>\n";
  html += "<section id=\"rollout-section\" hidden><h2>Attention rollout</h2><p class=\"hint\">Where information comes "
          "from across all layers: each layer's head average A becomes 0.5·A + 0.5·I, rows renormalized, multiplied "
          "in order.</p><div id=\"rollout\" class=\"scroll\"></div></section>\n";
  html += "<section id=\"snapshots-section\" hidden><h2>During training</h2><p class=\"hint\">The same sequence's "
          "attention at several steps of training; drag the slider or click a step.</p>"
          "<div id=\"snapshot-controls\" class=\"controls\"></div><div id=\"snapshot-strip\" class=\"scroll\"></div>"
          "<div id=\"snapshot\" class=\"scroll\"></div></section>\n";
  html += "</main>\n<div id=\"tip\" hidden></div>\n";
  html += "<footer>Made by attnkit. Self-contained: opens from disk, loads nothing.</footer>\n";
  html += "<script type=\"application/json\" id=\"attnkit-data\">" + json + "</script>\n<script>\n";
  html += report_script();
  html += "</script>\n</body>\n</html>\n";
  return html;
}

void write_html_report(const std::string& path, const ReportData& data) {
  const std::string html = html_report(data);
  write_file_atomic(path, html.data(), html.size());
}

}  // namespace attnkit::render

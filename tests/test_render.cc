// Pictures and reports (tools/render/): PNGs decoded back with libpng (size, a cell's colour),
// SVGs parsed as XML by Python's xml.etree (cells and links counted), input checks, a run
// folder rendered whole, report.html opened in headless Chromium, and `attnkit render`.
#include <catch2/catch.hpp>

#include "skip_test_util.h"

#ifndef ATTNKIT_NO_RENDER
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <sstream>

#include "engine/error.h"
#include "engine/npy.h"
#include "tools/render/attention_array.h"
#include "tools/render/heatmap.h"
#include "tools/render/html_report.h"
#include "tools/render/links.h"
#include "tools/render/loss_curve.h"
#include "tools/render/png.h"
#include "tools/render/render_file.h"
#include "tools/run_folder.h"

using namespace attnkit;
using namespace attnkit::render;
namespace fs = std::filesystem;

namespace {

// Lesson 000's translation alignment: 5 target words (queries) × 7 source words (keys).
const float kAlign[35] = {0.02f, 0.90f, 0.05f, 0.01f, 0.00f, 0.01f, 0.01f,  //
                          0.10f, 0.05f, 0.82f, 0.02f, 0.00f, 0.00f, 0.01f,  //
                          0.01f, 0.01f, 0.08f, 0.88f, 0.01f, 0.00f, 0.01f,  //
                          0.00f, 0.00f, 0.00f, 0.03f, 0.94f, 0.02f, 0.01f,  //
                          0.01f, 0.00f, 0.00f, 0.01f, 0.04f, 0.12f, 0.82f};
const std::vector<std::string> kSrc = {"the", "black", "cat", "sat", "on", "the", "mat"};
const std::vector<std::string> kDst = {"чёрная", "кошка", "сидела", "на", "коврике"};

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(ATTNKIT_BINARY_DIR) / "test_render_tmp" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Shell {
  int code;
  std::string out, err;
};

Shell sh(const std::string& command, const fs::path& dir) {
  const fs::path out = dir / "stdout.txt", err = dir / "stderr.txt";
  const int status = std::system((command + " > '" + out.string() + "' 2> '" + err.string() + "'").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

bool has_program(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// Elements of an SVG, counted by Python's XML parser (which rejects malformed XML): prints
// "<cells> <links> <texts>".
std::string count_svg_elements(const fs::path& svg, const fs::path& dir) {
  const fs::path py = dir / "count.py";
  std::ofstream(py) << "import sys, xml.etree.ElementTree as ET\n"
                       "root = ET.parse(sys.argv[1]).getroot()\n"
                       "ns = '{http://www.w3.org/2000/svg}'\n"
                       "cells = [e for e in root.iter(ns + 'rect') if e.get('class') == 'cell']\n"
                       "links = [e for e in root.iter(ns + 'line') if e.get('class') == 'link']\n"
                       "texts = list(root.iter(ns + 'text'))\n"
                       "print(len(cells), len(links), len(texts))\n";
  const Shell r = sh("/usr/bin/python3 '" + py.string() + "' '" + svg.string() + "'", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return r.out.substr(0, r.out.find('\n'));
}

// The cell rects of a figure, in drawing order (row-major).
std::vector<render::Shape> cells_of(const Figure& f) {
  std::vector<render::Shape> cells;
  for (const render::Shape& s : f.shapes())
    if (s.kind == render::Shape::kRect && s.cls == "cell") cells.push_back(s);
  return cells;
}

// Softmax rows with a peak, [n_maps, t, t].
std::vector<float> peaked_maps(int64_t n_maps, int64_t t, int shift) {
  std::vector<float> w(static_cast<size_t>(n_maps * t * t));
  for (int64_t m = 0; m < n_maps; ++m)
    for (int64_t i = 0; i < t; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < t; ++j) {
        const double v = j == (i + shift + m) % t ? 6.0 : std::cos(static_cast<double>(i * 7 + j * 3 + m)) + 1.0;
        w[static_cast<size_t>((m * t + i) * t + j)] = static_cast<float>(v), sum += v;
      }
      for (int64_t j = 0; j < t; ++j) w[static_cast<size_t>((m * t + i) * t + j)] /= static_cast<float>(sum);
    }
  return w;
}

}  // namespace

TEST_CASE("colour scale: fixed 0..1, anchors exact, clamped outside", "[render]") {
  CHECK(colormap(Colormap::kBlues, 0) == Color{247, 251, 255});
  CHECK(colormap(Colormap::kBlues, 1) == Color{8, 48, 107});
  CHECK(colormap(Colormap::kBlues, 0.5) == Color{107, 174, 214});
  CHECK(colormap(Colormap::kBlues, -3) == colormap(Colormap::kBlues, 0));
  CHECK(colormap(Colormap::kBlues, 7) == colormap(Colormap::kBlues, 1));
  CHECK(colormap(Colormap::kViridis, 0) == Color{68, 1, 84});
  CHECK(colormap(Colormap::kViridis, 1) == Color{253, 231, 37});
  CHECK(text_on(colormap(Colormap::kBlues, 1)) == kWhite);
  CHECK(text_on(colormap(Colormap::kBlues, 0)) == kInk);
  CHECK_THROWS_WITH(colormap_from_name("jet"), Catch::Contains("unknown colour map 'jet'"));
}

TEST_CASE("heatmap PNG decodes with the figure's size, a cell has the scale's colour for its weight", "[render]") {
  const fs::path dir = scratch("heatmap_png");
  HeatmapOptions o;
  o.title = "Те же веса тепловой картой";
  o.decimals = 0;  // no text in the cells, so their centre pixels are the pure colour
  const Figure f = heatmap_figure(kAlign, 5, 7, kDst, kSrc, o);
  const std::vector<render::Shape> cells = cells_of(f);
  REQUIRE(cells.size() == 35);
  for (double scale : {1.0, 2.0}) {
    const fs::path png = dir / ("align" + std::to_string(static_cast<int>(scale)) + ".png");
    save_figure(f, png.string(), scale);
    const Image img = read_png(png.string());
    CHECK(img.width() == static_cast<int>(std::ceil(f.width() * scale)));
    CHECK(img.height() == static_cast<int>(std::ceil(f.height() * scale)));
    for (int k : {1, 9, 17, 25, 33, 0, 4}) {  // "black", "cat", "sat", "on", "mat", and two light cells
      const render::Shape& c = cells[static_cast<size_t>(k)];
      const int x = static_cast<int>((c.x + c.w / 2) * scale), y = static_cast<int>((c.y + c.h / 2) * scale);
      INFO("cell " << k << " weight " << kAlign[k] << " scale " << scale);
      CHECK(img.at(x, y) == colormap(Colormap::kBlues, kAlign[k]));
    }
    // The title is drawn: dark pixels above the map.
    int dark = 0;
    for (int y = 0; y < static_cast<int>(cells[0].y * scale); ++y)
      for (int x = 0; x < img.width(); ++x) dark += img.at(x, y).luminance() < 0.2;
    CHECK(dark > 50);
  }
}

TEST_CASE("values in cells follow the lesson's .1f / .2f, zero rounds without a minus", "[render]") {
  CHECK(format_weight(0.8731, 2) == "0.87");
  CHECK(format_weight(0.8731, 1) == "0.9");
  CHECK(format_weight(-0.0001, 2) == "0.00");
  HeatmapOptions o;
  o.decimals = 2;
  const Figure f = heatmap_figure(kAlign, 5, 7, kDst, kSrc, o);
  int values = 0;
  for (const render::Shape& s : f.shapes()) values += s.kind == render::Shape::kText && s.text == "0.94";
  CHECK(values == 1);
  CHECK_THROWS_WITH(heatmap_figure(kAlign, 5, 7, kSrc, kSrc, o), Catch::Contains("7 row labels for 5 rows"));
}

TEST_CASE("SVGs parse as XML, cells and drawn links are counted", "[render]") {
  if (!has_program("/usr/bin/python3")) ATTNKIT_SKIP("/usr/bin/python3 is absent, SVGs not parsed");
  const fs::path dir = scratch("svg");
  HeatmapOptions ho;
  ho.title = "Куда смотрит <переводчик> & co";  // escaped in XML
  save_figure(heatmap_figure(kAlign, 5, 7, kDst, kSrc, ho), (dir / "heatmap.svg").string(), 1);
  CHECK(count_svg_elements(dir / "heatmap.svg", dir).rfind("35 0 ", 0) == 0);
  // Labels that are not UTF-8 (bytes 0xFF 0xFE, a cut-off sequence, a control character) still
  // give well-formed XML: U+FFFD in their place, as in the HTML report.
  std::vector<std::string> odd = kSrc;
  odd[0] = "\xff\xfe a";
  odd[1] = "cat\xd0";
  odd[2] = "x\x01y";
  ho.title = "\xc3(";
  save_figure(heatmap_figure(kAlign, 5, 7, kDst, odd, ho), (dir / "odd.svg").string(), 1);
  CHECK(count_svg_elements(dir / "odd.svg", dir).rfind("35 0 ", 0) == 0);
  CHECK(xml_escape("\xff<\xe2\x82\xac>\x01") == "\xef\xbf\xbd&lt;\xe2\x82\xac&gt;");  // €, escaped, dropped

  LinkOptions lo;
  lo.title = "Куда смотрит переводчик";
  const std::vector<LinkPanel> panels = {{{{kAlign, 0}}, "head 0"}};
  const double min_weight = effective_min_weight(lo, 5, 7);
  CHECK(min_weight == 0.01);
  CHECK(effective_min_weight(lo, 40, 40) == 0.05);  // long sequences: only the visible links
  int64_t nonzero = 0;
  for (float w : kAlign) nonzero += w > 0;
  CHECK(nonzero == 26);  // the 9 zeros of the matrix are not drawn, every 0.01 is
  REQUIRE(count_links(panels, 5, 7, min_weight) == nonzero);
  save_figure(link_figure(panels, 1, 5, 7, kDst, kSrc, lo), (dir / "links.svg").string(), 1);
  CHECK(count_svg_elements(dir / "links.svg", dir).rfind("0 " + std::to_string(nonzero) + " ", 0) == 0);

  // Two heads overlaid and side by side: every drawn weight is one line.
  const std::vector<float> maps = peaked_maps(2, 6, 1);
  const std::vector<LinkPanel> two = {{{{maps.data(), 0}}, "head 0"},
                                      {{{maps.data() + 36, 1}}, "head 1"},
                                      {{{maps.data(), 0}, {maps.data() + 36, 1}}, "both"}};
  LinkOptions o2;
  o2.min_weight = 0.05;
  save_figure(link_figure(two, 3, 6, 6, {}, {}, o2), (dir / "links2.svg").string(), 1);
  const int64_t expected = count_links(two, 6, 6, 0.05);
  CHECK(expected > 0);
  CHECK(expected < 2 * 2 * 36);
  CHECK(count_svg_elements(dir / "links2.svg", dir).rfind("0 " + std::to_string(expected) + " ", 0) == 0);
}

TEST_CASE("loss curve: nice ticks, PNG of the figure's size", "[render]") {
  CHECK(nice_ticks(0, 376, 6) == std::vector<double>{0, 100, 200, 300});
  CHECK(nice_ticks(0, 2.5, 5) == std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5});
  std::vector<float> losses;
  for (int k = 0; k < 200; ++k) losses.push_back(static_cast<float>(2.3 * std::exp(-k / 40.0) + 0.05 * std::sin(k)));
  losses[50] = NAN;  // a gap, not a crash
  const Figure f = loss_curve_figure(losses, {});
  const fs::path dir = scratch("loss");
  save_figure(f, (dir / "loss.png").string(), 1);
  const Image img = read_png((dir / "loss.png").string());
  CHECK(img.width() == static_cast<int>(std::ceil(f.width())));
  CHECK(img.height() == static_cast<int>(std::ceil(f.height())));
}

namespace {

// Every text's box (Figure::text_boxes) inside the picture: fails naming the text and its box.
void check_texts_inside(const Figure& f, const std::string& what) {
  INFO(what << ": picture " << f.width() << " x " << f.height());
  size_t k = 0;
  int texts = 0;
  for (const render::Shape& s : f.shapes()) {
    if (s.kind != render::Shape::kText) continue;
    const Box b = f.text_boxes()[k++];
    ++texts;
    INFO("text '" << s.text << "' box [" << b.x0 << ", " << b.y0 << "] - [" << b.x1 << ", " << b.y1 << "]");
    CHECK(b.x0 >= 0);
    CHECK(b.y0 >= 0);
    CHECK(b.x1 <= f.width());
    CHECK(b.y1 <= f.height());
  }
  CHECK(texts > 0);
}

// The words of the texts drawn in `style`'s weight (bold: titles) joined by spaces.
std::string bold_words(const Figure& f, double min_size) {
  std::string words;
  for (const render::Shape& s : f.shapes())
    if (s.kind == render::Shape::kText && s.style.bold && s.style.size >= min_size) words += (words.empty() ? "" : " ") + s.text;
  return words;
}

const std::string kLongTitle =
    "induction: attention on validation sequence 0, step 150, with a title that goes on and on well past "
    "the width of any narrow picture";

}  // namespace

TEST_CASE("fit_text shrinks to the floor, then wraps at spaces, elide ends in an ellipsis", "[render]") {
  const TextStyle title{17, true};
  const TextBlock one = fit_text("short", title, 400, 11);
  CHECK(one.lines == std::vector<std::string>{"short"});
  CHECK(one.style.size == 17);
  const std::string mid = "a title a little too wide";
  const double w = text_width(mid, title);
  const TextBlock shrunk = fit_text(mid, title, w * 0.9, 11);
  REQUIRE(shrunk.lines.size() == 1);
  CHECK(shrunk.style.size < 17);
  CHECK(shrunk.style.size >= 11);
  CHECK(shrunk.width() <= w * 0.9);
  const TextBlock wrapped = fit_text(kLongTitle, title, 200, 11);
  CHECK(wrapped.style.size == 11);
  CHECK(wrapped.lines.size() > 2);
  std::string joined;
  for (const auto& l : wrapped.lines) {
    CHECK(text_width(l, wrapped.style) <= 200);
    joined += (joined.empty() ? "" : " ") + l;
  }
  CHECK(joined == kLongTitle);
  // A word wider than the line breaks between characters (here Cyrillic, two bytes each).
  const TextBlock broken = fit_text("переводчикпереводчикпереводчик", title, 60, 11);
  CHECK(broken.lines.size() > 1);
  std::string rejoined;
  for (const auto& l : broken.lines) {
    CHECK(text_width(l, broken.style) <= 60);
    rejoined += l;
  }
  CHECK(rejoined == "переводчикпереводчикпереводчик");
  CHECK(fit_text("", title, 100, 11).lines.empty());
  const std::string cut = elide("supercalifragilisticexpialidocious", TextStyle{11, false}, 60);
  CHECK(text_width(cut, TextStyle{11, false}) <= 60);
  CHECK(cut.size() > 3);
  CHECK(cut.substr(cut.size() - 3) == "\u2026");
  CHECK(elide("cat", TextStyle{11, false}, 60) == "cat");
}

TEST_CASE("titles, panel titles, captions and labels lie inside narrow pictures", "[render]") {
  const std::string long_label = "a_really_long_token_label_that_never_ends_";
  for (int64_t t = 1; t <= 4; ++t) {
    const std::vector<float> w = peaked_maps(2, t, 1);
    std::vector<std::string> labels;
    for (int64_t i = 0; i < t; ++i) labels.push_back(long_label + std::to_string(i));
    const std::string tt = "T = " + std::to_string(t);
    HeatmapOptions ho;
    ho.title = kLongTitle;
    check_texts_inside(heatmap_figure(w.data(), t, t, {}, {}, ho), "heatmap " + tt);
    check_texts_inside(heatmap_figure(w.data(), t, t, labels, labels, ho), "heatmap, long labels, " + tt);
    ho.row_caption = "queries: the tokens that look, as a caption much longer than the map is tall";
    ho.col_caption = "keys: the tokens looked at, as a caption much longer than the map is wide";
    ho.colorbar = false;
    check_texts_inside(heatmap_figure(w.data(), t, t, {}, {}, ho), "heatmap, long captions, no bar, " + tt);
    // 2 layers × 1 head, as `attnkit train induction` draws them: one column of panels.
    HeatmapOptions go;
    go.title = kLongTitle;
    const std::vector<const float*> maps = {w.data(), w.data() + t * t};
    const Figure grid = heatmap_grid(maps, {"layer 0 · head 0", "layer 1 · head 0"}, 1, t, t, labels, labels, go);
    check_texts_inside(grid, "grid 2 x 1, " + tt);
    CHECK(bold_words(grid, 11) == kLongTitle + " layer 0 · head 0 layer 1 · head 0");  // nothing cut off
    const std::string long_panel = "layer 0 · head 0, " + kLongTitle;
    check_texts_inside(heatmap_grid(maps, {long_panel, long_panel}, 2, t, t, {}, {}, go), "grid 1 x 2, long panel titles, " + tt);

    LinkOptions lo;
    lo.title = kLongTitle;
    const std::vector<LinkPanel> one = {{{{w.data(), 0}}, long_panel}};
    check_texts_inside(link_figure(one, 1, t, t, labels, labels, lo), "links, " + tt);
    std::vector<LinkPanel> heads = {{{}, "eight heads overlaid"}};
    for (int64_t h = 0; h < 8; ++h) heads[0].maps.emplace_back(w.data() + (h % 2) * t * t, h);
    check_texts_inside(link_figure(heads, 1, t, t, {}, {}, lo), "links, 8 heads, " + tt);
  }
  LossCurveOptions lc;
  lc.title = kLongTitle + kLongTitle;
  lc.markers = {{0, "step 0"}, {150, "snapshot at step 150, the last one"}};
  std::vector<float> losses(150, 1.0f);
  check_texts_inside(loss_curve_figure(losses, lc), "loss curve");
}

TEST_CASE("long tick label lists thin out instead of overlapping", "[render]") {
  const int64_t t = 200;
  const std::vector<float> w = peaked_maps(1, t, 0);
  const Figure f = heatmap_figure(w.data(), t, t, {}, {}, {});
  // Row labels: right-anchored texts left of the map; neighbours at least a line apart.
  std::vector<double> ys;
  for (const render::Shape& s : f.shapes())
    if (s.kind == render::Shape::kText && s.anchor == Anchor::kEnd && !s.vertical && s.text.find_first_not_of("0123456789") == std::string::npos)
      ys.push_back(s.y);
  REQUIRE(ys.size() > 5);
  CHECK(ys.size() < static_cast<size_t>(t));
  for (size_t i = 1; i < ys.size(); ++i) CHECK(ys[i] - ys[i - 1] >= 7 * 1.2 - 1e-9);
  check_texts_inside(f, "200 x 200");
}

TEST_CASE("PNG reader rejects damaged files with the file's name", "[render]") {
  const fs::path dir = scratch("png_errors");
  Image img(20, 10, kWhite);
  img.fill_rect(2, 2, 8, 8, Color{200, 10, 10});
  const std::vector<uint8_t> bytes = encode_png(img);
  const Image back = decode_png(bytes.data(), bytes.size(), "ok.png");
  CHECK(back.at(4, 4) == (Color{200, 10, 10}));
  CHECK(back.at(15, 5) == kWhite);
  CHECK_THROWS_WITH(decode_png(bytes.data(), bytes.size() / 2, "half.png"), Catch::Contains("half.png"));
  const std::string text = "not a png at all";
  CHECK_THROWS_WITH(decode_png(reinterpret_cast<const uint8_t*>(text.data()), text.size(), "t.png"),
                    Catch::Contains("t.png: not a PNG"));
}

TEST_CASE("attention input: ranks 2-4 accepted, other shapes, dtypes and NaN are clear errors", "[render]") {
  const std::vector<float> w = peaked_maps(6, 4, 0);
  const AttentionArray a4 = attention_from_npy(make_npy(w.data(), {2, 3, 4, 4}), "a.npy");
  CHECK(a4.layers == 2);
  CHECK(a4.heads == 3);
  CHECK(a4.rows == 4);
  CHECK(attention_warnings(a4, "a.npy").empty());
  const AttentionArray a2 = attention_from_npy(make_npy(kAlign, {5, 7}), "align.npy");
  CHECK((a2.layers == 1 && a2.heads == 1 && a2.rows == 5 && a2.cols == 7));
  const std::vector<double> w64(w.begin(), w.end());  // numpy's default float64, as torch → numpy gives
  CHECK(attention_from_npy(make_npy(w64.data(), {6, 4, 4}), "f64.npy").heads == 6);

  CHECK_THROWS_WITH(attention_from_npy(make_npy(w.data(), {96}), "v.npy"), Catch::Contains("v.npy: shape [96] has rank 1"));
  CHECK_THROWS_WITH(attention_from_npy(make_npy(w.data(), {1, 2, 3, 4, 4}), "s.npy"),
                    Catch::Contains("[1, 2, 3, 4, 4] has rank 5") && Catch::Contains("run folder"));
  const std::vector<int32_t> ints(16, 0);
  CHECK_THROWS_WITH(attention_from_npy(make_npy(ints.data(), {4, 4}), "i.npy"), Catch::Contains("dtype <i4 is not a float"));
  std::vector<float> bad = w;
  bad[5] = NAN;
  CHECK_THROWS_WITH(attention_from_npy(make_npy(bad.data(), {6, 4, 4}), "n.npy"),
                    Catch::Contains("n.npy: weight nan at query 1, key 1"));
  std::vector<double> huge = w64;  // finite in the file, but not a float32
  huge[5] = 1e300;
  CHECK_THROWS_WITH(attention_from_npy(make_npy(huge.data(), {6, 4, 4}), "h.npy"),
                    Catch::Contains("h.npy: weight 1e+300 at query 1, key 1 (map 0) is outside float32's range"));

  std::vector<float> scores = w;
  for (float& x : scores) x = x * 5 - 0.5f;  // not a softmax: negative, above 1, rows summing to 3
  const auto warnings = attention_warnings(attention_from_npy(make_npy(scores.data(), {6, 4, 4}), "s.npy"), "s.npy");
  REQUIRE(warnings.size() == 2);
  CHECK_THAT(warnings[0], Catch::Contains("outside [0, 1]"));
  CHECK_THAT(warnings[1], Catch::Contains("24 of 24 rows do not sum to 1"));
}

TEST_CASE("render_attention_file: PNG, SVG and HTML of any attention array, token and range errors", "[render]") {
  const fs::path dir = scratch("render_file");
  const std::vector<float> w = peaked_maps(8, 5, 1);
  write_npy((dir / "attn.npy").string(), w.data(), {2, 4, 5, 5});
  write_npy((dir / "align.npy").string(), kAlign, {5, 7});
  RenderRequest r;
  r.input = (dir / "attn.npy").string();
  r.key_tokens = {"a", "b", "c", "d", "e"};
  for (const char* out : {"grid.png", "grid.svg", "report.html"}) {
    r.output = (dir / out).string();
    CHECK(render_attention_file(r).empty());
    CHECK(fs::file_size(r.output) > 1000);
  }
  r.layer = 1, r.head = 2, r.output = (dir / "one.png").string();
  render_attention_file(r);
  r.view = "links", r.output = (dir / "one_links.svg").string();
  render_attention_file(r);
  const Image one = read_png((dir / "one.png").string());
  CHECK(one.width() > 200);

  RenderRequest c;  // cross-attention with both token lists
  c.input = (dir / "align.npy").string();
  c.key_tokens = kSrc, c.query_tokens = kDst;
  c.output = (dir / "align.png").string();
  render_attention_file(c);
  c.view = "links", c.output = (dir / "align_links.png").string();
  render_attention_file(c);

  RenderRequest bad = r;
  bad.view = "heatmap", bad.layer = 2;
  CHECK_THROWS_WITH(render_attention_file(bad), Catch::StartsWith("--layer 2 is out of range (2 layers)"));
  bad = c, bad.key_tokens = {"x", "y"};
  CHECK_THROWS_WITH(render_attention_file(bad), Catch::StartsWith("--tokens: 2 tokens given") && Catch::Contains("7 keys"));
  bad = c, bad.layer = 0;
  CHECK_THROWS_WITH(render_attention_file(bad), Catch::Contains("has no layer axis"));
  bad = c, bad.output = (dir / "x.jpg").string();
  CHECK_THROWS_WITH(render_attention_file(bad), Catch::Contains("unknown format '.jpg'"));
}

namespace {

// What a forked child reports about one render_attention_file call.
struct ChildRender {
  int ok = 0;               // 1: returned; 0: threw (message holds what())
  long max_rss_kb = 0;      // getrusage(RUSAGE_SELF).ru_maxrss at the end (includes the parent's pages at fork)
  double seconds = 0;
  char message[1024] = {};  // the first warning, or the error
};

// Renders in a forked child, so that its peak memory is the render's (ru_maxrss only grows).
ChildRender render_in_child(const RenderRequest& r) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ChildRender c;
    const auto start = std::chrono::steady_clock::now();
    try {
      const std::vector<std::string> warnings = render_attention_file(r);
      c.ok = 1;
      if (!warnings.empty()) std::snprintf(c.message, sizeof c.message, "%s", warnings[0].c_str());
    } catch (const std::exception& e) {
      std::snprintf(c.message, sizeof c.message, "%s", e.what());
    }
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    struct rusage u {};
    ::getrusage(RUSAGE_SELF, &u);
    c.max_rss_kb = u.ru_maxrss;
    const ssize_t n = ::write(fds[1], &c, sizeof c);
    ::_exit(n == static_cast<ssize_t>(sizeof c) ? 0 : 1);
  }
  ::close(fds[1]);
  ChildRender c;
  size_t got = 0;
  for (ssize_t n; got < sizeof c && (n = ::read(fds[0], reinterpret_cast<char*>(&c) + got, sizeof c - got)) > 0;)
    got += static_cast<size_t>(n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  REQUIRE(got == sizeof c);
  return c;
}

}  // namespace

TEST_CASE("a 4096 x 4096 map renders in blocks within bounded memory, larger inputs are named errors",
          "[render][large]") {
  const fs::path dir = scratch("large");
  const int64_t n = kMaxMapSide;
  {
    std::vector<float> w(static_cast<size_t>(n * n), 0.0f);
    for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i * n + (n - 1 - i))] = 1.0f;  // the anti-diagonal
    write_npy((dir / "big.npy").string(), w.data(), {n, n});
  }
  RenderRequest r;
  r.input = (dir / "big.npy").string();
  r.output = (dir / "big.png").string();
  const ChildRender c = render_in_child(r);
  INFO(c.message);
  REQUIRE(c.ok == 1);
  // In 8 × 8 blocks the render peaks near 0.2 GB (cell by cell, 16.7 million cells, it needs
  // 7.7 GB); 1 GiB leaves room for sanitizer builds.
  WARN("4096 x 4096 map to PNG: " << c.seconds << " s, peak RSS " << c.max_rss_kb / 1024 << " MiB");
  CHECK(c.max_rss_kb < 1024 * 1024);  // 1 GiB
  CHECK_THAT(c.message, Catch::Contains("4096 \u00d7 4096 map drawn in 8 \u00d7 8 blocks"));
  const Image img = read_png(r.output);
  CHECK(img.width() > 1000);   // 512 cells at 2 pixels each, and the margins
  CHECK(img.width() < 1600);
  // The anti-diagonal survives the block maxima: its 512 drawn cells are the darkest blue.
  int darkest = 0;
  for (int y = 0; y < img.height(); ++y)
    for (int x = 0; x < img.width(); ++x) darkest += img.at(x, y) == colormap(Colormap::kBlues, 1);
  CHECK(darkest > 512 * 2 * 2);  // ≥ 512 cells of 2 × 2 pixels (and the colour bar's top)

  // Links and reports stop at 512 tokens, with the size and the limit in the message.
  RenderRequest links = r;
  links.view = "links";
  CHECK_THROWS_WITH(render_attention_file(links), Catch::StartsWith("--view links: ") &&
                                                      Catch::Contains("[4096, 4096] has 4096 queries x 4096 keys") &&
                                                      Catch::Contains("at most 512 tokens"));
  RenderRequest html = r;
  html.output = (dir / "big.html").string();
  CHECK_THROWS_WITH(render_attention_file(html), Catch::StartsWith("--out ") && Catch::Contains("at most 512 tokens") &&
                                                     Catch::Contains("has 4096 x 4096"));
  // Above the limits: a map side over 4096, more than 2^26 weights, a file too large to hold them.
  const std::vector<float> row(4097, 1.0f / 4097);
  CHECK_THROWS_WITH(attention_from_npy(make_npy(row.data(), {1, 4097}), "wide.npy"),
                    Catch::Contains("wide.npy: shape [1, 4097]: maps larger than 4096 x 4096 are not drawn"));
  NpyArray five;  // the shape is checked before the data is read
  five.descr = "<f4", five.shape = {5, 4096, 4096};
  CHECK_THROWS_WITH(attention_from_npy(five, "five.npy"),
                    Catch::Contains("five.npy: shape [5, 4096, 4096] holds 83886080 weights; at most 67108864"));
  const fs::path huge = dir / "huge.npy";
  std::ofstream(huge) << "\x93NUMPY";
  fs::resize_file(huge, (uintmax_t(1) << 29) + (uintmax_t(1) << 21));  // sparse: no disk used
  CHECK_THROWS_WITH(read_attention(huge.string()), Catch::Contains("bytes is larger than an attention array of at most 67108864 weights"));
  fs::remove(huge);
  fs::remove(dir / "big.npy");  // 64 MiB
}

namespace {

// A run folder as `attnkit train` writes it: 2 layers × 2 heads, T = 6, snapshots at 3 steps.
fs::path make_run(const std::string& name, int64_t L, int64_t H, int64_t T, int64_t steps) {
  const fs::path dir = scratch(name);
  const std::vector<float> w = peaked_maps(L * H, T, 1);
  write_npy((dir / "attention.npy").string(), w.data(), {L, H, T, T});
  std::vector<float> snaps;
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> m = peaked_maps(L * H, T, s);
    snaps.insert(snaps.end(), m.begin(), m.end());
  }
  write_npy((dir / "snapshots.npy").string(), snaps.data(), {3, L, H, T, T});
  if (L > 1) {
    const std::vector<float> r = peaked_maps(1, T, 0);
    write_npy((dir / "rollout.npy").string(), r.data(), {T, T});
  }
  std::ofstream meta(dir / "meta.json");
  meta << "{\"task\": \"neighbor-sum\", \"step\": " << steps << ", \"sample\": 0, \"labels\": [";
  for (int64_t i = 0; i < T; ++i) meta << (i ? ", " : "") << "\"" << i % 10 << "\u00b7" << i << "\"";
  meta << "], \"tokens\": [";
  for (int64_t i = 0; i < T; ++i) meta << (i ? ", " : "") << i % 10;
  meta << "], \"targets\": [";
  for (int64_t i = 0; i < T; ++i) meta << (i ? ", " : "") << (i + 1) % 10;
  meta << "], \"predictions\": [";
  for (int64_t i = 0; i < T; ++i) meta << (i ? ", " : "") << (i == 2 ? 7 : (i + 1) % 10);
  meta << "], \"snapshot_steps\": [0, 10, " << steps << "]}\n";
  meta.close();
  std::ofstream(dir / "metrics.json") << "{\"task\": \"neighbor-sum\", \"val_accuracy\": 0.9234, \"final_loss\": 0.2012, "
                                         "\"steps\": " << steps << ", \"lr\": 0.003000000026077032, \"model\": {\"layers\": " << L << "}}\n";
  std::ofstream csv(dir / "loss.csv");
  csv << "step,loss\n";
  for (int64_t k = 1; k <= steps; ++k) csv << k << "," << 2.3 * std::exp(-static_cast<double>(k) / 30.0) << "\n";
  return dir;
}

// Draws a run folder's pictures into it, read as `attnkit render RUN` reads it.
std::vector<std::string> render_folder(const fs::path& dir) {
  return render_run(cli::run_pictures(cli::read_run_folder(dir.string()), "run"), dir.string());
}

// src="…" / href="…" attributes that point at the network.
int network_references(const std::string& html) {
  const std::regex remote(R"((src|href)\s*=\s*["']?\s*(https?:)?//)", std::regex::icase);
  return static_cast<int>(std::distance(std::sregex_iterator(html.begin(), html.end(), remote), std::sregex_iterator()));
}

}  // namespace

TEST_CASE("render_run: a run folder's pictures and a self-contained report", "[render]") {
  const fs::path dir = make_run("run", 2, 2, 6, 80);
  const std::vector<std::string> written = render_folder(dir);
  CHECK(written == std::vector<std::string>{"attention.png", "links.png", "rollout.png", "snapshots.png", "loss.png",
                                            "report.html"});
  for (const auto& name : written)
    if (name.size() > 4 && name.substr(name.size() - 4) == ".png") {
      const Image img = read_png((dir / name).string());
      CHECK(img.width() > 300);
    }
  const std::string html = slurp(dir / "report.html");
  CHECK(network_references(html) == 0);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("92.3 %") != std::string::npos);                // accuracy in the summary
  CHECK(html.find(">0.003<") != std::string::npos);               // lr shown as 0.003
  CHECK(html.find("class=\"wrong\"") != std::string::npos);       // the wrong prediction marked
  // The data block holds no "</": a label like "</script>" cannot end it early.
  const size_t data = html.find("id=\"attnkit-data\">");
  REQUIRE(data != std::string::npos);
  const size_t end = html.find("</script>", data);
  CHECK(html.substr(data, end - data).find("</") == std::string::npos);

  CHECK_THROWS_WITH(render_folder(scratch("empty_run")),
                    Catch::Contains("no attention.npy"));
}

TEST_CASE("report.html escapes labels and refuses mismatched data", "[render]") {
  ReportData d;
  d.title = "<b>x</b>";
  d.attention = attention_from_npy(make_npy(kAlign, {5, 7}), "align.npy");
  d.query_labels = kDst;
  d.key_labels = {"</script>", "<img src=x>", "cat", "sat", "on", "the", "mat"};
  const std::string html = html_report(d);
  CHECK(html.find("<b>x</b>") == std::string::npos);
  CHECK(html.find("<img src=x>") == std::string::npos);
  CHECK(network_references(html) == 0);
  d.query_labels = kSrc;
  CHECK_THROWS_WITH(html_report(d), Catch::Contains("labels does not match"));
}

namespace {

const char* chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (has_program(p)) return p;
  return nullptr;
}

// Headless Chromium on a file: returns the DOM after the page's script ran (and writes a
// screenshot when `screenshot` is not empty).
std::string chromium(const fs::path& html, const fs::path& dir, const fs::path& screenshot) {
  const fs::path profile = dir / "chromium-profile";
  fs::remove_all(profile);
  std::string cmd = std::string("timeout 120 ") + chromium_path() +
                    " --headless --no-sandbox --disable-gpu --disable-background-networking --no-first-run"
                    " --disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars"
                    " --user-data-dir='" + profile.string() + "' --window-size=1280,2400";
  if (!screenshot.empty()) {
    const Shell s = sh(cmd + " --screenshot='" + screenshot.string() + "' 'file://" + html.string() + "'", dir);
    INFO(s.err);
    REQUIRE(s.code == 0);
    fs::remove_all(profile);
  }
  const Shell r = sh(cmd + " --virtual-time-budget=3000 --dump-dom 'file://" + html.string() + "'", dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return r.out;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

std::string status_element(const std::string& dom) {
  const size_t p = dom.find("<div id=\"attnkit-status\"");
  return p == std::string::npos ? "" : dom.substr(p, dom.find('>', p) - p + 1);
}

}  // namespace

TEST_CASE("report.html in headless Chromium: script runs clean, heads in the DOM, screenshot not blank",
          "[render][browser]") {
  if (!chromium_path())
    ATTNKIT_SKIP("Chromium is not installed (tools/setup.sh installs Debian's chromium); report not opened in a browser");
  const fs::path dir = make_run("browser_run", 2, 3, 6, 80);
  render_folder(dir);
  const fs::path shot = dir / "screenshot.png";
  const std::string dom = chromium(dir / "report.html", dir, shot);
  // The page driven as a user would: click a thumbnail, toggle a head, hover a token and a
  // cell, move the snapshot slider (report.js's #selftest).
  const std::string driven = status_element(chromium(dir / "report.html#selftest", dir, {}));
  INFO(driven);
  CHECK(driven.find("data-status=\"ready\"") != std::string::npos);
  CHECK(driven.find("data-selftest=\"click:ok toggle:ok hover:ok unhover:ok tip:ok slider:ok\"") != std::string::npos);
  const std::string status = status_element(dom);
  INFO(status);
  CHECK(status.find("data-status=\"ready\"") != std::string::npos);
  CHECK(status.find("data-error") == std::string::npos);
  CHECK(status.find("data-heads=\"3\"") != std::string::npos);
  CHECK(status.find("data-layers=\"2\"") != std::string::npos);
  CHECK(count(dom, "class=\"head-toggle\"") == 3);       // head view: one toggle per head
  CHECK(count(dom, "<canvas class=\"thumb") == 2 * 3);   // model view: layers × heads
  CHECK(count(dom, "<canvas class=\"snap-thumb") == 3);  // snapshots: one per step
  CHECK(dom.find("id=\"snapshot-slider\"") != std::string::npos);

  const Image img = read_png(shot.string());
  CHECK(img.width() >= 1000);
  int64_t coloured = 0, dark = 0;
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) {
      const Color c = img.at(x, y);
      coloured += std::abs(c.r - c.b) > 60;  // blues of the maps, colours of the heads
      dark += c.luminance() < 0.1;           // text
    }
  CHECK(coloured > 2000);
  CHECK(dark > 500);
}

TEST_CASE("report.html stays responsive for T = 128 with 8 × 8 layers × heads", "[render][browser]") {
  if (!chromium_path()) ATTNKIT_SKIP("Chromium is not installed; large report not opened in a browser");
  const fs::path dir = scratch("browser_big");
  ReportData d;
  d.title = "T = 128, 8 × 8 heads";
  const int64_t T = 128;
  d.attention.layers = 8, d.attention.heads = 8, d.attention.rows = T, d.attention.cols = T;
  d.attention.weights = peaked_maps(64, T, 3);
  for (int k = 0; k < 2000; ++k) d.losses.push_back(static_cast<float>(3.0 / (1 + k / 100.0)));
  write_html_report((dir / "report.html").string(), d);
  const std::string dom = chromium(dir / "report.html", dir, {});
  const std::string status = status_element(dom);
  INFO(status);
  CHECK(status.find("data-status=\"ready\"") != std::string::npos);
  CHECK(count(dom, "<canvas class=\"thumb") == 64);
  const size_t ms = status.find("data-ms=\"");
  REQUIRE(ms != std::string::npos);
  const int draw_ms = std::atoi(status.c_str() + ms + 9);
  WARN("report with 64 maps of 128 x 128 drawn in " << draw_ms << " ms (headless Chromium)");
  CHECK(draw_ms < 5000);
}

#ifdef ATTNKIT_CLI
TEST_CASE("attnkit render: files, run folders, exit codes", "[render][cli]") {
  const fs::path dir = scratch("cli");
  const std::string cli = std::string("'") + ATTNKIT_CLI + "'";
  write_npy((dir / "align.npy").string(), kAlign, {5, 7});
  Shell r = sh(cli + " render '" + (dir / "align.npy").string() +
                   "' --tokens 'the black cat sat on the mat' --query-tokens 'чёрная кошка сидела на коврике' --out '" +
                   (dir / "align.png").string() + "'",
               dir);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(read_png((dir / "align.png").string()).width() > 300);
  r = sh(cli + " render '" + (dir / "align.npy").string() + "' --view links --out '" + (dir / "align.svg").string() + "'", dir);
  CHECK(r.code == 0);
  r = sh(cli + " render '" + (dir / "align.npy").string() + "' --tokens 'a b' --out '" + (dir / "x.png").string() + "'", dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--tokens: 2 tokens given"));
  r = sh(cli + " render '" + (dir / "align.npy").string() + "' --out '" + (dir / "x.gif").string() + "'", dir);
  CHECK(r.code == 2);
  const std::vector<float> w = peaked_maps(2, 4, 0);
  write_npy((dir / "five.npy").string(), w.data(), {1, 1, 2, 4, 4});
  r = sh(cli + " render '" + (dir / "five.npy").string() + "' --out '" + (dir / "x.png").string() + "'", dir);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::StartsWith("error: ") && Catch::Contains("rank 5") && Catch::Contains("--index K"));
  {  // --index K: one entry of an [N, L, H, T, T] array (infer --data's attention.npy), the same picture
     // as that entry saved alone.
    std::vector<float> many = peaked_maps(3 * 2, 4, 1);  // 3 entries of [1, 2, 4, 4]
    write_npy((dir / "many.npy").string(), many.data(), {3, 1, 2, 4, 4});
    write_npy((dir / "entry2.npy").string(), many.data() + 2 * 2 * 16, {1, 2, 4, 4});
    r = sh(cli + " render '" + (dir / "many.npy").string() + "' --index 2 --out '" + (dir / "k.png").string() + "'", dir);
    REQUIRE(r.code == 0);
    r = sh(cli + " render '" + (dir / "entry2.npy").string() + "' --title 'many.npy [2]' --out '" +
               (dir / "alone.png").string() + "'", dir);
    REQUIRE(r.code == 0);
    const Image k = read_png((dir / "k.png").string()), alone = read_png((dir / "alone.png").string());
    REQUIRE(k.width() == alone.width());
    REQUIRE(k.height() == alone.height());
    CHECK(std::memcmp(k.rgba(), alone.rgba(), static_cast<size_t>(k.width()) * k.height() * 4) == 0);
    r = sh(cli + " render '" + (dir / "many.npy").string() + "' --index 3 --out '" + (dir / "k3.png").string() + "'", dir);
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("entry 3 is outside its first axis [0, 3)"));
    CHECK_FALSE(fs::exists(dir / "k3.png"));
  }
  std::vector<float> scores = w;
  for (float& x : scores) x *= 3;
  write_npy((dir / "scores.npy").string(), scores.data(), {2, 4, 4});
  r = sh(cli + " render '" + (dir / "scores.npy").string() + "' --out '" + (dir / "scores.png").string() + "'", dir);
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::StartsWith("warning: ") && Catch::Contains("do not sum to 1"));

  const fs::path run = make_run("cli_run", 1, 2, 5, 40);
  r = sh(cli + " render '" + run.string() + "' --out '" + (dir / "pictures").string() + "'", dir);
  CHECK(r.code == 0);
  CHECK(fs::exists(dir / "pictures" / "report.html"));
  CHECK(fs::exists(dir / "pictures" / "snapshots.png"));
  r = sh(cli + " render '" + run.string() + "' --index 0 --out '" + (dir / "pictures").string() + "'", dir);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--index apply to an .npy file"));
  // A folder of many sequences' maps (no meta.json): the error says how to draw one.
  fs::create_directories(dir / "many_run");
  fs::copy_file(dir / "many.npy", dir / "many_run" / "attention.npy");
  r = sh(cli + " render '" + (dir / "many_run").string() + "'", dir);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("no meta.json") && Catch::Contains("--index K"));

  {  // More maps than a PNG holds side by side: named, with what to draw instead.
    const std::vector<float> tiny(64 * 1024 * 4, 0.5f);
    write_npy((dir / "wide.npy").string(), tiny.data(), {64, 1024, 2, 2});
    r = sh(cli + " render '" + (dir / "wide.npy").string() + "' --out '" + (dir / "wide.png").string() + "'", dir);
    CHECK(r.code == 1);
    CHECK_THAT(r.err, Catch::Contains("wide.npy [64, 1024, 2, 2]: 65536 maps of 2 x 2 make a picture of") &&
                          Catch::Contains("--layer L and --head H"));
    CHECK_FALSE(fs::exists(dir / "wide.png"));
    // Wide enough only at the default 2 pixels per point (19 344 points), and a .PNG name.
    const std::vector<float> half(128 * 4, 0.5f);
    write_npy((dir / "h128.npy").string(), half.data(), {1, 128, 1, 2});
    for (const char* name : {"h128.png", "h128.PNG"}) {
      r = sh(cli + " render '" + (dir / "h128.npy").string() + "' --out '" + (dir / name).string() + "'", dir);
      CHECK(r.code == 1);
      CHECK_THAT(r.err, Catch::Contains("h128.npy [1, 128, 1, 2]: 128 maps of 1 x 2 make a picture of"));
    }
    r = sh(cli + " render '" + (dir / "h128.npy").string() + "' --scale 1 --out '" + (dir / "h128.png").string() + "'", dir);
    CHECK(r.code == 0);  // 19 344 pixels wide at one pixel per point
  }

  // A run folder's arrays and steps get the checks an .npy file gets: NaN, integer weights and
  // steps that are not ascending integers from 0 are errors naming the file; nothing is drawn.
  auto broken = [&](const std::string& name, const std::function<void(const fs::path&)>& damage,
                    const std::string& message) {
    const fs::path bad = make_run(name, 1, 2, 5, 40);
    damage(bad);
    const fs::path out = dir / (name + "_pictures");
    const Shell b = sh(cli + " render '" + bad.string() + "' --out '" + out.string() + "'", dir);
    INFO(name << ": " << b.err);
    CHECK(b.code == 1);
    CHECK_THAT(b.err, Catch::StartsWith("error: ") && Catch::Contains(message));
    CHECK_FALSE(fs::exists(out));
  };
  broken("nan_run", [](const fs::path& d) {
    std::vector<float> w = peaked_maps(2, 5, 1);
    w[7] = std::nanf("");
    write_npy((d / "attention.npy").string(), w.data(), {1, 2, 5, 5});
  }, "attention.npy: weight nan at query 1, key 2 (map 0) is not finite");
  broken("int_run", [](const fs::path& d) {
    const std::vector<int32_t> ones(2 * 25, 1);
    write_npy((d / "attention.npy").string(), ones.data(), {1, 2, 5, 5});
  }, "attention.npy: dtype <i4 is not a float type");
  broken("nan_snapshots", [](const fs::path& d) {
    std::vector<float> s(3 * 2 * 25, 0.2f);
    s[60] = std::numeric_limits<float>::infinity();
    write_npy((d / "snapshots.npy").string(), s.data(), {3, 1, 2, 5, 5});
  }, "snapshots.npy: weight inf at query 2, key 0 (map 2) is not finite");
  for (const std::string& steps : {"[0, 10, 1e20]", "[-1, -2, -3]", "[0, 10, 10]", "[0, 10, 100000000000000000000]"}) {
    broken("steps_run", [&](const fs::path& d) {
      std::string meta = slurp(d / "meta.json");
      const std::string was = "\"snapshot_steps\": [0, 10, 40]";
      REQUIRE(meta.find(was) != std::string::npos);
      meta.replace(meta.find(was), was.size(), "\"snapshot_steps\": " + steps);
      std::ofstream(d / "meta.json") << meta;
    }, "snapshot_steps " );
  }
}
#endif

#endif  // ATTNKIT_NO_RENDER

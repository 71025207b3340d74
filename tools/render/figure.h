// A picture as a list of shapes in logical pixels, drawn once by the figure code (heatmap.cc,
// links.cc, loss_curve.cc) and output either as a PNG (rasterize) or as SVG text (to_svg), so
// both formats show the same thing.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tools/render/color.h"
#include "tools/render/font.h"
#include "tools/render/image.h"

namespace attnkit::render {

enum class Anchor { kStart, kMiddle, kEnd };

struct Shape {
  enum Kind { kRect, kLine, kPolyline, kCircle, kText, kRamp } kind = kRect;
  double x = 0, y = 0, w = 0, h = 0;  // rect, ramp: box; line: from (x, y) to (x + w, y + h); circle: centre, w = r
  double stroke = 1;                   // line and polyline width
  Color color;                         // fill, stroke or text colour; alpha = opacity
  std::vector<std::pair<double, double>> points;  // polyline
  std::string text;                    // text
  TextStyle style;                     // text
  Anchor anchor = Anchor::kStart;      // text: where (x, y) is along the line; y is the baseline
  bool vertical = false;               // text read bottom to top (rotated 90° anticlockwise)
  Colormap map = Colormap::kBlues;     // ramp: 0 at the bottom, 1 at the top
  std::string cls;                     // SVG class ("cell", "link", …), for readers and tests
  std::string tooltip;                 // SVG <title>: shown on hover in a browser
};

// A rectangle in logical pixels: left, top, right, bottom.
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Where a text shape's glyphs can reach: its advance width by the font's glyph ascent and
// descent (glyph_ascent, glyph_descent), placed by its anchor and turned for vertical text.
Box text_box(const Shape& text);

class Figure {
 public:
  Figure(double width, double height) : width_(width), height_(height) {}
  double width() const { return width_; }
  double height() const { return height_; }
  const std::vector<Shape>& shapes() const { return shapes_; }

  void rect(double x, double y, double w, double h, Color fill, std::string cls = {}, std::string tooltip = {});
  void line(double x0, double y0, double x1, double y1, double width, Color c, std::string cls = {},
            std::string tooltip = {});
  void polyline(std::vector<std::pair<double, double>> points, double width, Color c, std::string cls = {});
  void circle(double cx, double cy, double r, Color c);
  void text(double x, double baseline, std::string text, TextStyle style, Color c, Anchor anchor = Anchor::kStart,
            bool vertical = false);
  // A fitted block of lines (fit_text): the first baseline at top + text_ascent, each next one
  // a line height lower; x is where the lines are anchored. Vertical blocks read bottom to
  // top: `top` is then their left edge, x (here: the position along the y axis) the anchor.
  void text_block(double x, double top, const TextBlock& block, Color c, Anchor anchor = Anchor::kStart,
                  bool vertical = false);
  void ramp(double x, double y, double w, double h, Colormap map);
  // Appends another figure's shapes shifted by (dx, dy).
  void place(const Figure& other, double dx, double dy);
  // The text_box of every text shape, in drawing order: what the figure's text covers, for
  // checking that it all lies inside the picture.
  std::vector<Box> text_boxes() const;

 private:
  double width_, height_;
  std::vector<Shape> shapes_;
};

// PNG pixels: the figure at `scale` device pixels per logical pixel (2 = crisp on slides).
Image rasterize(const Figure& figure, double scale);
// A standalone SVG document (UTF-8) with width/height in logical pixels.
std::string to_svg(const Figure& figure);

// Text with & < > " ' escaped for XML and HTML (and control characters dropped).
std::string xml_escape(const std::string& s);

// Writes the figure as PNG or SVG by the path's extension (.png / .svg); throws Error otherwise.
void save_figure(const Figure& figure, const std::string& path, double png_scale);
// Whether save_figure writes `path` as a PNG (".png" in any case), and the pixels per point it
// draws a figure at for a requested png_scale (less for pictures over 16 megapixels, ≥ 1).
bool is_png_path(const std::string& path);
double png_pixel_scale(const Figure& figure, double png_scale);

}  // namespace attnkit::render

#include "tools/render/figure.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "engine/file_io.h"
#include "tools/render/png.h"

namespace attnkit::render {

void Figure::rect(double x, double y, double w, double h, Color fill, std::string cls, std::string tooltip) {
  Shape s;
  s.kind = Shape::kRect, s.x = x, s.y = y, s.w = w, s.h = h, s.color = fill;
  s.cls = std::move(cls), s.tooltip = std::move(tooltip);
  shapes_.push_back(std::move(s));
}

void Figure::line(double x0, double y0, double x1, double y1, double width, Color c, std::string cls,
                  std::string tooltip) {
  Shape s;
  s.kind = Shape::kLine, s.x = x0, s.y = y0, s.w = x1 - x0, s.h = y1 - y0, s.stroke = width, s.color = c;
  s.cls = std::move(cls), s.tooltip = std::move(tooltip);
  shapes_.push_back(std::move(s));
}

void Figure::polyline(std::vector<std::pair<double, double>> points, double width, Color c, std::string cls) {
  Shape s;
  s.kind = Shape::kPolyline, s.points = std::move(points), s.stroke = width, s.color = c, s.cls = std::move(cls);
  shapes_.push_back(std::move(s));
}

void Figure::circle(double cx, double cy, double r, Color c) {
  Shape s;
  s.kind = Shape::kCircle, s.x = cx, s.y = cy, s.w = r, s.color = c;
  shapes_.push_back(std::move(s));
}

void Figure::text(double x, double baseline, std::string text, TextStyle style, Color c, Anchor anchor, bool vertical) {
  Shape s;
  s.kind = Shape::kText, s.x = x, s.y = baseline, s.text = std::move(text), s.style = style, s.color = c;
  s.anchor = anchor, s.vertical = vertical;
  shapes_.push_back(std::move(s));
}

void Figure::text_block(double x, double top, const TextBlock& block, Color c, Anchor anchor, bool vertical) {
  const double lh = block.line_height();
  for (size_t k = 0; k < block.lines.size(); ++k) {
    const double base = top + text_ascent(block.style) + static_cast<double>(k) * lh;
    if (vertical)
      text(base, x, block.lines[k], block.style, c, anchor, true);
    else
      text(x, base, block.lines[k], block.style, c, anchor);
  }
}

Box text_box(const Shape& s) {
  const double advance = text_width(s.text, s.style);
  const double shift = s.anchor == Anchor::kStart ? 0 : s.anchor == Anchor::kMiddle ? advance / 2 : advance;
  const double up = glyph_ascent(s.style), down = glyph_descent(s.style);
  // Vertical text is the horizontal box turned 90° anticlockwise about (x, y): along the line
  // runs up the page, the ascent points left.
  if (s.vertical) return {s.x - up, s.y - (advance - shift), s.x + down, s.y + shift};
  return {s.x - shift, s.y - up, s.x - shift + advance, s.y + down};
}

std::vector<Box> Figure::text_boxes() const {
  std::vector<Box> boxes;
  for (const Shape& s : shapes_)
    if (s.kind == Shape::kText) boxes.push_back(text_box(s));
  return boxes;
}

void Figure::ramp(double x, double y, double w, double h, Colormap map) {
  Shape s;
  s.kind = Shape::kRamp, s.x = x, s.y = y, s.w = w, s.h = h, s.map = map;
  shapes_.push_back(std::move(s));
}

void Figure::place(const Figure& other, double dx, double dy) {
  for (Shape s : other.shapes_) {
    s.x += dx, s.y += dy;
    for (auto& p : s.points) p.first += dx, p.second += dy;
    shapes_.push_back(std::move(s));
  }
}

namespace {

void draw_text(Image& img, const Shape& s, double scale) {
  TextStyle style = s.style;
  style.size *= scale;
  const TextMask m = render_text(s.text, style);
  const double advance = text_width(s.text, style);
  const double shift = s.anchor == Anchor::kStart ? 0 : s.anchor == Anchor::kMiddle ? advance / 2 : advance;
  const double x = s.x * scale, y = s.y * scale;
  if (!s.vertical) {
    img.blend_mask(m.coverage.data(), m.w, m.h, static_cast<int>(std::lround(x - shift)) - m.origin_x,
                   static_cast<int>(std::lround(y)) - m.baseline, s.color);
    return;
  }
  // Rotate 90° anticlockwise: mask (col i, row j) goes to (col j, row w-1-i); the pen start
  // (origin_x, baseline) to (baseline, w-1-origin_x); the text runs upwards from (x, y).
  std::vector<uint8_t> rotated(m.coverage.size());
  for (int j = 0; j < m.h; ++j)
    for (int i = 0; i < m.w; ++i)
      rotated[static_cast<size_t>(m.w - 1 - i) * static_cast<size_t>(m.h) + static_cast<size_t>(j)] =
          m.coverage[static_cast<size_t>(j) * static_cast<size_t>(m.w) + static_cast<size_t>(i)];
  img.blend_mask(rotated.data(), m.h, m.w, static_cast<int>(std::lround(x)) - m.baseline,
                 static_cast<int>(std::lround(y + shift)) - (m.w - 1 - m.origin_x), s.color);
}

}  // namespace

Image rasterize(const Figure& f, double scale) {
  if (!(scale > 0 && scale <= 8)) throw Error("picture scale " + std::to_string(scale) + " is outside (0, 8]");
  Image img(std::max(1, static_cast<int>(std::ceil(f.width() * scale))),
            std::max(1, static_cast<int>(std::ceil(f.height() * scale))));
  for (const Shape& s : f.shapes()) {
    switch (s.kind) {
      case Shape::kRect: {
        // Edges snapped to device pixels: neighbouring cells abut without seams, edges are crisp.
        const double x0 = std::round(s.x * scale), y0 = std::round(s.y * scale);
        const double x1 = std::max(x0 + 1, std::round((s.x + s.w) * scale));
        const double y1 = std::max(y0 + 1, std::round((s.y + s.h) * scale));
        if (s.w > 0 && s.h > 0) img.fill_rect(x0, y0, x1, y1, s.color);
        break;
      }
      case Shape::kLine:
        img.line(s.x * scale, s.y * scale, (s.x + s.w) * scale, (s.y + s.h) * scale, s.stroke * scale, s.color);
        break;
      case Shape::kPolyline:
        for (size_t i = 1; i < s.points.size(); ++i)
          img.line(s.points[i - 1].first * scale, s.points[i - 1].second * scale, s.points[i].first * scale,
                   s.points[i].second * scale, s.stroke * scale, s.color);
        break;
      case Shape::kCircle:
        img.fill_circle(s.x * scale, s.y * scale, s.w * scale, s.color);
        break;
      case Shape::kText:
        draw_text(img, s, scale);
        break;
      case Shape::kRamp: {
        const int y0 = static_cast<int>(std::lround(s.y * scale)), y1 = static_cast<int>(std::lround((s.y + s.h) * scale));
        for (int y = y0; y < y1; ++y) {
          const double w = 1.0 - (y + 0.5 - y0) / std::max(1, y1 - y0);
          img.fill_rect(s.x * scale, y, (s.x + s.w) * scale, y + 1, colormap(s.map, w));
        }
        break;
      }
    }
  }
  return img;
}

namespace {

bool ends_with_ci(const std::string& path, const char* ext) {
  const std::string e(ext);
  return path.size() >= e.size() && std::equal(e.rbegin(), e.rend(), path.rbegin(), [](char a, char b) {
           return a == std::tolower(static_cast<unsigned char>(b));
         });
}

}  // namespace

bool is_png_path(const std::string& path) { return ends_with_ci(path, ".png"); }

double png_pixel_scale(const Figure& figure, double png_scale) {
  // Very large pictures (a 128-token link diagram of 8 heads) at 1 pixel per point at least,
  // not 2: some 16 megapixels are enough for any screen or slide.
  const double pixels = figure.width() * figure.height() * png_scale * png_scale;
  if (pixels > 16e6) png_scale = std::max(std::min(png_scale, 1.0), std::sqrt(16e6 / (figure.width() * figure.height())));
  return png_scale;
}

void save_figure(const Figure& figure, const std::string& path, double png_scale) {
  if (is_png_path(path)) {
    write_png(path, rasterize(figure, png_pixel_scale(figure, png_scale)));
  } else if (ends_with_ci(path, ".svg")) {
    const std::string svg = to_svg(figure);
    write_file_atomic(path, svg.data(), svg.size());
  } else {
    throw Error(path + ": unknown picture format (use .png or .svg)");
  }
}

}  // namespace attnkit::render

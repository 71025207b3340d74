// An RGBA raster with the few anti-aliased primitives the pictures need: rectangles, lines,
// circles and coverage masks (text). Coordinates are pixels; pixel (x, y) covers
// [x, x+1) × [y, y+1), so a rectangle on integer edges fills whole pixels with its exact colour.
#pragma once
#include <cstdint>
#include <vector>

#include "tools/render/color.h"

namespace attnkit::render {

class Image {
 public:
  Image() = default;
  Image(int width, int height, Color fill = kWhite);

  int width() const { return width_; }
  int height() const { return height_; }
  const uint8_t* rgba() const { return pixels_.data(); }  // rows of width·4 bytes
  uint8_t* rgba() { return pixels_.data(); }
  Color at(int x, int y) const;

  // Composites c (with its alpha, scaled by coverage in [0, 1]) over pixel (x, y); outside is ignored.
  void blend(int x, int y, Color c, double coverage);
  // Fills [x0, x1) × [y0, y1); partly covered edge pixels are blended by the covered area.
  void fill_rect(double x0, double y0, double x1, double y1, Color c);
  // A line of the given width with round ends; c.a is its opacity.
  void line(double x0, double y0, double x1, double y1, double width, Color c);
  void fill_circle(double cx, double cy, double radius, Color c);
  // Blends c through an 8-bit coverage mask (w × h, row-major) placed with its top-left at (x, y).
  void blend_mask(const uint8_t* mask, int w, int h, int x, int y, Color c);

 private:
  int width_ = 0, height_ = 0;
  std::vector<uint8_t> pixels_;
};

}  // namespace attnkit::render

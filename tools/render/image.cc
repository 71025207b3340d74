#include "tools/render/image.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"

namespace attnkit::render {

Image::Image(int width, int height, Color fill) : width_(width), height_(height) {
  if (width <= 0 || height <= 0 || width > 32768 || height > 32768)
    throw Error("image size " + std::to_string(width) + " x " + std::to_string(height) +
                " is outside 1 .. 32768 pixels per side");
  pixels_.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 4);
  for (size_t i = 0; i < pixels_.size(); i += 4) {
    pixels_[i] = fill.r, pixels_[i + 1] = fill.g, pixels_[i + 2] = fill.b, pixels_[i + 3] = fill.a;
  }
}

Color Image::at(int x, int y) const {
  const uint8_t* p = &pixels_[(static_cast<size_t>(y) * static_cast<size_t>(width_) + static_cast<size_t>(x)) * 4];
  return {p[0], p[1], p[2], p[3]};
}

void Image::blend(int x, int y, Color c, double coverage) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || coverage <= 0) return;
  uint8_t* p = &pixels_[(static_cast<size_t>(y) * static_cast<size_t>(width_) + static_cast<size_t>(x)) * 4];
  const double a = std::min(1.0, coverage) * (c.a / 255.0);
  if (a >= 1.0) {
    p[0] = c.r, p[1] = c.g, p[2] = c.b, p[3] = 255;
    return;
  }
  auto over = [a](uint8_t dst, uint8_t src) {
    return static_cast<uint8_t>(std::lround(dst + a * (static_cast<double>(src) - dst)));
  };
  p[0] = over(p[0], c.r), p[1] = over(p[1], c.g), p[2] = over(p[2], c.b);
  p[3] = static_cast<uint8_t>(std::lround(p[3] + a * (255.0 - p[3])));
}

void Image::fill_rect(double x0, double y0, double x1, double y1, Color c) {
  x0 = std::max(x0, 0.0), y0 = std::max(y0, 0.0);
  x1 = std::min(x1, static_cast<double>(width_)), y1 = std::min(y1, static_cast<double>(height_));
  if (!(x1 > x0 && y1 > y0)) return;
  const int px0 = static_cast<int>(std::floor(x0)), px1 = static_cast<int>(std::ceil(x1));
  const int py0 = static_cast<int>(std::floor(y0)), py1 = static_cast<int>(std::ceil(y1));
  for (int y = py0; y < py1; ++y) {
    const double cy = std::min(y1, y + 1.0) - std::max(y0, static_cast<double>(y));
    for (int x = px0; x < px1; ++x) {
      const double cx = std::min(x1, x + 1.0) - std::max(x0, static_cast<double>(x));
      blend(x, y, c, cx * cy);
    }
  }
}

void Image::line(double x0, double y0, double x1, double y1, double width, Color c) {
  const double hw = std::max(width, 0.3) / 2;
  // Thinner than a pixel: draw one pixel wide at proportionally lower opacity.
  const double thin = std::min(1.0, width);
  const double r = std::max(hw, 0.5);
  const double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
  const double len = std::sqrt(len2);
  const int ymin = std::max(0, static_cast<int>(std::floor(std::min(y0, y1) - r - 1)));
  const int ymax = std::min(height_ - 1, static_cast<int>(std::ceil(std::max(y0, y1) + r + 1)));
  const double bx0 = std::min(x0, x1) - r - 1, bx1 = std::max(x0, x1) + r + 1;
  for (int y = ymin; y <= ymax; ++y) {
    const double py = y + 0.5;
    // Only pixels within r + 1 of the centre line along this row (a span, not the bounding box).
    double xa = bx0, xb = bx1;
    if (std::fabs(dy) > 1e-9) {
      const double xc = x0 + (py - y0) * dx / dy, half = (r + 1) * len / std::fabs(dy);
      xa = std::max(xa, xc - half), xb = std::min(xb, xc + half);
    }
    const int ix0 = std::max(0, static_cast<int>(std::floor(xa))), ix1 = std::min(width_ - 1, static_cast<int>(std::ceil(xb)));
    for (int x = ix0; x <= ix1; ++x) {
      const double px = x + 0.5;
      double t = len2 > 0 ? ((px - x0) * dx + (py - y0) * dy) / len2 : 0;
      t = std::clamp(t, 0.0, 1.0);
      const double ex = px - (x0 + t * dx), ey = py - (y0 + t * dy);
      const double d = std::sqrt(ex * ex + ey * ey);
      const double cover = std::clamp(r + 0.5 - d, 0.0, 1.0);
      if (cover > 0) blend(x, y, c, cover * thin);
    }
  }
}

void Image::fill_circle(double cx, double cy, double radius, Color c) {
  const int y0 = std::max(0, static_cast<int>(std::floor(cy - radius - 1)));
  const int y1 = std::min(height_ - 1, static_cast<int>(std::ceil(cy + radius + 1)));
  const int x0 = std::max(0, static_cast<int>(std::floor(cx - radius - 1)));
  const int x1 = std::min(width_ - 1, static_cast<int>(std::ceil(cx + radius + 1)));
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) {
      const double d = std::hypot(x + 0.5 - cx, y + 0.5 - cy);
      blend(x, y, c, std::clamp(radius + 0.5 - d, 0.0, 1.0));
    }
}

void Image::blend_mask(const uint8_t* mask, int w, int h, int x, int y, Color c) {
  for (int j = 0; j < h; ++j)
    for (int i = 0; i < w; ++i) {
      const uint8_t m = mask[static_cast<size_t>(j) * static_cast<size_t>(w) + static_cast<size_t>(i)];
      if (m) blend(x + i, y + j, c, m / 255.0);
    }
}

}  // namespace attnkit::render

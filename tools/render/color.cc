#include "tools/render/color.h"

#include <cmath>
#include <cstdio>

#include "engine/error.h"

namespace attnkit::render {
namespace {

// Anchors at evenly spaced weights; colours between them are interpolated linearly in sRGB.
// report.js holds the same tables, so the report's colours equal the PNGs'.
constexpr Color kBluesAnchors[] = {{247, 251, 255}, {222, 235, 247}, {198, 219, 239}, {158, 202, 225}, {107, 174, 214},
                                   {66, 146, 198},  {33, 113, 181},  {8, 81, 156},    {8, 48, 107}};
constexpr Color kViridisAnchors[] = {{68, 1, 84},    {72, 40, 120},  {62, 73, 137},  {49, 104, 142}, {38, 130, 142},
                                     {31, 158, 137}, {53, 183, 121}, {110, 206, 88}, {181, 222, 43}, {253, 231, 37}};

constexpr Color kCategory10[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},   {214, 39, 40},  {148, 103, 189},
                                 {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};

template <size_t N>
Color interpolate(const Color (&anchors)[N], double w) {
  const double x = w * static_cast<double>(N - 1);
  const size_t i = static_cast<size_t>(std::floor(x));
  if (i >= N - 1) return anchors[N - 1];
  const double f = x - static_cast<double>(i);
  auto mix = [f](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(static_cast<double>(a) + f * (static_cast<double>(b) - a)));
  };
  const Color& a = anchors[i];
  const Color& b = anchors[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b), 255};
}

double linear(uint8_t c) {
  const double s = c / 255.0;
  return s <= 0.04045 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
}

}  // namespace

std::string Color::hex() const {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

double Color::luminance() const { return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b); }

Color colormap(Colormap map, double w) {
  if (std::isnan(w)) return {173, 181, 189, 255};
  w = w < 0 ? 0 : w > 1 ? 1 : w;
  return map == Colormap::kViridis ? interpolate(kViridisAnchors, w) : interpolate(kBluesAnchors, w);
}

Colormap colormap_from_name(const std::string& name) {
  if (name == "blues") return Colormap::kBlues;
  if (name == "viridis") return Colormap::kViridis;
  throw Error("unknown colour map '" + name + "' (known: blues, viridis)");
}

const char* colormap_name(Colormap map) { return map == Colormap::kViridis ? "viridis" : "blues"; }

Color text_on(Color background) { return background.luminance() < 0.3 ? kWhite : kInk; }

Color head_color(int64_t head) { return kCategory10[static_cast<size_t>(head % 10)]; }

}  // namespace attnkit::render

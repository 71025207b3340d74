// Colours of the pictures: the fixed 0–1 attention colour scale and one colour per head.
#pragma once
#include <cstdint>
#include <string>

namespace attnkit::render {

struct Color {
  uint8_t r = 0, g = 0, b = 0, a = 255;

  bool operator==(const Color& o) const { return r == o.r && g == o.g && b == o.b && a == o.a; }
  bool operator!=(const Color& o) const { return !(*this == o); }
  std::string hex() const;  // "#rrggbb" (alpha dropped)
  double luminance() const; // relative luminance in [0, 1] (sRGB, WCAG formula)
};

constexpr Color kWhite{255, 255, 255}, kBlack{0, 0, 0};
constexpr Color kInk{33, 37, 41};       // text and axes
constexpr Color kMuted{108, 117, 125};  // captions, ticks
constexpr Color kGrid{222, 226, 230};   // grid lines, cell gaps
constexpr Color kFaint{173, 181, 189};  // values that round to zero

// Sequential scales for weights. Blues (white → navy, ColorBrewer) reads well on a white
// slide: a zero weight is paper. Viridis (matplotlib's default) is perceptually uniform.
enum class Colormap { kBlues, kViridis };

// The colour of weight w on the fixed 0–1 scale; values outside are clamped, NaN is grey.
Color colormap(Colormap map, double w);
// "blues" / "viridis"; throws attnkit::Error naming the unknown name.
Colormap colormap_from_name(const std::string& name);
const char* colormap_name(Colormap map);

// Text colour that stays readable on top of `background` (white on dark cells).
Color text_on(Color background);

// One colour per head (d3's category10, as BertViz uses), cycling after 10 heads.
Color head_color(int64_t head);

}  // namespace attnkit::render

// Text for the PNG pictures: UTF-8 strings (Latin, Cyrillic, Greek, arrows, "·") set in the
// embedded DejaVu Sans through FreeType, as 8-bit coverage masks. The same metrics lay out the
// SVGs, whose text the viewer sets in DejaVu Sans (or a similar sans-serif).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::render {

struct TextStyle {
  double size = 12;  // pixels (em size)
  bool bold = false;
};

// A string rendered horizontally: w × h coverage, the pen starts at (origin_x, baseline).
struct TextMask {
  int w = 0, h = 0;
  int origin_x = 0, baseline = 0;
  std::vector<uint8_t> coverage;
};

// Advance width of the string in pixels.
double text_width(const std::string& utf8, const TextStyle& style);
// Height above and depth below the baseline of the font's letters (not of a particular string).
double text_ascent(const TextStyle& style);
double text_descent(const TextStyle& style);
// Renders the string; throws attnkit::Error if FreeType cannot load the embedded font.
TextMask render_text(const std::string& utf8, const TextStyle& style);

// The code points of a UTF-8 string; malformed bytes become U+FFFD.
std::vector<char32_t> decode_utf8(const std::string& s);

}  // namespace attnkit::render

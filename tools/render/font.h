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
// Height above and depth below the baseline that the font's glyphs reach (accents and
// descenders included): every drawn string stays within them.
double glyph_ascent(const TextStyle& style);
double glyph_descent(const TextStyle& style);
// Renders the string; throws attnkit::Error if FreeType cannot load the embedded font.
TextMask render_text(const std::string& utf8, const TextStyle& style);

// Text set to fit a width: one line at the style's size if it fits; otherwise the size shrinks
// towards min_size until it fits; if it does not fit at min_size either, the text is wrapped
// at spaces onto several lines at min_size (a word wider than a line is broken between
// characters). Empty text gives no lines.
struct TextBlock {
  TextStyle style;
  std::vector<std::string> lines;
  double line_height() const;  // baseline to baseline
  double height() const;       // lines × line_height (0 without lines)
  double width() const;        // the widest line
};
TextBlock fit_text(const std::string& utf8, TextStyle style, double max_width, double min_size);

// The string if it is at most max_width wide, else as many of its first characters as fit
// with "…" after them.
std::string elide(const std::string& utf8, const TextStyle& style, double max_width);

// The code points of a UTF-8 string; malformed bytes become U+FFFD.
std::vector<char32_t> decode_utf8(const std::string& s);

}  // namespace attnkit::render

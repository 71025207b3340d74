#include "tools/render/font.h"

#include <ft2build.h>
#include FT_FREETYPE_H

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "engine/error.h"
#include "tools/render/embedded.h"

namespace attnkit::render {
namespace {

struct Glyph {
  int left = 0, top = 0, w = 0, h = 0;
  double advance = 0;  // pixels, unhinted (so widths agree with the SVG viewer's)
  std::vector<uint8_t> coverage;
};

// One FreeType library with both faces, loaded on first use; glyphs cached by
// (code point, size in 1/64 px, bold).
class Fonts {
 public:
  static Fonts& get() {
    static Fonts fonts;
    return fonts;
  }

  const Glyph& glyph(char32_t cp, const TextStyle& style) {
    const int size64 = std::max(64, static_cast<int>(std::lround(style.size * 64)));
    const auto key = std::make_tuple(cp, size64, style.bold);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    FT_Face face = style.bold ? bold_ : regular_;
    FT_Set_Char_Size(face, 0, size64, 72, 72);
    Glyph g;
    const FT_UInt index = FT_Get_Char_Index(face, cp);
    if (FT_Load_Glyph(face, index, FT_LOAD_TARGET_LIGHT) == 0 &&
        FT_Render_Glyph(face->glyph, FT_RENDER_MODE_NORMAL) == 0) {
      const FT_Bitmap& bm = face->glyph->bitmap;
      g.left = face->glyph->bitmap_left, g.top = face->glyph->bitmap_top;
      g.w = static_cast<int>(bm.width), g.h = static_cast<int>(bm.rows);
      g.advance = face->glyph->linearHoriAdvance / 65536.0;
      g.coverage.resize(static_cast<size_t>(g.w) * static_cast<size_t>(g.h));
      for (int y = 0; y < g.h; ++y)
        std::copy(bm.buffer + y * bm.pitch, bm.buffer + y * bm.pitch + g.w, g.coverage.begin() + y * g.w);
    }
    return cache_.emplace(key, std::move(g)).first->second;
  }

  double ascent(const TextStyle& s) const { return s.size * ascent_em_; }
  double descent(const TextStyle& s) const { return s.size * descent_em_; }
  double glyph_ascent(const TextStyle& s) const { return s.size * glyph_ascent_em_; }
  double glyph_descent(const TextStyle& s) const { return s.size * glyph_descent_em_; }
  std::mutex& mutex() { return mutex_; }

 private:
  Fonts() {
    if (FT_Init_FreeType(&library_) != 0) throw Error("FreeType: cannot initialise");
    regular_ = open(font_regular(), "DejaVuSans.ttf");
    bold_ = open(font_bold(), "DejaVuSans-Bold.ttf");
    // Cap height and descender of Latin/Cyrillic letters, not the font's tallest accents:
    // it centres labels visually.
    ascent_em_ = 0.76, descent_em_ = 0.24;
    // The faces' own ascender and descender bound every glyph (accented capitals, "g", "й").
    for (FT_Face face : {regular_, bold_}) {
      const double em = face->units_per_EM > 0 ? face->units_per_EM : 2048;
      glyph_ascent_em_ = std::max(glyph_ascent_em_, face->ascender / em);
      glyph_descent_em_ = std::max(glyph_descent_em_, -face->descender / em);
    }
  }
  FT_Face open(std::string_view data, const char* name) {
    FT_Face face = nullptr;
    if (FT_New_Memory_Face(library_, reinterpret_cast<const FT_Byte*>(data.data()), static_cast<FT_Long>(data.size()),
                           0, &face) != 0)
      throw Error(std::string("FreeType: cannot load the embedded font ") + name);
    return face;
  }

  FT_Library library_ = nullptr;
  FT_Face regular_ = nullptr, bold_ = nullptr;
  double ascent_em_ = 0.76, descent_em_ = 0.24;
  double glyph_ascent_em_ = 0.76, glyph_descent_em_ = 0.24;
  std::map<std::tuple<char32_t, int, bool>, Glyph> cache_;
  std::mutex mutex_;
};

}  // namespace

std::vector<char32_t> decode_utf8(const std::string& s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    char32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
    bool ok = n >= 0 && i + static_cast<size_t>(n) < s.size() + (n == 0 ? 1 : 0);
    for (int k = 1; ok && k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(n) + 1;
  }
  return out;
}

double text_width(const std::string& utf8, const TextStyle& style) {
  Fonts& f = Fonts::get();
  std::lock_guard<std::mutex> lock(f.mutex());
  double w = 0;
  for (char32_t cp : decode_utf8(utf8)) w += f.glyph(cp, style).advance;
  return w;
}

double text_ascent(const TextStyle& style) { return Fonts::get().ascent(style); }
double text_descent(const TextStyle& style) { return Fonts::get().descent(style); }
double glyph_ascent(const TextStyle& style) { return Fonts::get().glyph_ascent(style); }
double glyph_descent(const TextStyle& style) { return Fonts::get().glyph_descent(style); }

namespace {

// Byte length of the UTF-8 sequence starting with `lead` (1 for stray continuation bytes).
size_t utf8_length(unsigned char lead) { return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// The byte length of the longest prefix of s (whole characters, at least one) that is at most
// max_width wide.
size_t fitting_prefix(const std::string& s, const TextStyle& style, double max_width) {
  size_t end = std::min(s.size(), utf8_length(static_cast<unsigned char>(s[0])));
  for (size_t next = end; next < s.size(); end = next) {
    next = std::min(s.size(), next + utf8_length(static_cast<unsigned char>(s[next])));
    if (text_width(s.substr(0, next), style) > max_width) break;
  }
  return end;
}

// Greedy line breaking at spaces; words wider than a line are broken between characters.
std::vector<std::string> wrap(const std::string& text, const TextStyle& style, double max_width) {
  std::vector<std::string> lines;
  std::string line;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const std::string joined = line.empty() ? word : line + " " + word;
    if (text_width(joined, style) <= max_width) {
      line = joined;
      continue;
    }
    if (!line.empty()) lines.push_back(line);
    line = word;
    while (text_width(line, style) > max_width) {
      const size_t n = fitting_prefix(line, style, max_width);
      if (n >= line.size()) break;
      lines.push_back(line.substr(0, n));
      line.erase(0, n);
    }
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

double TextBlock::line_height() const { return std::ceil(style.size * 1.25); }
double TextBlock::height() const { return static_cast<double>(lines.size()) * line_height(); }
double TextBlock::width() const {
  double w = 0;
  for (const auto& l : lines) w = std::max(w, text_width(l, style));
  return w;
}

TextBlock fit_text(const std::string& utf8, TextStyle style, double max_width, double min_size) {
  TextBlock b;
  b.style = style;
  if (utf8.find_first_not_of(' ') == std::string::npos) return b;
  min_size = std::min(min_size, style.size);
  const double full = text_width(utf8, style);
  if (full <= max_width) {
    b.lines = {utf8};
    return b;
  }
  // Advances scale with the size: start from the proportional size, in quarter pixels, and
  // step down while rounding leaves it too wide.
  for (double size = std::floor(style.size * std::max(0.0, max_width) / full * 4) / 4; size >= min_size; size -= 0.25) {
    b.style.size = size;
    if (text_width(utf8, b.style) <= max_width) {
      b.lines = {utf8};
      return b;
    }
  }
  b.style.size = min_size;
  b.lines = wrap(utf8, b.style, max_width);
  return b;
}

std::string elide(const std::string& utf8, const TextStyle& style, double max_width) {
  if (utf8.empty() || text_width(utf8, style) <= max_width) return utf8;
  const std::string ellipsis = "\u2026";
  const size_t n = fitting_prefix(utf8, style, std::max(0.0, max_width - text_width(ellipsis, style)));
  return utf8.substr(0, n) + ellipsis;
}

TextMask render_text(const std::string& utf8, const TextStyle& style) {
  Fonts& f = Fonts::get();
  std::lock_guard<std::mutex> lock(f.mutex());
  const std::vector<char32_t> cps = decode_utf8(utf8);
  // First pass: extent of all glyph bitmaps around the pen positions.
  int x_min = 0, x_max = 1, y_min = 0, y_max = 1;  // relative to (pen start, baseline); y down
  double pen = 0;
  for (char32_t cp : cps) {
    const Glyph& g = f.glyph(cp, style);
    const int gx = static_cast<int>(std::lround(pen)) + g.left;
    x_min = std::min(x_min, gx), x_max = std::max(x_max, gx + g.w);
    y_min = std::min(y_min, -g.top), y_max = std::max(y_max, -g.top + g.h);
    pen += g.advance;
  }
  TextMask m;
  m.w = x_max - x_min, m.h = y_max - y_min;
  m.origin_x = -x_min, m.baseline = -y_min;
  m.coverage.assign(static_cast<size_t>(m.w) * static_cast<size_t>(m.h), 0);
  pen = 0;
  for (char32_t cp : cps) {
    const Glyph& g = f.glyph(cp, style);
    const int gx = static_cast<int>(std::lround(pen)) + g.left + m.origin_x, gy = m.baseline - g.top;
    for (int y = 0; y < g.h; ++y)
      for (int x = 0; x < g.w; ++x) {
        uint8_t& dst = m.coverage[static_cast<size_t>(gy + y) * static_cast<size_t>(m.w) + static_cast<size_t>(gx + x)];
        dst = std::max(dst, g.coverage[static_cast<size_t>(y) * static_cast<size_t>(g.w) + static_cast<size_t>(x)]);
      }
    pen += g.advance;
  }
  return m;
}

}  // namespace attnkit::render

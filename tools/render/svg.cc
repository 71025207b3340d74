// to_svg: figures as SVG 1.1 text. Links and cells carry a class and a <title> (the value,
// shown on hover), text is real text (selectable, searchable), the colour bar a gradient with
// the colour map's anchors, which reproduces the piecewise-linear scale exactly.
#include <cmath>
#include <cstdio>
#include <string>

#include "tools/render/figure.h"
#include "tools/render/font.h"

namespace attnkit::render {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string num4(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

std::string opacity(Color c) { return c.a == 255 ? std::string() : " opacity=\"" + num(c.a / 255.0) + "\""; }

std::string cls(const Shape& s) { return s.cls.empty() ? std::string() : " class=\"" + s.cls + "\""; }

}  // namespace

std::string xml_escape(const std::string& s) {
  // Code point by code point: bytes that are not UTF-8 become U+FFFD (as in the HTML report),
  // so the file stays well-formed XML whatever the labels held.
  std::string out;
  for (char32_t cp : decode_utf8(s)) {
    switch (cp) {
      case '&': out += "&amp;"; continue;
      case '<': out += "&lt;"; continue;
      case '>': out += "&gt;"; continue;
      case '"': out += "&quot;"; continue;
      case '\'': out += "&apos;"; continue;
      default: break;
    }
    // XML 1.0's characters: tab, newline, carriage return, and from U+0020 on, minus the
    // surrogates and U+FFFE/U+FFFF; other control characters are left out.
    if (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') continue;
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF || cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

std::string to_svg(const Figure& f) {
  std::string out;
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + num(f.width()) + "\" height=\"" +
         num(f.height()) + "\" viewBox=\"0 0 " + num(f.width()) + " " + num(f.height()) + "\"" +
         " font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  int ramps = 0;
  for (const Shape& s : f.shapes()) {
    const std::string title = s.tooltip.empty() ? std::string() : "<title>" + xml_escape(s.tooltip) + "</title>";
    switch (s.kind) {
      case Shape::kRect:
        out += "<rect" + cls(s) + " x=\"" + num(s.x) + "\" y=\"" + num(s.y) + "\" width=\"" + num(s.w) +
               "\" height=\"" + num(s.h) + "\" fill=\"" + s.color.hex() + "\"" + opacity(s.color);
        out += title.empty() ? "/>\n" : ">" + title + "</rect>\n";
        break;
      case Shape::kLine:
        out += "<line" + cls(s) + " x1=\"" + num(s.x) + "\" y1=\"" + num(s.y) + "\" x2=\"" + num(s.x + s.w) +
               "\" y2=\"" + num(s.y + s.h) + "\" stroke=\"" + s.color.hex() + "\" stroke-width=\"" + num(s.stroke) +
               "\" stroke-linecap=\"round\"" + (s.color.a == 255 ? "" : " stroke-opacity=\"" + num(s.color.a / 255.0) + "\"");
        out += title.empty() ? "/>\n" : ">" + title + "</line>\n";
        break;
      case Shape::kPolyline: {
        out += "<polyline" + cls(s) + " fill=\"none\" stroke=\"" + s.color.hex() + "\" stroke-width=\"" +
               num(s.stroke) + "\" stroke-linejoin=\"round\"" + opacity(s.color) + " points=\"";
        for (size_t i = 0; i < s.points.size(); ++i)
          out += (i ? " " : "") + num(s.points[i].first) + "," + num(s.points[i].second);
        out += "\"/>\n";
        break;
      }
      case Shape::kCircle:
        out += "<circle cx=\"" + num(s.x) + "\" cy=\"" + num(s.y) + "\" r=\"" + num(s.w) + "\" fill=\"" +
               s.color.hex() + "\"" + opacity(s.color) + "/>\n";
        break;
      case Shape::kText: {
        const char* anchor = s.anchor == Anchor::kStart ? "start" : s.anchor == Anchor::kMiddle ? "middle" : "end";
        out += "<text x=\"" + num(s.x) + "\" y=\"" + num(s.y) + "\" font-size=\"" + num(s.style.size) + "\"" +
               (s.style.bold ? " font-weight=\"bold\"" : "") + " text-anchor=\"" + anchor + "\" fill=\"" +
               s.color.hex() + "\"" + opacity(s.color) +
               (s.vertical ? " transform=\"rotate(-90 " + num(s.x) + " " + num(s.y) + ")\"" : "") + ">" +
               xml_escape(s.text) + "</text>\n";
        break;
      }
      case Shape::kRamp: {
        const std::string id = "ramp" + std::to_string(ramps++);
        out += "<defs><linearGradient id=\"" + id + "\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
        // 72 = a multiple of both maps' segment counts (8 and 9), so every anchor is a stop.
        for (int i = 0; i <= 72; ++i)
          out += "<stop offset=\"" + num4(i / 72.0) + "\" stop-color=\"" + colormap(s.map, i / 72.0).hex() + "\"/>";
        out += "</linearGradient></defs>\n<rect class=\"colorbar\" x=\"" + num(s.x) + "\" y=\"" + num(s.y) +
               "\" width=\"" + num(s.w) + "\" height=\"" + num(s.h) + "\" fill=\"url(#" + id + ")\"/>\n";
        break;
      }
    }
  }
  out += "</svg>\n";
  return out;
}

}  // namespace attnkit::render

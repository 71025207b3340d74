// Files built into the program, so pictures and reports need nothing at run time: the DejaVu
// Sans fonts (Debian's fonts-dejavu-core; free licence that allows embedding) for text in PNGs,
// and the report's script and style sheet (tools/render/report.js, report.css).
#pragma once
#include <cstddef>
#include <string_view>

namespace attnkit::render {

std::string_view font_regular();  // DejaVuSans.ttf
std::string_view font_bold();     // DejaVuSans-Bold.ttf
std::string_view report_script(); // report.js
std::string_view report_style();  // report.css

}  // namespace attnkit::render

#include "tools/render/embedded.h"

// The paths come from CMake (ATTNKIT_FONT_REGULAR, …); the assembler's .incbin copies each
// file into .rodata between a _begin and an _end symbol, with a NUL after it.
#define ATTNKIT_EMBED(name, path)                                                      \
  asm(".pushsection .rodata\n.balign 16\n.global " #name "_begin\n" #name "_begin:\n" \
      ".incbin \"" path "\"\n.global " #name "_end\n" #name "_end:\n.byte 0\n.popsection\n"); \
  extern "C" const char name##_begin[], name##_end[];

ATTNKIT_EMBED(attnkit_font_regular, ATTNKIT_FONT_REGULAR)
ATTNKIT_EMBED(attnkit_font_bold, ATTNKIT_FONT_BOLD)
ATTNKIT_EMBED(attnkit_report_js, ATTNKIT_REPORT_JS)
ATTNKIT_EMBED(attnkit_report_css, ATTNKIT_REPORT_CSS)

namespace attnkit::render {

std::string_view font_regular() {
  return {attnkit_font_regular_begin, static_cast<size_t>(attnkit_font_regular_end - attnkit_font_regular_begin)};
}
std::string_view font_bold() {
  return {attnkit_font_bold_begin, static_cast<size_t>(attnkit_font_bold_end - attnkit_font_bold_begin)};
}
std::string_view report_script() {
  return {attnkit_report_js_begin, static_cast<size_t>(attnkit_report_js_end - attnkit_report_js_begin)};
}
std::string_view report_style() {
  return {attnkit_report_css_begin, static_cast<size_t>(attnkit_report_css_end - attnkit_report_css_begin)};
}

}  // namespace attnkit::render

// Small helpers of the file-format readers (npy, npz): little-endian loads from a byte image
// and names quoted for messages. Internal to the engine.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace attnkit {

// The little-endian T at p (no alignment needed).
template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Text from a file made fit for a one-line error message: bytes that are not printable
// (control characters, C1 controls such as U+009B, NUL, bytes that are not UTF-8) as \xNN, and at most 200 bytes of it
// (then "… (N bytes)"), so a hostile header can neither cut the message nor flood the terminal.
inline std::string printable(const std::string& s) {
  constexpr size_t kMax = 200;
  std::string out;
  size_t i = 0;
  for (; i < s.size() && out.size() < kMax;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    for (size_t k = 1; n > 1 && k < n; ++k)
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) >> 6) != 2) n = 0;
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) n = 0;  // C1 controls (U+0080–U+009F)
    if (n == 1 && c >= 0x20 && c != 0x7F) {
      out += static_cast<char>(c);
    } else if (n > 1) {
      out.append(s, i, n);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      n = 1;
    }
    i += n;
  }
  if (i < s.size()) out += "… (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// 'name', for error messages (printable()).
inline std::string quote(const std::string& s) { return "'" + printable(s) + "'"; }

}  // namespace attnkit

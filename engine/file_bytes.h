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

// 'name', for error messages.
inline std::string quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace attnkit

// FNV-1a, 64 bits (offset basis 14695981039346656037, prime 1099511628211): the one hash of
// the library and the CLI, for fingerprints that must agree between processes and for short
// stable file names. Not for anything adversarial.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnkit {

struct Fnv1a {
  uint64_t h = 14695981039346656037ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  // With its terminating zero, so "ab","c" and "a","bc" differ.
  void add(const std::string& s) { add(s.c_str(), s.size() + 1); }
  template <typename T>
  void add(const std::vector<T>& v) { add(v.data(), v.size() * sizeof(T)); }
};

}  // namespace attnkit

// The benchmark programs' own flags (--models=a,b and the like), taken out of argv before
// Google Benchmark sees it (it rejects flags it does not know).
#pragma once
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace attnkit::bench {

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// "1,2,8" -> {1, 2, 8}, each in [lo, hi]; false (nothing in *out) for anything else, an empty
// list included, so that a bad flag value is a usage error rather than an exception.
template <class T>
bool parse_int_list(const std::string& s, long long lo, long long hi, std::vector<T>* out) {
  std::vector<T> values;
  for (const std::string& item : split(s)) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || v < lo || v > hi) return false;
    values.push_back(static_cast<T>(v));
  }
  if (values.empty()) return false;
  *out = std::move(values);
  return true;
}

// "0" or "1" -> false or true; false (and *on unchanged) for anything else.
inline bool parse_switch(const std::string& s, bool* on) {
  if (s != "0" && s != "1") return false;
  *on = s == "1";
  return true;
}

// When argv[i] is --name=VALUE: sets *value, removes it from argv and returns true.
inline bool take_flag(int& argc, char** argv, int i, const char* name, std::string* value) {
  const size_t len = std::strlen(name);
  if (std::strncmp(argv[i], name, len) != 0 || argv[i][len] != '=') return false;
  *value = argv[i] + len + 1;
  for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
  --argc;
  return true;
}

}  // namespace attnkit::bench

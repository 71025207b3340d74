// The benchmark programs' own flags (--models=a,b and the like), taken out of argv before
// Google Benchmark sees it (it rejects flags it does not know).
#pragma once
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

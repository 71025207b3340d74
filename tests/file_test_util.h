// Helpers of the tests that read and write files: fixtures, a temporary folder, whole-file
// reads, and "this must fail with a FileError naming the file".
#pragma once
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/error.h"

namespace attnkit::testing {

// tests/data/malformed/<name>
inline std::string fixture(const std::string& name) {
  return std::string(ATTNKIT_TEST_DATA) + "/malformed/" + name;
}

// A fresh folder under the system temp folder, removed with its contents at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "attnkit_test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The bytes of a file ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs f, which must throw a FileError whose message names `path` and contains `phrase`.
template <typename F>
void require_file_error(F&& f, const std::string& path, const std::string& phrase) {
  try {
    f();
  } catch (const FileError& e) {
    INFO("message: " << e.what());
    CHECK_THAT(e.what(), Catch::Matchers::Contains(path) && Catch::Matchers::Contains(phrase));
    return;
  }
  FAIL("no FileError for " << path);
}

}  // namespace attnkit::testing

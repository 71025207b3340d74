// safetensors reading and writing (engine/safetensors.h). Fixtures: tests/data/malformed
// (ok.safetensors and st_*.safetensors, made by make_malformed.py there).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/error.h"
#include "file_test_util.h"
#include "skip_test_util.h"
#include "engine/file_io.h"
#include "engine/safetensors.h"

namespace fs = std::filesystem;
using namespace attnkit;
using Catch::Matchers::Contains;

namespace {

const std::string kData = ATTNKIT_TEST_DATA;
using testing::fixture;
using testing::require_file_error;

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("attnkit_test_st") {}
};

template <typename T>
std::vector<T> values_of(const TensorBlob& t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("a hand-made safetensors file reads back", "[safetensors]") {
  SafetensorsFile f = read_safetensors(fixture("ok.safetensors"));
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}});
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].name == "w");  // in data-offset order
  CHECK(f.tensors[1].name == "ids");
  CHECK(f.tensors[2].name == "flag");
  const TensorBlob* w = f.find("w");
  REQUIRE(w);
  CHECK(w->dtype == "F32");
  CHECK(w->shape == std::vector<int64_t>{2, 3});
  CHECK(values_of<float>(*w) == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(values_of<int64_t>(*f.find("ids")) == std::vector<int64_t>{3, -1});
  const TensorBlob* flag = f.find("flag");
  REQUIRE(flag);
  CHECK(flag->dtype == "BOOL");
  CHECK(flag->shape.empty());
  CHECK(flag->bytes == std::vector<uint8_t>{1});
  CHECK(f.find("missing") == nullptr);
}

TEST_CASE("write_safetensors round-trips tensors and metadata", "[safetensors]") {
  TempDir dir;
  std::vector<TensorBlob> tensors = {
      {"tok.weight", "F32", {3, 2}, bytes_of(std::vector<float>{1, -2, 3.5f, 0, 1e-30f, 6})},
      {"pos", "F64", {1}, bytes_of(std::vector<double>{M_PI})},
      {"step", "I64", {}, bytes_of(std::vector<int64_t>{int64_t(1) << 50})},
      {"ids", "I32", {0}, {}},  // empty tensors are allowed
      {"mask", "U8", {3}, {0, 1, 255}},
  };
  std::map<std::string, std::string> meta = {{"model", "tiny"}, {"config", "{\"d\": 8}"}};
  write_safetensors(dir / "m.safetensors", tensors, meta);
  SafetensorsFile back = read_safetensors(dir / "m.safetensors");
  CHECK(back.metadata == meta);
  REQUIRE(back.tensors.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {  // written in the given order
    INFO(tensors[i].name);
    CHECK(back.tensors[i].name == tensors[i].name);
    CHECK(back.tensors[i].dtype == tensors[i].dtype);
    CHECK(back.tensors[i].shape == tensors[i].shape);
    CHECK(back.tensors[i].bytes == tensors[i].bytes);
  }

  // No metadata: no "__metadata__" key at all, as the reference writer does.
  write_safetensors(dir / "plain.safetensors", tensors);
  CHECK(read_safetensors(dir / "plain.safetensors").metadata.empty());
}

namespace {

// Two views into one flat block, as a checkpoint writes its parameters.
const std::vector<float> kFlat = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

void write_flat(const std::string& path) {
  std::vector<TensorView> views = {{"a.weight", "F32", {2, 3}, kFlat.data()},
                                   {"a.bias", "F32", {4}, kFlat.data() + 6}};
  write_safetensors(path, views, {{"step", "12"}});
}

}  // namespace

TEST_CASE("the zero-copy writer matches the header layout of the format", "[safetensors]") {
  TempDir dir;
  const std::vector<float>& flat = kFlat;
  const std::string path = dir / "flat.safetensors";
  write_flat(path);

  std::vector<uint8_t> raw = read_file(path);
  REQUIRE(raw.size() >= 8);
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  CHECK(n % 8 == 0);  // the data stays 8-byte aligned
  REQUIRE(raw.size() == 8 + n + flat.size() * sizeof(float));
  std::string text(raw.begin() + 8, raw.begin() + 8 + static_cast<int64_t>(n));
  CHECK(text.find_last_not_of(' ') == text.rfind('}'));  // padded with spaces only
  nlohmann::json header = nlohmann::json::parse(text);
  CHECK(header["__metadata__"] == nlohmann::json{{"step", "12"}});
  CHECK(header["a.weight"]["dtype"] == "F32");
  CHECK(header["a.weight"]["shape"] == nlohmann::json{2, 3});
  CHECK(header["a.weight"]["data_offsets"] == nlohmann::json{0, 24});
  CHECK(header["a.bias"]["data_offsets"] == nlohmann::json{24, 40});
  CHECK(std::memcmp(raw.data() + 8 + n, flat.data(), flat.size() * sizeof(float)) == 0);
}

TEST_CASE("the zero-copy writer's file reads back in Python with struct, json and numpy", "[safetensors]") {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
    ATTNKIT_SKIP("/usr/bin/python3 with numpy is not available");
  TempDir dir;
  const std::string path = dir / "flat.safetensors";
  write_flat(path);
  // An independent reader: struct + json + numpy, as the reference loader works.
  std::string code =
      "import json, struct, sys, numpy as np\n"
      "b = open(sys.argv[1], \"rb\").read()\n"
      "n = struct.unpack(\"<Q\", b[:8])[0]\n"
      "h = json.loads(b[8:8 + n])\n"
      "d = b[8 + n:]\n"
      "w = h[\"a.weight\"]\n"
      "a = np.frombuffer(d[w[\"data_offsets\"][0]:w[\"data_offsets\"][1]], \"<f4\").reshape(w[\"shape\"])\n"
      "assert (a == np.arange(1, 7, dtype=np.float32).reshape(2, 3)).all(), a\n"
      "assert h[\"__metadata__\"] == {\"step\": \"12\"}\n";
  int status = std::system(("/usr/bin/python3 -c '" + code + "' " + path).c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("write_safetensors refuses bad tensors and leaves no file", "[safetensors]") {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  float v[4] = {};
  require_file_error([&] { write_safetensors(path, std::vector<TensorView>{{"a", "F32", {1}, v}, {"a", "F32", {1}, v}}); },
                     path, "duplicate tensor name 'a'");
  require_file_error([&] { write_safetensors(path, std::vector<TensorView>{{"a", "F31", {1}, v}}); },
                     path, "unknown dtype 'F31'");
  require_file_error([&] { write_safetensors(path, std::vector<TensorView>{{"a", "F32", {-1}, v}}); },
                     path, "negative dimension");
  require_file_error(
      [&] { write_safetensors(path, std::vector<TensorBlob>{{"a", "F32", {2}, std::vector<uint8_t>(4)}}); },
      path, "holds 4 bytes, dtype F32 and its shape need 8");
  CHECK_FALSE(fs::exists(path));
  const std::string nowhere = dir / "missing/dir/x.safetensors";
  require_file_error([&] { write_safetensors(nowhere, std::vector<TensorView>{{"a", "F32", {1}, v}}); },
                     nowhere, "No such file or directory");
}

// ---- malformed files: one case each, the message names the file and the problem ------------

#define MALFORMED(file, phrase)                                                   \
  TEST_CASE("malformed " file " is rejected", "[malformed]") {                    \
    const std::string path = fixture(file);                                       \
    require_file_error([&] { read_safetensors(path); }, path, phrase);            \
    require_file_error([&] { read_safetensors_header(path); }, path, phrase);     \
  }

MALFORMED("st_too_short.safetensors", "file is 5 bytes, shorter than the 8-byte header length")
MALFORMED("st_header_past_end.safetensors", "header length 1000 runs past the end of the file (10 bytes)")
MALFORMED("st_header_absurd.safetensors", "header length 1099511627776 is absurd")
MALFORMED("st_not_json.safetensors", "header is not valid JSON")
MALFORMED("st_not_object.safetensors", "header is not a JSON object (it is array)")
MALFORMED("st_metadata_not_string.safetensors", "__metadata__ value 'step' is not a string")
MALFORMED("st_missing_dtype.safetensors", "tensor 'w': missing 'dtype'")
MALFORMED("st_shape_wrong_type.safetensors", "tensor 'w': 'shape' is not an array")
MALFORMED("st_entry_not_object.safetensors", "tensor 'w': entry is not a JSON object")
MALFORMED("st_unknown_dtype.safetensors", "tensor 'w': unknown dtype 'F7'")
MALFORMED("st_negative_dim.safetensors", "tensor 'w': shape has a negative dimension -2")
MALFORMED("st_size_overflow.safetensors", "tensor 'w': shape's byte size overflows int64")
MALFORMED("st_offsets_not_pair.safetensors", "tensor 'w': 'data_offsets' is [0], not [begin, end]")
MALFORMED("st_offsets_reversed.safetensors", "tensor 'w': data_offsets [24, 0) has begin > end")
MALFORMED("st_offsets_past_end.safetensors",
          "tensor 'flag': data_offsets [40, 41) past the end of the data (40 bytes)")
MALFORMED("st_size_mismatch.safetensors",
          "tensor 'w': dtype F32 and shape [2,2] need 16 bytes, data_offsets [0, 24) hold 24")
MALFORMED("st_overlap.safetensors", "tensor 'ids': data_offsets [16, 32) overlap tensor 'w' [0, 24)")
MALFORMED("st_gap.safetensors", "tensor 'ids': data_offsets [28, 44) leave a gap [24, 28) after tensor 'w'")
MALFORMED("st_trailing_data.safetensors", "5 bytes of data after the last tensor")
MALFORMED("st_duplicate_names.safetensors", "duplicate tensor name 'w'")

TEST_CASE("a missing safetensors file is a FileError naming the path", "[malformed]") {
  const std::string path = fixture("nothing_here.safetensors");
  require_file_error([&] { read_safetensors(path); }, path, "cannot open");
  require_file_error([&] { read_safetensors_header(path); }, path, "cannot open");
}

TEST_CASE("read_safetensors_header gives the names, dtypes, shapes and metadata without the data", "[safetensors]") {
  const SafetensorsFile whole = read_safetensors(fixture("ok.safetensors"));
  const SafetensorsHeader h = read_safetensors_header(fixture("ok.safetensors"));
  CHECK(h.metadata == whole.metadata);
  REQUIRE(h.tensors.size() == whole.tensors.size());
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    CHECK(h.tensors[i].name == whole.tensors[i].name);
    CHECK(h.tensors[i].dtype == whole.tensors[i].dtype);
    CHECK(h.tensors[i].shape == whole.tensors[i].shape);
    CHECK(h.tensors[i].bytes == whole.tensors[i].bytes.size());
  }
  REQUIRE(h.find("w") != nullptr);
  CHECK(h.find("w")->shape == std::vector<int64_t>{2, 3});
  CHECK(h.find("missing") == nullptr);
}

// Every prefix and every single-byte corruption of a valid file parses or throws FileError.
TEST_CASE("truncated and corrupted safetensors images only ever throw FileError", "[malformed]") {
  const std::vector<uint8_t> good = read_file(fixture("ok.safetensors"));
  auto parse = [&](const std::vector<uint8_t>& b) {
    try {
      parse_safetensors(b.data(), b.size(), "ok.safetensors");
    } catch (const FileError& e) {
      CHECK_THAT(e.what(), Contains("ok.safetensors"));
    }
  };
  for (size_t n = 0; n < good.size(); ++n) parse(std::vector<uint8_t>(good.begin(), good.begin() + n));
  std::mt19937 rng(99);
  for (size_t i = 0; i < good.size(); ++i)
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= static_cast<uint8_t>(1 + rng() % 255);
      parse(bad);
    }
}

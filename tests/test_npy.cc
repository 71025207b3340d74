// .npy/.npz reading and writing (engine/npy.h, engine/npz.h) and the file primitives under them
// (engine/file_io.h). Fixtures: tests/data/malformed (see make_malformed.py there) and the
// PyTorch reference cases in tests/data/pytorch.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/error.h"
#include "file_test_util.h"
#include "skip_test_util.h"
#include "engine/file_io.h"
#include "engine/file_bytes.h"
#include "engine/npy.h"
#include "engine/npz.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNKIT_TEST_HAS_ASAN 1
#endif
#endif
#ifndef ATTNKIT_TEST_HAS_ASAN
#define ATTNKIT_TEST_HAS_ASAN 0
#endif

namespace fs = std::filesystem;
using namespace attnkit;
using Catch::Matchers::Contains;

namespace {

const std::string kData = ATTNKIT_TEST_DATA;
using testing::fixture;
using testing::require_file_error;

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("attnkit_test_npy") {}
};

bool have_numpy() { return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0; }

// Runs a Python snippet (no single quotes inside) and returns its exit code.
int run_python(const std::string& code) {
  int status = std::system(("/usr/bin/python3 -c '" + code + "'").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<uint8_t> file_bytes(const std::string& path) { return read_file(path); }

}  // namespace

// ---- reading what numpy wrote -------------------------------------------------------------

TEST_CASE("every PyTorch reference .npz loads and converts", "[npz]") {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kData + "/pytorch")) {
    if (entry.path().extension() != ".npz") continue;
    const std::string path = entry.path().string();
    INFO(path);
    auto arrays = read_npz(path);
    ++files;
    REQUIRE(arrays.count("op"));
    CHECK(!to_string(arrays["op"], path).empty());
    for (const auto& [name, a] : arrays) {
      const std::string what = path + ": '" + name + "'";
      switch (a.kind()) {
        case 'S': CHECK(to_string(a, what).size() <= a.itemsize()); break;
        case 'f': CHECK(to_float64(a, what).size() == static_cast<size_t>(a.numel())); break;
        case 'i': CHECK(to_int64(a, what).size() == static_cast<size_t>(a.numel())); break;
        case 'b': CHECK(to_int32(a, what).size() == static_cast<size_t>(a.numel())); break;
        default: FAIL("unexpected kind in " << what);
      }
    }
  }
  CHECK(files >= 20);
}

TEST_CASE("PyTorch reference values match numpy's", "[npz]") {
  auto softmax = read_npz(kData + "/pytorch/softmax.npz");
  CHECK(to_string(softmax["op"], "op") == "softmax");
  CHECK(softmax["op"].descr == "|S7");
  CHECK(softmax["op"].shape.empty());
  const NpyArray& x = softmax["x"];
  CHECK(x.descr == "<f8");
  CHECK(x.shape == std::vector<int64_t>{4, 6, 9});
  std::vector<double> xs = to_float64(x, "x");
  CHECK(xs.front() == -1.0689124589477945);
  CHECK(xs.back() == 1.1420774287290276);

  auto ce = read_npz(kData + "/pytorch/cross_entropy.ref.npz");
  std::vector<int32_t> targets = to_int32(ce["targets"], "targets");
  CHECK(ce["targets"].descr == "<i8");
  CHECK(targets == std::vector<int32_t>{5, 6, 1, 0, 0, 6, 0, 3, 0, 0, 2, 5, 0, 6, 3, 3, 3, 3, 2, 2});
  CHECK(to_float64(ce["out"], "out") == std::vector<double>{2.8655485370425753});

  auto mha = read_npz(kData + "/pytorch/mha_2heads.npz");
  CHECK(to_int32(mha["num_heads"], "num_heads") == std::vector<int32_t>{2});
  CHECK(to_string(mha["w_layout"], "w_layout") == "in_out");

  auto sdpa = read_npz(kData + "/pytorch/sdpa_causal_batched.npz");
  CHECK(sdpa["mask"].descr == "|b1");
  std::vector<int32_t> mask = to_int32(sdpa["mask"], "mask");
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) CHECK(mask[i * 6 + j] == (j > i ? 1 : 0));
}

// The arrays make_malformed.py saves, recomputed here.
void check_generated_arrays(std::map<std::string, NpyArray>& z, const std::string& path) {
  INFO(path);
  REQUIRE(z.size() == 9);
  CHECK(z["f32"].descr == "<f4");
  CHECK(z["f32"].shape == std::vector<int64_t>{3, 4});
  std::vector<float> f32 = to_float32(z["f32"], "f32");
  for (int i = 0; i < 12; ++i) CHECK(f32[i] == i * 0.5f - 2);
  CHECK(to_float64(z["f64"], "f64") == std::vector<double>{1.0 / 3, -2.5e-300, 1e300, M_PI});
  CHECK(to_int64(z["i64"], "i64") ==
        std::vector<int64_t>{-(int64_t(1) << 40), -1, 0, 7, int64_t(1) << 40});
  CHECK(z["i32"].descr == "<i4");
  CHECK(z["i32"].shape == std::vector<int64_t>{2, 1, 3});
  CHECK(to_int32(z["i32"], "i32") == std::vector<int32_t>{-3, -2, -1, 0, 1, 2});
  CHECK(z["b1"].descr == "|b1");
  CHECK(to_float32(z["b1"], "b1") == std::vector<float>{1, 0, 0, 1});
  CHECK(z["u8"].descr == "|u1");
  CHECK(to_int32(z["u8"], "u8") == std::vector<int32_t>{250, 251, 252, 253, 254, 255});
  CHECK(z["empty"].shape == std::vector<int64_t>{0, 5});
  CHECK(z["empty"].bytes.empty());
  CHECK(z["scalar"].shape.empty());
  CHECK(to_float64(z["scalar"], "scalar") == std::vector<double>{2.75});
  CHECK(to_string(z["label"], "label") == "softmax");
}

TEST_CASE("np.savez and np.savez_compressed archives read back exactly", "[npz]") {
  for (const char* name : {"ok_savez.npz", "ok_savez_compressed.npz"}) {
    auto z = read_npz(fixture(name));
    check_generated_arrays(z, name);
  }
}

TEST_CASE("zip64 size, offset and end records are read", "[npz]") {
  auto z = read_npz(fixture("ok_zip64.npz"));
  REQUIRE(z.size() == 1);
  CHECK(z["x"].shape == std::vector<int64_t>{3, 4});
  CHECK(to_float32(z["x"], "x")[11] == 3.5f);
}

TEST_CASE(".npy versions 1.0, 2.0 and 3.0, 1-d Fortran order and trailing bytes", "[npy]") {
  for (const char* name : {"ok_f32.npy", "ok_f32_v2.npy", "ok_f32_v3.npy", "ok_trailing_bytes.npy"}) {
    INFO(name);
    NpyArray a = read_npy(fixture(name));
    CHECK(a.descr == "<f4");
    CHECK(a.shape == std::vector<int64_t>{3, 4});
    CHECK(to_float32(a, name)[5] == 0.5f);
  }
  NpyArray f = read_npy(fixture("ok_fortran_1d.npy"));
  CHECK(to_int32(f, "f") == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE(".npy headers longer than the first read (4 KiB) read whole, by read_npy and read_npy_entry", "[npy]") {
  TempDir dir;
  // numpy pads its headers with spaces; these are padded to 6000 (version 1.0) and 70 000
  // bytes (2.0, a 4-byte length), past what read_npy reads first.
  for (const auto& [major, pad] : {std::pair<int, size_t>{1, 6000}, {2, 70000}}) {
    INFO("version " << major << ", header " << pad);
    std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 2), }";
    const size_t prefix = major == 1 ? 10 : 12;
    header.append(pad - header.size() - prefix - 1, ' ');
    header += '\n';
    std::vector<uint8_t> raw = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
    const uint32_t len = static_cast<uint32_t>(header.size());
    for (size_t b = 0; b < prefix - 8; ++b) raw.push_back(static_cast<uint8_t>(len >> (8 * b)));
    raw.insert(raw.end(), header.begin(), header.end());
    const std::vector<int32_t> values = {-7, 0, 1, 2, INT32_MAX, INT32_MIN};
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    raw.insert(raw.end(), bytes, bytes + sizeof(int32_t) * values.size());
    const std::string path = dir / "long_header.npy";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(raw.data()), raw.size());
    NpyArray a = read_npy(path);
    CHECK(a.shape == std::vector<int64_t>{3, 2});
    CHECK(to_int32(a, "a") == values);
    CHECK(to_int64(a, "a") == std::vector<int64_t>(values.begin(), values.end()));
    int64_t entries = 0;
    CHECK(to_int32(read_npy_entry(path, 2, &entries), "e") == std::vector<int32_t>{INT32_MAX, INT32_MIN});
    CHECK(entries == 3);
    // Cut inside the header, and inside the data: errors naming the file.
    for (size_t keep : {pad - 10, raw.size() - 3}) {
      std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(raw.data()), keep);
      CHECK_THROWS_AS(read_npy(path), attnkit::FileError);
    }
  }
}

// ---- writing -------------------------------------------------------------------------------

TEST_CASE("encode_npy is byte-identical to np.save", "[npy]") {
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = i * 0.5f - 2;
  CHECK(encode_npy(make_npy(v.data(), {3, 4})) == file_bytes(fixture("ok_f32.npy")));
}

TEST_CASE("write_npy then read_npy round-trips float32, int32 and int64", "[npy]") {
  TempDir dir;
  std::vector<float> f = {1.5f, -0.0f, 3e38f, 1e-45f, 7, 8};
  write_npy(dir / "f.npy", f.data(), {2, 3});
  NpyArray a = read_npy(dir / "f.npy");
  CHECK(a.descr == "<f4");
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  std::vector<float> back = to_float32(a, "f");
  CHECK(std::memcmp(back.data(), f.data(), sizeof(float) * 6) == 0);

  std::vector<int32_t> i32 = {INT32_MIN, -1, 0, INT32_MAX};
  write_npy(dir / "i32.npy", i32.data(), {4});
  CHECK(to_int32(read_npy(dir / "i32.npy"), "i32") == i32);

  int64_t scalar = -(int64_t(1) << 62);
  write_npy(dir / "s.npy", &scalar, {});
  NpyArray s = read_npy(dir / "s.npy");
  CHECK(s.descr == "<i8");
  CHECK(s.shape.empty());
  CHECK(to_int64(s, "s") == std::vector<int64_t>{scalar});

  write_npy(dir / "empty.npy", static_cast<const float*>(nullptr), {0, 5});
  NpyArray e = read_npy(dir / "empty.npy");
  CHECK(e.shape == std::vector<int64_t>{0, 5});
  CHECK(e.numel() == 0);

  // The data starts at a multiple of 64, as numpy requires for memory mapping.
  std::vector<uint8_t> raw = file_bytes(dir / "f.npy");
  CHECK((raw.size() - 24) % 64 == 0);
  CHECK(raw[raw.size() - 25] == '\n');
}

TEST_CASE("read_npy_entry reads one entry along the first axis, only its bytes, and names bad indices", "[npy]") {
  TempDir dir;
  std::vector<float> f(4 * 2 * 3);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) * 0.5f - 3;
  write_npy(dir / "f.npy", f.data(), {4, 2, 3});
  for (int64_t k = 0; k < 4; ++k) {
    int64_t n = 0;
    const NpyArray e = read_npy_entry(dir / "f.npy", k, &n);
    CHECK(n == 4);
    CHECK(e.descr == "<f4");
    CHECK(e.shape == std::vector<int64_t>{2, 3});
    const std::vector<float> got = to_float32(e, "entry");
    CHECK(std::memcmp(got.data(), f.data() + k * 6, sizeof(float) * 6) == 0);
  }
  CHECK_THROWS_WITH(read_npy_entry(dir / "f.npy", 4), Catch::Contains("f.npy: entry 4 is outside its first axis [0, 4)"));
  CHECK_THROWS_AS(read_npy_entry(dir / "f.npy", -1), FileError);
  int64_t scalar = 7;
  write_npy(dir / "s.npy", &scalar, {});
  CHECK_THROWS_WITH(read_npy_entry(dir / "s.npy", 0), Catch::Contains("0-d array"));
  // A file cut short is found from its size, before any entry is read.
  std::vector<uint8_t> raw = file_bytes(dir / "f.npy");
  raw.resize(raw.size() - 4);
  {
    std::FILE* out = std::fopen((dir / "cut.npy").c_str(), "wb");
    REQUIRE(out);
    std::fwrite(raw.data(), 1, raw.size(), out);
    std::fclose(out);
  }
  CHECK_THROWS_WITH(read_npy_entry(dir / "cut.npy", 0), Catch::Contains("cut.npy: data truncated"));
  CHECK_THROWS_WITH(read_npy_entry(dir / "missing.npy", 0), Catch::Contains("missing.npy: cannot open"));
}

namespace {

// The arrays of the round-trip cases: one of each dtype write_npz takes, a 0-d one included.
const std::vector<float> kF = {0.25f, -1, 2, 4.5f, 1e-3f, -7};
const std::vector<int32_t> kI = {1, -2, 3};
const std::vector<int64_t> kL = {int64_t(1) << 40};
const std::vector<double> kD = {M_PI};
const std::vector<uint8_t> kU = {0, 255};

std::map<std::string, NpyArray> sample_arrays() {
  return {{"weights", make_npy(kF.data(), {2, 3})},
          {"ids", make_npy(kI.data(), {3})},
          {"big", make_npy(kL.data(), {})},
          {"pi", make_npy(kD.data(), {1, 1})},
          {"bytes", make_npy(kU.data(), {2})}};
}

}  // namespace

TEST_CASE("write_npz then read_npz round-trips", "[npz]") {
  TempDir dir;
  const std::map<std::string, NpyArray> arrays = sample_arrays();
  write_npz(dir / "a.npz", arrays);
  auto back = read_npz(dir / "a.npz");
  REQUIRE(back.size() == arrays.size());
  for (const auto& [name, a] : arrays) {
    INFO(name);
    CHECK(back[name].descr == a.descr);
    CHECK(back[name].shape == a.shape);
    CHECK(back[name].bytes == a.bytes);
  }
}

TEST_CASE("numpy reads write_npy's and write_npz's files", "[npz]") {
  if (!have_numpy()) ATTNKIT_SKIP("/usr/bin/python3 with numpy is not available");
  TempDir dir;
  write_npz(dir / "a.npz", sample_arrays());
  write_npy(dir / "w.npy", kF.data(), {2, 3});
  CHECK(run_python("import numpy as np, zipfile\n"
                   "a = np.load(\"" + dir / "w.npy" + "\")\n"
                   "assert a.dtype == np.float32 and a.shape == (2, 3), a\n"
                   "assert (a.ravel() == np.float32([0.25, -1, 2, 4.5, 1e-3, -7])).all(), a\n"
                   "assert zipfile.ZipFile(\"" + dir / "a.npz" + "\").testzip() is None\n"
                   "z = np.load(\"" + dir / "a.npz" + "\")\n"
                   "assert sorted(z.files) == [\"big\", \"bytes\", \"ids\", \"pi\", \"weights\"]\n"
                   "assert z[\"ids\"].dtype == np.int32 and list(z[\"ids\"]) == [1, -2, 3]\n"
                   "assert z[\"big\"].shape == () and z[\"big\"] == 2**40\n"
                   "assert z[\"pi\"].shape == (1, 1) and z[\"pi\"][0, 0] == np.pi\n"
                   "assert list(z[\"bytes\"]) == [0, 255] and z[\"bytes\"].dtype == np.uint8\n"
                   "assert (z[\"weights\"] == a).all()\n") == 0);
}

TEST_CASE("converters refuse values and types that do not fit", "[npy]") {
  int64_t big[] = {1, int64_t(1) << 40};
  require_file_error([&] { to_int32(make_npy(big, {2}), "ctx: 'ids'"); }, "ctx: 'ids'",
                     "element 1 = 1099511627776 does not fit in int32");
  float f[] = {1.5f};
  require_file_error([&] { to_int32(make_npy(f, {1}), "ctx: 'f'"); }, "ctx: 'f'", "floating point");
  require_file_error([&] { to_string(make_npy(f, {1}), "ctx: 'f'"); }, "ctx: 'f'", "not bytes");
  NpyArray s = read_npz(fixture("ok_savez.npz"))["label"];
  require_file_error([&] { to_float32(s, "ctx: 'label'"); }, "ctx: 'label'", "cannot be converted");
  NpyArray u64;
  u64.descr = "<u8";
  u64.shape = {1};
  u64.bytes.assign(8, 0xff);
  require_file_error([&] { to_int64(u64, "ctx: 'u'"); }, "ctx: 'u'", "does not fit in int64");
}

// ---- malformed files: one case each, the message names the file and the problem ------------

#define MALFORMED(reader, file, phrase)                                   \
  TEST_CASE("malformed " file " is rejected", "[malformed]") {            \
    const std::string path = fixture(file);                               \
    require_file_error([&] { reader(path); }, path, phrase);              \
  }

MALFORMED(read_npy, "npy_empty.npy", "bad magic")
MALFORMED(read_npy, "npy_bad_magic.npy", "not a .npy file (bad magic")
MALFORMED(read_npy, "npy_bad_version.npy", "unsupported .npy version 4.0")
MALFORMED(read_npy, "npy_header_past_end.npy", "header length 4000 runs past the end of the file")
MALFORMED(read_npy, "npy_header_not_dict.npy", "header is not a dict")
MALFORMED(read_npy, "npy_header_syntax.npy", "header is not a valid Python dict literal")
MALFORMED(read_npy, "npy_missing_shape.npy", "header is missing key 'shape'")
MALFORMED(read_npy, "npy_fortran_order.npy", "fortran_order is True")
MALFORMED(read_npy, "npy_big_endian.npy", "unsupported dtype '>f4' (big-endian")
MALFORMED(read_npy, "npy_object.npy", "unsupported dtype '|O' (Python objects)")
MALFORMED(read_npy, "npy_unicode.npy", "unsupported dtype '<U3' (unicode strings")
MALFORMED(read_npy, "npy_structured.npy", "unsupported dtype (structured records)")
MALFORMED(read_npy, "npy_negative_dim.npy", "negative dimension -1")
MALFORMED(read_npy, "npy_shape_overflow.npy", "overflows int64")
MALFORMED(read_npy, "npy_shape_too_big.npy",
          "data truncated: shape (1000000, 1000000) of <f4 needs 4000000000000 bytes, only 16 present")
MALFORMED(read_npy, "npy_truncated.npy", "data truncated")
MALFORMED(read_npz, "npz_not_zip.npz", "not a zip file (no end of central directory record)")
MALFORMED(read_npz, "npz_bad_local_signature.npz", "entry 'x.npy': bad local file header signature")
MALFORMED(read_npz, "npz_entry_past_end.npz", "entry 'x.npy': data at offset")
MALFORMED(read_npz, "npz_crc_mismatch.npz", "entry 'x.npy': CRC mismatch")
MALFORMED(read_npz, "npz_inflate_error.npz", "entry 'x.npy': inflate failed: invalid block type")
MALFORMED(read_npz, "npz_size_mismatch.npz", "entry 'x.npy': inflates to more than the declared 100 bytes")
MALFORMED(read_npz, "npz_zip_bomb.npz", "beyond deflate's maximum ratio (zip bomb?)")
MALFORMED(read_npz, "npz_duplicate_names.npz", "duplicate entry 'a.npy'")
MALFORMED(read_npz, "npz_unsupported_method.npz", "compression method 12 is not supported")
MALFORMED(read_npz, "npz_not_npy_entry.npz", "entry 'notes.txt' is not a .npy file")
MALFORMED(read_npz, "npz_truncated_member.npz", "entry 'a.npy': data truncated")

// A small np.savez_compressed-style archive whose one entry, X_train.npy, honestly inflates to
// 10^8 sequences of 2 int8 tokens (200 MB from about 200 KB): the npy header, then zeros.
namespace {
constexpr int64_t kHugeSequences = 100000000, kHugeSeqLen = 2;
constexpr uint64_t kHugeHeader = 128;  // 10-byte preamble + padded header
constexpr uint64_t kHugeEntryBytes = kHugeHeader + kHugeSequences * kHugeSeqLen;

void write_huge_npz(const std::string& path) {
  std::string header = "{'descr': '|i1', 'fortran_order': False, 'shape': (" +
                       std::to_string(kHugeSequences) + ", " + std::to_string(kHugeSeqLen) + "), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::vector<uint8_t> head = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                               static_cast<uint8_t>(header.size() & 0xff),
                               static_cast<uint8_t>(header.size() >> 8)};
  head.insert(head.end(), header.begin(), header.end());
  REQUIRE(head.size() == kHugeHeader);

  // Raw deflate (as zip stores it) of the header and the zeros, fed in 1 MB pieces.
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> compressed, out(1 << 20);
  uLong crc = crc32(0, nullptr, 0);
  const std::vector<uint8_t> zeros(1 << 20, 0);
  auto feed = [&](const uint8_t* p, size_t n, int flush) {
    crc = crc32(crc, p, static_cast<uInt>(n));
    zs.next_in = const_cast<Bytef*>(p);
    zs.avail_in = static_cast<uInt>(n);
    int rc;
    do {
      zs.next_out = out.data();
      zs.avail_out = static_cast<uInt>(out.size());
      rc = deflate(&zs, flush);
      REQUIRE(rc != Z_STREAM_ERROR);
      compressed.insert(compressed.end(), out.data(), out.data() + (out.size() - zs.avail_out));
    } while (zs.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
  };
  feed(head.data(), head.size(), Z_NO_FLUSH);
  for (uint64_t left = kHugeEntryBytes - kHugeHeader; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, zeros.size()));
    left -= n;
    feed(zeros.data(), n, left == 0 ? Z_FINISH : Z_NO_FLUSH);
  }
  deflateEnd(&zs);

  auto put16 = [](std::vector<uint8_t>& b, uint32_t v) { b.push_back(v & 0xff); b.push_back((v >> 8) & 0xff); };
  auto put32 = [&](std::vector<uint8_t>& b, uint32_t v) { put16(b, v & 0xffff); put16(b, v >> 16); };
  const std::string name = "X_train.npy";
  std::vector<uint8_t> common;  // version 2.0, no flags, deflate, time, date, crc, sizes, name, extra
  put16(common, 20); put16(common, 0); put16(common, 8); put16(common, 0); put16(common, 0x21);
  put32(common, static_cast<uint32_t>(crc)); put32(common, static_cast<uint32_t>(compressed.size()));
  put32(common, static_cast<uint32_t>(kHugeEntryBytes));
  put16(common, static_cast<uint32_t>(name.size())); put16(common, 0);
  std::vector<uint8_t> zip;
  put32(zip, 0x04034b50);
  zip.insert(zip.end(), common.begin(), common.end());
  zip.insert(zip.end(), name.begin(), name.end());
  zip.insert(zip.end(), compressed.begin(), compressed.end());
  const uint32_t central_at = static_cast<uint32_t>(zip.size());
  put32(zip, 0x02014b50); put16(zip, 0x0314);
  zip.insert(zip.end(), common.begin(), common.end());
  put16(zip, 0); put16(zip, 0); put16(zip, 0); put32(zip, 0644u << 16); put32(zip, 0);
  zip.insert(zip.end(), name.begin(), name.end());
  const uint32_t central_size = static_cast<uint32_t>(zip.size()) - central_at;
  put32(zip, 0x06054b50); put16(zip, 0); put16(zip, 0); put16(zip, 1); put16(zip, 1);
  put32(zip, central_size); put32(zip, central_at); put16(zip, 0);
  write_file_atomic(path, zip.data(), zip.size());
}
}  // namespace

TEST_CASE("an .npz entry needing more memory than the process can have is a FileError naming it",
          "[npz]") {
  TempDir dir;
  const std::string path = dir / "huge.npz";
  write_huge_npz(path);
  CHECK(fs::file_size(path) < 1000000);
  const std::string want = std::to_string(kHugeEntryBytes);
#if defined(__SANITIZE_ADDRESS__) || ATTNKIT_TEST_HAS_ASAN
  WARN("skipped under AddressSanitizer: the child's RLIMIT_DATA would starve its allocator");
#else
  // A child limited to 128 MB of data memory reads the 200 MB entry; it reports the message.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    struct rlimit r;
    getrlimit(RLIMIT_DATA, &r);
    r.rlim_cur = 128ull << 20;
    std::string message = "no error";
    int code = 2;
    if (setrlimit(RLIMIT_DATA, &r) != 0) {
      message = "setrlimit failed", code = 3;
    } else {
      try {
        read_npz(path);
      } catch (const FileError& e) {
        message = e.what(), code = 0;
      } catch (const std::exception& e) {
        message = std::string("not a FileError: ") + e.what(), code = 1;
      }
    }
    (void)!write(fds[1], message.data(), message.size());
    _exit(code);
  }
  close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  INFO("child: " << message);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(message, Contains(path) && Contains("entry 'X_train.npy'") &&
                          Contains("needs " + want + " bytes of memory"));
#endif
  // With the memory at hand the same file reads: 10^8 sequences.
  const auto arrays = read_npz(path);
  REQUIRE(arrays.count("X_train"));
  CHECK(arrays.at("X_train").shape == std::vector<int64_t>{kHugeSequences, kHugeSeqLen});
}

// An .npy image with the given header text (padded as numpy pads it) and no data.
std::vector<uint8_t> npy_with_header(std::string header) {
  header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";
  std::string image = std::string("\x93NUMPY\x01\x00", 8);
  image += static_cast<char>(header.size() & 0xFF);
  image += static_cast<char>(header.size() >> 8);
  image += header;
  return std::vector<uint8_t>(image.begin(), image.end());
}

std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    parse_npy(b.data(), b.size(), "x.npy");
  } catch (const FileError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("header text in messages: control bytes and bytes that are not UTF-8 escaped, length bounded", "[malformed]") {
  const std::string nul = parse_error(npy_with_header(std::string("{'descr': '<i4") + '\0' + "zz', 'fortran_order': False, 'shape': (3,), }"));
  CHECK(nul == "x.npy: unsupported dtype '<i4\\x00zz' (no item size)");
  const std::string nested = parse_error(npy_with_header("{'descr': " + std::string(5000, '(') + "}"));
  CHECK(nested.rfind("x.npy: header is not a valid Python dict literal", 0) == 0);
  CHECK(nested.size() < 400);
  INFO(nested);
  CHECK(nested.find(" bytes)") != std::string::npos);
  CHECK(printable("ok \xd1\x8f \xff\x01") == "ok \xd1\x8f \\xff\\x01");  // я kept, the rest escaped
  CHECK(printable("a\xc2\x9b[2Jb\xc2\xa0") == "a\\xc2\\x9b[2Jb\xc2\xa0");  // CSI (U+009B) escaped, U+00A0 kept
}

TEST_CASE("missing files are a FileError naming the path", "[malformed]") {
  const std::string path = kData + "/malformed/does_not_exist.npz";
  require_file_error([&] { read_npz(path); }, path, "cannot open: No such file or directory");
  require_file_error([&] { read_npy(kData); }, kData, "not a regular file");
  require_file_error([&] { read_file(fixture("ok_f32.npy"), 100); }, "ok_f32.npy",
                     "more than the limit of 100 bytes");
}

// Every prefix and every single-byte corruption of valid files either parses or throws a
// FileError: no crash, no other exception, no huge allocation (run under the sanitize preset).
TEST_CASE("truncated and corrupted .npy/.npz images only ever throw FileError", "[malformed]") {
  for (const char* name : {"ok_f32.npy", "ok_savez.npz", "ok_savez_compressed.npz", "ok_zip64.npz"}) {
    INFO(name);
    const std::vector<uint8_t> good = file_bytes(fixture(name));
    const bool zip = std::string(name).find(".npz") != std::string::npos;
    auto parse = [&](const std::vector<uint8_t>& b) {
      try {
        if (zip) parse_npz(b.data(), b.size(), name);
        else parse_npy(b.data(), b.size(), name);
      } catch (const FileError& e) {
        CHECK_THAT(e.what(), Contains(name));
      }
    };
    for (size_t n = 0; n < good.size(); ++n) parse(std::vector<uint8_t>(good.begin(), good.begin() + n));
    std::mt19937 rng(1234);
    for (size_t i = 0; i < good.size(); ++i) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= static_cast<uint8_t>(1 + rng() % 255);
      parse(bad);
    }
  }
}

// ---- write_file_atomic ----------------------------------------------------------------------

namespace {
bool has_temp_files(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}
std::string text_of(const std::string& path) {
  std::vector<uint8_t> b = read_file(path);
  return std::string(b.begin(), b.end());
}
}  // namespace

TEST_CASE("write_file_atomic replaces the file only on success", "[file_io]") {
  TempDir dir;
  const std::string path = dir / "state.bin";
  write_file_atomic(path, "old", 3);
  CHECK(text_of(path) == "old");

  // The writer fails half-way: its exception passes through, the old file stays.
  CHECK_THROWS_WITH(write_file_atomic(path, [&](std::FILE* f) {
                      std::fputs("half of the new", f);
                      throw std::runtime_error("writer failed");
                    }),
                    "writer failed");
  CHECK(text_of(path) == "old");
  CHECK_FALSE(has_temp_files(dir.path));

  write_file_atomic(path, [](std::FILE* f) { std::fputs("new", f); });
  CHECK(text_of(path) == "new");
  CHECK_FALSE(has_temp_files(dir.path));
}

TEST_CASE("NpyReader: dtype and shape before the data, int32 read straight into its vector", "[npy]") {
  TempDir dir;
  const std::vector<int32_t> v32 = {3, -1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  const std::vector<int64_t> v64(v32.begin(), v32.end());
  write_npy(dir / "i4.npy", make_npy(v32.data(), {3, 4}));
  write_npy(dir / "i8.npy", make_npy(v64.data(), {4, 3}));
  const NpyReader r4(dir / "i4.npy");
  CHECK(r4.descr() == "<i4");
  CHECK(r4.shape() == std::vector<int64_t>{3, 4});
  CHECK(r4.kind() == 'i');
  CHECK(r4.read_int32("i4") == v32);
  CHECK(r4.read_int32("i4") == to_int32(read_npy(dir / "i4.npy"), "i4"));  // (readable again)
  const NpyArray whole = r4.read();
  CHECK(whole.shape == std::vector<int64_t>{3, 4});
  CHECK(to_int32(whole, "i4") == v32);
  const NpyReader r8(dir / "i8.npy");  // another dtype: converted, values checked to fit
  CHECK(r8.descr() == "<i8");
  CHECK(r8.read_int32("i8") == v32);
  const std::vector<int64_t> big = {1, int64_t{1} << 40};
  write_npy(dir / "big.npy", make_npy(big.data(), {2}));
  CHECK_THROWS_WITH(NpyReader(dir / "big.npy").read_int32("big"), Catch::Contains("does not fit in int32"));
  const std::vector<float> f = {1.5f, 2.5f};
  write_npy(dir / "f.npy", make_npy(f.data(), {2}));
  CHECK(NpyReader(dir / "f.npy").kind() == 'f');
  CHECK_THROWS_WITH(NpyReader(dir / "f.npy").read_int32("f"), Catch::Contains("floating point"));
  // A header promising more data than the file holds is refused when the reader opens it.
  std::vector<uint8_t> cut = file_bytes(dir / "i4.npy");
  cut.resize(cut.size() - 4);
  write_file_atomic(dir / "cut.npy", cut.data(), cut.size());
  CHECK_THROWS_AS(NpyReader(dir / "cut.npy"), attnkit::FileError);
}

namespace {
// The AnonHugePages of the mapping of /proc/self/smaps that holds address p, in kB (-1 if none).
long huge_kb_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = at >= lo && at < hi;
      continue;
    }
    long kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}
}  // namespace

TEST_CASE("advise_huge_pages: a large buffer faults in huge pages where the kernel gives them on request", "[file_io]") {
  // Small, unaligned and empty ranges: nothing to do, nothing broken.
  std::vector<float> small(1000, 1.0f);
  advise_huge_pages(small.data(), small.size() * sizeof(float));
  advise_huge_pages(nullptr, 0);
  CHECK(small[999] == 1.0f);
  std::vector<int32_t> big;
  const size_t n = 12u << 20 >> 2;  // 12 MiB of int32
  big.reserve(n);
  advise_huge_pages(big.data() + 1, n * sizeof(int32_t) - 4);  // (unaligned start and end)
  big.resize(n, 7);
  CHECK(big.front() == 7);
  CHECK(big.back() == 7);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.find("[madvise]") == std::string::npos && mode.find("[always]") == std::string::npos) {
    WARN("transparent huge pages off here (" << mode << "): the advice is not checked");
    return;
  }
#if defined(__SANITIZE_ADDRESS__)
  WARN("AddressSanitizer's allocator maps its own memory: the advice is not checked");
  return;
#endif
  // At least 4 of its 6 whole 2 MiB blocks (the kernel may be short of free huge pages).
  CHECK(huge_kb_at(big.data() + n / 2) >= 4 * 2048);
}

TEST_CASE("ReadOnlyFile reads slices of one file, the one it opened even when replaced", "[file_io]") {
  TempDir dir;
  const std::string path = dir / "data.bin";
  write_file_atomic(path, "0123456789", 10);
  const ReadOnlyFile file(path);
  CHECK(file.size() == 10);
  CHECK(file.path() == path);
  const auto text = [](const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); };
  CHECK(text(file.read(2, 3)) == "234");
  CHECK(text(file.read(8, 100)) == "89");  // fewer where the file ends
  CHECK(file.read(10, 5).empty());
  CHECK(file.read(1000, 5).empty());
  // Replaced under its name (as write_file_atomic and a writer of a new .npy do): the reads still
  // see the file opened, never the header of one and the data of another.
  write_file_atomic(path, "abcdefghijklmnop", 16);
  CHECK(text(file.read(0, 4)) == "0123");
  CHECK(file.size() == 10);
  CHECK(text(ReadOnlyFile(path).read(0, 4)) == "abcd");
  CHECK_THROWS_WITH(ReadOnlyFile(dir / "missing.bin"), Catch::Contains("missing.bin: cannot open"));
  CHECK_THROWS_WITH(ReadOnlyFile(dir.path), Catch::Contains("not a regular file"));
}

// A temporary `name.tmp.<pid>` would exceed NAME_MAX (255 bytes) for these names: the writer
// uses a shortened temporary name, and the cleanup of a killed writer's temporary still works.
TEST_CASE("write_file_atomic writes files whose names are 250 and 255 bytes long", "[file_io]") {
  TempDir dir;
  for (size_t length : {size_t{250}, size_t{255}}) {
    INFO("name of " << length << " bytes");
    const std::string path = dir / (std::string(length - 4, 'n') + ".npy");
    write_file_atomic(path, "old", 3);
    CHECK(text_of(path) == "old");
    CHECK_FALSE(has_temp_files(dir.path));

    // A writer that dies mid-write leaves its temporary behind; the next write removes it.
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        write_file_atomic(path, [](std::FILE* f) {
          std::fputs("half", f);
          std::fflush(f);
          _exit(0);
        });
      } catch (...) {
      }
      _exit(1);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(has_temp_files(dir.path));
    CHECK(text_of(path) == "old");

    write_file_atomic(path, "new", 3);
    CHECK(text_of(path) == "new");
    CHECK_FALSE(has_temp_files(dir.path));
    std::filesystem::remove(path);
  }
}

TEST_CASE("write_file_atomic reports a full disk and keeps the old file", "[file_io]") {
  int full = ::open("/dev/full", O_WRONLY);
  if (full < 0) ATTNKIT_SKIP("no /dev/full");
  TempDir dir;
  const std::string path = dir / "model.npy";
  write_file_atomic(path, "old", 3);
  // Swap the temp file's descriptor for /dev/full: every write from here on fails with ENOSPC,
  // which the callback does not check; write_file_atomic must.
  require_file_error(
      [&] {
        write_file_atomic(path, [&](std::FILE* f) {
          ::dup2(full, ::fileno(f));
          std::vector<char> chunk(1 << 16, 'x');
          std::fwrite(chunk.data(), 1, chunk.size(), f);
        });
      },
      path, "No space left on device");
  ::close(full);
  CHECK(text_of(path) == "old");
  CHECK_FALSE(has_temp_files(dir.path));
}

TEST_CASE("writing into a missing directory is a FileError naming the path", "[file_io]") {
  TempDir dir;
  const std::string path = dir / "no/such/dir/x.npy";
  float v = 1;
  require_file_error([&] { write_npy(path, &v, {1}); }, path, "No such file or directory");
  std::map<std::string, NpyArray> arrays = {{"v", make_npy(&v, {1})}};
  require_file_error([&] { write_npz(path, arrays); }, path, "cannot create");
}

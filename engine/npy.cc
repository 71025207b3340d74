// .npy parsing/encoding and the converters. The zip container (.npz) is in the second half.
#include "engine/npy.h"

#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <type_traits>

#include "engine/error.h"
#include "engine/file_io.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "attnkit's file formats are little-endian and are read by memcpy on a little-endian host"
#endif

namespace attnkit {

namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicLen = 6;
constexpr uint32_t kMaxNpyHeader = 1u << 20;  // numpy itself refuses headers over 10000 bytes

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

// ---- descr -------------------------------------------------------------------------------

struct Dtype {
  char kind = 0;
  size_t itemsize = 0;
};

// Parses a numpy type string and checks it is one we support; throws with the reason if not.
Dtype parse_descr(const std::string& descr, const std::string& what) {
  auto fail = [&](const std::string& why) -> Dtype {
    throw FileError(what + ": unsupported dtype " + quote(descr) + " (" + why + ")");
  };
  size_t pos = 0;
  char order = '|';
  if (!descr.empty() && std::strchr("<>|=", descr[0])) order = descr[pos++];
  if (pos >= descr.size()) return fail("empty type");
  Dtype t;
  t.kind = descr[pos++];
  switch (t.kind) {
    case 'O': return fail("Python objects");
    case 'U': return fail("unicode strings; save bytes instead");
    case 'c': return fail("complex numbers");
    case 'M': case 'm': return fail("datetimes");
    case 'V': return fail("void/structured records");
    case 'f': case 'i': case 'u': case 'b': case 'S': break;
    default: return fail("unknown kind");
  }
  std::string digits = descr.substr(pos);
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fail("no item size");
  t.itemsize = std::stoul(digits);
  switch (t.kind) {
    case 'f':
      if (t.itemsize != 4 && t.itemsize != 8) return fail("only float32 and float64");
      break;
    case 'i':
    case 'u':
      if (t.itemsize != 1 && t.itemsize != 2 && t.itemsize != 4 && t.itemsize != 8)
        return fail("bad integer size");
      break;
    case 'b':
      if (t.itemsize != 1) return fail("bad bool size");
      break;
    case 'S':
      if (t.itemsize == 0) return fail("zero-length bytes");
      return t;  // bytes have no byte order
  }
  if (t.itemsize > 1 && order == '>') return fail("big-endian; save with '<' byte order");
  if (t.itemsize > 1 && order == '|') return fail("numeric type without byte order");
  return t;
}

// ---- the header: a Python dict literal ---------------------------------------------------

// The subset of Python literals numpy writes: strings, True/False/None, ints, tuples, lists,
// dicts. Anything else is a malformed header.
struct PyValue {
  enum Type { kStr, kBool, kNone, kInt, kTuple, kList, kDict } type = kNone;
  std::string str;
  bool boolean = false;
  int64_t integer = 0;
  std::vector<PyValue> items;
  std::vector<std::pair<std::string, PyValue>> dict;
};

class PyLiteralParser {
 public:
  PyLiteralParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  PyValue parse_all() {
    PyValue v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the dict");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw FileError(what_ + ": header is not a valid Python dict literal: " + why +
                    " at offset " + std::to_string(pos_) + " in " + quote(s_));
  }
  void skip_space() {
    while (pos_ < s_.size() && std::strchr(" \t\r\n", s_[pos_]) && s_[pos_]) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) { ++pos_; return true; }
    return false;
  }
  bool eat_word(const char* w) {
    size_t n = std::strlen(w);
    if (s_.compare(pos_, n, w) != 0) return false;
    pos_ += n;
    return true;
  }

  PyValue value(int depth) {
    if (depth > 16) fail("nested too deeply");
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end");
    PyValue v;
    char c = s_[pos_];
    if (c == '\'' || c == '"') {
      v.type = PyValue::kStr;
      v.str = string_literal();
    } else if (c == '{') {
      v.type = PyValue::kDict;
      ++pos_;
      while (!eat('}')) {
        skip_space();
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("expected a string key");
        std::string key = string_literal();
        if (!eat(':')) fail("expected ':'");
        v.dict.emplace_back(key, value(depth + 1));
        if (!eat(',')) { if (!eat('}')) fail("expected ',' or '}'"); break; }
      }
    } else if (c == '(' || c == '[') {
      char close = c == '(' ? ')' : ']';
      v.type = c == '(' ? PyValue::kTuple : PyValue::kList;
      ++pos_;
      bool comma = false;
      while (!eat(close)) {
        v.items.push_back(value(depth + 1));
        comma = eat(',');
        if (!comma) { if (!eat(close)) fail(std::string("expected ',' or '") + close + "'"); break; }
      }
      // Python: (3) is the int 3, not a tuple.
      if (c == '(' && v.items.size() == 1 && !comma) return v.items[0];
    } else if (eat_word("True")) {
      v.type = PyValue::kBool;
      v.boolean = true;
    } else if (eat_word("False")) {
      v.type = PyValue::kBool;
    } else if (eat_word("None")) {
      v.type = PyValue::kNone;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = PyValue::kInt;
      v.integer = int_literal();
    } else {
      fail(std::string("unexpected character '") + c + "'");
    }
    return v;
  }

  std::string string_literal() {
    char q = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') fail("escapes are not supported");
      out += s_[pos_++];
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  int64_t int_literal() {
    bool negative = s_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected digits");
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      uint64_t d = static_cast<uint64_t>(s_[pos_++] - '0');
      if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - d) / 10)
        fail("integer too large");
      v = v * 10 + d;
    }
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 longs in old files
    return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  }

  const std::string& s_;
  const std::string& what_;
  size_t pos_ = 0;
};

// What the header says; the data follows at data_offset.
struct NpyHeader {
  std::string descr;
  Dtype dtype;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
  size_t data_bytes = 0;
};

// numel·itemsize, or a FileError if a dimension is negative or the product overflows.
uint64_t checked_byte_size(const std::vector<int64_t>& shape, size_t itemsize,
                           const std::string& what) {
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t n = 1;
  for (int64_t d : shape)
    if (d < 0) throw FileError(what + ": shape has a negative dimension " + std::to_string(d));
  for (int64_t d : shape) {
    if (d != 0 && n > limit / static_cast<uint64_t>(d))
      throw FileError(what + ": shape's element count overflows int64");
    n *= static_cast<uint64_t>(d);
  }
  if (itemsize != 0 && n > limit / itemsize)
    throw FileError(what + ": shape's byte size overflows int64");
  return n * itemsize;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

NpyHeader parse_npy_header(const uint8_t* data, size_t size, const std::string& what) {
  if (size < kNpyMagicLen + 2 || std::memcmp(data, kNpyMagic, kNpyMagicLen) != 0)
    throw FileError(what + ": not a .npy file (bad magic; expected \\x93NUMPY)");
  int major = data[6], minor = data[7];
  size_t prefix;
  if (major == 1 && minor == 0) prefix = 10;
  else if ((major == 2 || major == 3) && minor == 0) prefix = 12;
  else
    throw FileError(what + ": unsupported .npy version " + std::to_string(major) + "." +
                    std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  if (size < prefix) throw FileError(what + ": file ends inside the .npy preamble");
  uint32_t header_len = prefix == 10 ? load_le<uint16_t>(data + 8) : load_le<uint32_t>(data + 8);
  if (header_len > kMaxNpyHeader)
    throw FileError(what + ": header length " + std::to_string(header_len) +
                    " is absurd (limit " + std::to_string(kMaxNpyHeader) + ")");
  if (header_len > size - prefix)
    throw FileError(what + ": header length " + std::to_string(header_len) +
                    " runs past the end of the file (" + std::to_string(size) + " bytes)");

  std::string text(reinterpret_cast<const char*>(data + prefix), header_len);
  PyValue dict = PyLiteralParser(text, what).parse_all();
  if (dict.type != PyValue::kDict) throw FileError(what + ": header is not a dict: " + quote(text));
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* shape = nullptr;
  for (const auto& [key, v] : dict.dict) {
    const PyValue** slot = key == "descr" ? &descr : key == "fortran_order" ? &fortran
                         : key == "shape" ? &shape : nullptr;
    if (!slot) throw FileError(what + ": header has unexpected key " + quote(key));
    if (*slot) throw FileError(what + ": header repeats key " + quote(key));
    *slot = &v;
  }
  for (auto [name, v] : {std::pair{"descr", descr}, {"fortran_order", fortran}, {"shape", shape}})
    if (!v) throw FileError(what + ": header is missing key '" + name + "'");
  if (descr->type == PyValue::kList)
    throw FileError(what + ": unsupported dtype (structured records)");
  if (descr->type != PyValue::kStr) throw FileError(what + ": header 'descr' is not a string");
  if (fortran->type != PyValue::kBool)
    throw FileError(what + ": header 'fortran_order' is not True or False");
  if (shape->type != PyValue::kTuple) throw FileError(what + ": header 'shape' is not a tuple");

  NpyHeader h;
  h.descr = descr->str;
  h.dtype = parse_descr(h.descr, what);
  for (const PyValue& d : shape->items) {
    if (d.type != PyValue::kInt) throw FileError(what + ": header 'shape' holds a non-integer");
    h.shape.push_back(d.integer);
  }
  // For 0-d and 1-d arrays Fortran and C order are the same bytes.
  if (fortran->boolean && h.shape.size() > 1)
    throw FileError(what + ": fortran_order is True (Fortran-ordered arrays are not supported; "
                    "save np.ascontiguousarray(a))");
  uint64_t nbytes = checked_byte_size(h.shape, h.dtype.itemsize, what);
  h.data_offset = prefix + header_len;
  if (nbytes > size - h.data_offset)
    throw FileError(what + ": data truncated: shape " + shape_text(h.shape) + " of " + h.descr +
                    " needs " + std::to_string(nbytes) + " bytes, only " +
                    std::to_string(size - h.data_offset) + " present");
  h.data_bytes = static_cast<size_t>(nbytes);
  return h;
}

// Calls f(value) for every element with its C++ type (bool as uint8_t, bytes rejected).
template <typename F>
void visit_values(const NpyArray& a, const std::string& what, const char* target, F&& f) {
  Dtype t = parse_descr(a.descr, what);
  int64_t n = a.numel();
  if (a.bytes.size() != static_cast<uint64_t>(n) * t.itemsize)
    throw FileError(what + ": array holds " + std::to_string(a.bytes.size()) +
                    " bytes, shape needs " + std::to_string(n * t.itemsize));
  const uint8_t* p = a.bytes.data();
  auto each = [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) f(load_le<T>(p + i * sizeof(T)), i);
  };
  switch (t.kind * 16 + static_cast<int>(t.itemsize)) {
    case 'f' * 16 + 4: return each(float{});
    case 'f' * 16 + 8: return each(double{});
    case 'i' * 16 + 1: return each(int8_t{});
    case 'i' * 16 + 2: return each(int16_t{});
    case 'i' * 16 + 4: return each(int32_t{});
    case 'i' * 16 + 8: return each(int64_t{});
    case 'u' * 16 + 1: return each(uint8_t{});
    case 'u' * 16 + 2: return each(uint16_t{});
    case 'u' * 16 + 4: return each(uint32_t{});
    case 'u' * 16 + 8: return each(uint64_t{});
    case 'b' * 16 + 1: return each(uint8_t{});
  }
  throw FileError(what + ": dtype " + quote(a.descr) + " cannot be converted to " + target);
}

template <typename Out>
std::vector<Out> to_floating(const NpyArray& a, const std::string& what, const char* target) {
  std::vector<Out> out(static_cast<size_t>(a.numel()));
  bool is_bool = a.kind() == 'b';
  visit_values(a, what, target, [&](auto v, int64_t i) {
    out[i] = is_bool ? Out(v != 0) : static_cast<Out>(v);
  });
  return out;
}

template <typename Out>
std::vector<Out> to_integer(const NpyArray& a, const std::string& what, const char* target) {
  if (a.kind() == 'f')
    throw FileError(what + ": dtype " + quote(a.descr) + " is floating point, expected integers");
  std::vector<Out> out(static_cast<size_t>(a.numel()));
  bool is_bool = a.kind() == 'b';
  visit_values(a, what, target, [&](auto v, int64_t i) {
    using T = decltype(v);
    if constexpr (std::is_integral_v<T>) {
      bool fits;
      if constexpr (std::is_signed_v<T>)
        fits = static_cast<int64_t>(v) >= static_cast<int64_t>(std::numeric_limits<Out>::min()) &&
               static_cast<int64_t>(v) <= static_cast<int64_t>(std::numeric_limits<Out>::max());
      else
        fits = static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<Out>::max());
      if (!fits)
        throw FileError(what + ": element " + std::to_string(i) + " = " + std::to_string(v) +
                        " does not fit in " + target);
      out[i] = is_bool ? Out(v != 0) : static_cast<Out>(v);
    }
  });
  return out;
}

template <typename T>
NpyArray make_array(const char* descr, const T* data, const std::vector<int64_t>& shape) {
  NpyArray a;
  a.descr = descr;
  a.shape = shape;
  uint64_t nbytes = checked_byte_size(shape, sizeof(T), "make_npy");
  const uint8_t* p = reinterpret_cast<const uint8_t*>(data);
  a.bytes.assign(p, p + nbytes);
  return a;
}

}  // namespace

// ---- NpyArray and converters -------------------------------------------------------------

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t NpyArray::itemsize() const { return parse_descr(descr, "NpyArray").itemsize; }
char NpyArray::kind() const { return parse_descr(descr, "NpyArray").kind; }

std::vector<float> to_float32(const NpyArray& a, const std::string& what) {
  return to_floating<float>(a, what, "float32");
}
std::vector<double> to_float64(const NpyArray& a, const std::string& what) {
  return to_floating<double>(a, what, "float64");
}
std::vector<int32_t> to_int32(const NpyArray& a, const std::string& what) {
  return to_integer<int32_t>(a, what, "int32");
}
std::vector<int64_t> to_int64(const NpyArray& a, const std::string& what) {
  return to_integer<int64_t>(a, what, "int64");
}

std::string to_string(const NpyArray& a, const std::string& what) {
  Dtype t = parse_descr(a.descr, what);
  if (t.kind != 'S') throw FileError(what + ": dtype " + quote(a.descr) + " is not bytes ('S')");
  if (a.numel() != 1 || a.bytes.size() != t.itemsize)
    throw FileError(what + ": expected one bytes element, shape is " + shape_text(a.shape));
  size_t n = a.bytes.size();
  while (n > 0 && a.bytes[n - 1] == 0) --n;
  return std::string(a.bytes.begin(), a.bytes.begin() + n);
}

NpyArray make_npy(const float* d, const std::vector<int64_t>& s) { return make_array("<f4", d, s); }
NpyArray make_npy(const double* d, const std::vector<int64_t>& s) { return make_array("<f8", d, s); }
NpyArray make_npy(const int32_t* d, const std::vector<int64_t>& s) { return make_array("<i4", d, s); }
NpyArray make_npy(const int64_t* d, const std::vector<int64_t>& s) { return make_array("<i8", d, s); }
NpyArray make_npy(const uint8_t* d, const std::vector<int64_t>& s) { return make_array("|u1", d, s); }

// ---- .npy --------------------------------------------------------------------------------

NpyArray parse_npy(const uint8_t* data, size_t size, const std::string& what) {
  NpyHeader h = parse_npy_header(data, size, what);
  NpyArray a;
  a.descr = h.descr;
  a.shape = h.shape;
  a.bytes.assign(data + h.data_offset, data + h.data_offset + h.data_bytes);
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::vector<uint8_t> file = read_file(path);
  return parse_npy(file.data(), file.size(), path);
}

std::vector<uint8_t> encode_npy(const NpyArray& a) {
  Dtype t = parse_descr(a.descr, "encode_npy");
  uint64_t nbytes = checked_byte_size(a.shape, t.itemsize, "encode_npy");
  if (a.bytes.size() != nbytes)
    throw FileError("encode_npy: array holds " + std::to_string(a.bytes.size()) +
                    " bytes, shape " + shape_text(a.shape) + " of " + a.descr + " needs " +
                    std::to_string(nbytes));
  // Byte-identical to numpy's _write_array_header: sorted keys, room for the first axis to
  // grow to 21 digits, spaces and '\n' up to a multiple of 64.
  std::string header = "{'descr': '" + a.descr + "', 'fortran_order': False, 'shape': " +
                       shape_text(a.shape) + ", }";
  if (!a.shape.empty()) header.append(21 - std::to_string(a.shape[0]).size(), ' ');
  size_t prefix = 10;
  size_t hlen = header.size() + 1;
  size_t pad = 64 - (prefix + hlen) % 64;
  if (hlen + pad > 0xffff) {
    prefix = 12;
    pad = 64 - (prefix + hlen) % 64;
  }
  header.append(pad, ' ');
  header += '\n';
  std::vector<uint8_t> out(prefix);
  std::memcpy(out.data(), kNpyMagic, kNpyMagicLen);
  out[6] = prefix == 10 ? 1 : 2;
  out[7] = 0;
  uint32_t len = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < prefix - 8; ++i) out[8 + i] = static_cast<uint8_t>(len >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), a.bytes.begin(), a.bytes.end());
  return out;
}

void write_npy(const std::string& path, const NpyArray& a) {
  std::vector<uint8_t> image;
  try {
    image = encode_npy(a);
  } catch (const FileError& e) {
    throw FileError(path + ": " + e.what());
  }
  write_file_atomic(path, image.data(), image.size());
}

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  write_npy(path, make_npy(data, shape));
}
void write_npy(const std::string& path, const int32_t* data, const std::vector<int64_t>& shape) {
  write_npy(path, make_npy(data, shape));
}
void write_npy(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape) {
  write_npy(path, make_npy(data, shape));
}

// ---- .npz: a zip of .npy files -----------------------------------------------------------
// Only the parts of the zip format that np.savez / np.savez_compressed (Python's zipfile) and
// common zip tools produce: one disk, stored or deflated entries, zip64 size/offset records.

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalLen = 30, kCentralLen = 46, kEndLen = 22;
constexpr size_t kZip64EndLen = 56, kZip64LocatorLen = 20;
// Deflate cannot expand data more than ~1032:1; a larger declared ratio is a zip bomb.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kMaxNpzTotal = 1ull << 34;  // total uncompressed bytes, 16 GiB

struct ZipEntry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, uncompressed = 0, local_offset = 0;
  uint64_t data_offset = 0;  // filled in from the local header
};

// Bounds-checked little-endian reads from the archive image.
struct ZipImage {
  const uint8_t* data;
  size_t size;
  const std::string& path;

  void need(uint64_t offset, uint64_t len, const std::string& what) const {
    if (offset > size || len > size - offset)
      throw FileError(path + ": " + what + " at offset " + std::to_string(offset) + " (" +
                      std::to_string(len) + " bytes) runs past the end of the file (" +
                      std::to_string(size) + " bytes)");
  }
  uint16_t u16(uint64_t at) const { return load_le<uint16_t>(data + at); }
  uint32_t u32(uint64_t at) const { return load_le<uint32_t>(data + at); }
  uint64_t u64(uint64_t at) const { return load_le<uint64_t>(data + at); }
};

struct CentralDirectory {
  uint64_t offset = 0, size = 0, entries = 0;
};

CentralDirectory find_central_directory(const ZipImage& z) {
  if (z.size < kEndLen)
    throw FileError(z.path + ": not a zip file (" + std::to_string(z.size) +
                    " bytes, too short for an end of central directory record)");
  // The end record sits at the very end, followed only by a comment of at most 64 KiB.
  size_t lowest = z.size - kEndLen > 0xffff ? z.size - kEndLen - 0xffff : 0;
  size_t end = z.size - kEndLen + 1;
  bool found = false;
  while (end-- > lowest) {
    if (z.u32(end) == kEndSig && end + kEndLen + z.u16(end + 20) <= z.size) { found = true; break; }
  }
  if (!found) throw FileError(z.path + ": not a zip file (no end of central directory record)");
  if (z.u16(end + 4) != 0 || z.u16(end + 6) != 0)
    throw FileError(z.path + ": multi-disk zip archives are not supported");
  CentralDirectory cd{z.u32(end + 16), z.u32(end + 12), z.u16(end + 10)};
  if (z.u16(end + 8) != cd.entries)
    throw FileError(z.path + ": multi-disk zip archives are not supported");
  bool zip64 = cd.offset == 0xffffffff || cd.size == 0xffffffff || cd.entries == 0xffff;
  if (zip64) {
    if (end < kZip64LocatorLen || z.u32(end - kZip64LocatorLen) != kZip64LocatorSig)
      throw FileError(z.path + ": end record needs zip64 but the zip64 locator is missing");
    uint64_t at = z.u64(end - kZip64LocatorLen + 8);
    z.need(at, kZip64EndLen, "zip64 end of central directory record");
    if (z.u32(at) != kZip64EndSig)
      throw FileError(z.path + ": bad zip64 end of central directory signature");
    if (z.u32(at + 16) != 0 || z.u32(at + 20) != 0 || z.u64(at + 24) != z.u64(at + 32))
      throw FileError(z.path + ": multi-disk zip archives are not supported");
    cd = {z.u64(at + 48), z.u64(at + 40), z.u64(at + 32)};
  }
  z.need(cd.offset, cd.size, "central directory");
  return cd;
}

// Replaces 0xffffffff sizes/offset by their values from the zip64 extra field (id 1), which
// holds only the fields that overflowed, in this order.
void apply_zip64_extra(const ZipImage& z, uint64_t extra, uint16_t extra_len, ZipEntry& e) {
  uint64_t end = extra + extra_len;
  while (extra + 4 <= end) {
    uint16_t id = z.u16(extra), len = z.u16(extra + 2);
    if (extra + 4 + len > end)
      throw FileError(z.path + ": entry " + quote(e.name) + ": extra field runs past its end");
    if (id == 1) {
      uint64_t at = extra + 4, stop = at + len;
      for (uint64_t* field : {&e.uncompressed, &e.compressed, &e.local_offset}) {
        if (*field != 0xffffffff) continue;
        if (at + 8 > stop)
          throw FileError(z.path + ": entry " + quote(e.name) + ": zip64 extra field too short");
        *field = z.u64(at);
        at += 8;
      }
    }
    extra += 4 + len;
  }
  for (uint64_t v : {e.uncompressed, e.compressed, e.local_offset})
    if (v == 0xffffffff)
      throw FileError(z.path + ": entry " + quote(e.name) + ": size needs zip64 extra field, none found");
}

std::vector<ZipEntry> read_central_directory(const ZipImage& z) {
  CentralDirectory cd = find_central_directory(z);
  // Each record takes at least 46 bytes: a cheap bound before reserving memory.
  if (cd.entries > cd.size / kCentralLen)
    throw FileError(z.path + ": central directory claims " + std::to_string(cd.entries) +
                    " entries in " + std::to_string(cd.size) + " bytes");
  std::vector<ZipEntry> entries;
  entries.reserve(static_cast<size_t>(cd.entries));
  uint64_t at = cd.offset, end = cd.offset + cd.size;
  for (uint64_t i = 0; i < cd.entries; ++i) {
    if (at + kCentralLen > end || z.u32(at) != kCentralSig)
      throw FileError(z.path + ": bad central directory record " + std::to_string(i) +
                      " at offset " + std::to_string(at));
    ZipEntry e;
    e.flags = z.u16(at + 8);
    e.method = z.u16(at + 10);
    e.crc = z.u32(at + 16);
    e.compressed = z.u32(at + 20);
    e.uncompressed = z.u32(at + 24);
    uint16_t name_len = z.u16(at + 28), extra_len = z.u16(at + 30), comment_len = z.u16(at + 32);
    e.local_offset = z.u32(at + 42);
    if (at + kCentralLen + name_len + extra_len + comment_len > end)
      throw FileError(z.path + ": central directory record " + std::to_string(i) +
                      " runs past the end of the directory");
    e.name.assign(reinterpret_cast<const char*>(z.data + at + kCentralLen), name_len);
    apply_zip64_extra(z, at + kCentralLen + name_len, extra_len, e);
    if (z.u16(at + 34) != 0 && z.u16(at + 34) != 0xffff)
      throw FileError(z.path + ": entry " + quote(e.name) + " is on another disk");
    entries.push_back(std::move(e));
    at += kCentralLen + name_len + extra_len + comment_len;
  }
  return entries;
}

// Checks one entry's local header and sizes; sets data_offset.
void check_entry(const ZipImage& z, ZipEntry& e) {
  const std::string where = z.path + ": entry " + quote(e.name);
  if (e.flags & 1) throw FileError(where + " is encrypted");
  if (e.method != 0 && e.method != 8)
    throw FileError(where + ": compression method " + std::to_string(e.method) +
                    " is not supported (only 0 stored and 8 deflate)");
  z.need(e.local_offset, kLocalLen, "entry " + quote(e.name) + ": local header");
  if (z.u32(e.local_offset) != kLocalSig)
    throw FileError(where + ": bad local file header signature at offset " +
                    std::to_string(e.local_offset));
  uint16_t name_len = z.u16(e.local_offset + 26), extra_len = z.u16(e.local_offset + 28);
  z.need(e.local_offset + kLocalLen, name_len, "entry " + quote(e.name) + ": local name");
  if (std::string(reinterpret_cast<const char*>(z.data + e.local_offset + kLocalLen), name_len) != e.name)
    throw FileError(where + ": local header names a different file");
  e.data_offset = e.local_offset + kLocalLen + name_len + extra_len;
  z.need(e.data_offset, e.compressed, "entry " + quote(e.name) + ": data");
  if (e.method == 0 && e.compressed != e.uncompressed)
    throw FileError(where + ": stored entry has compressed size " + std::to_string(e.compressed) +
                    " but uncompressed size " + std::to_string(e.uncompressed));
  if (e.method == 8 && e.uncompressed > e.compressed * kMaxDeflateRatio + 1024)
    throw FileError(where + ": declares " + std::to_string(e.uncompressed) +
                    " uncompressed bytes from " + std::to_string(e.compressed) +
                    " compressed bytes, beyond deflate's maximum ratio (zip bomb?)");
}

uint32_t crc32_of(const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), p, n));
}

// Inflates exactly e.uncompressed bytes; more output, less output or a broken stream throws.
std::vector<uint8_t> inflate_entry(const ZipImage& z, const ZipEntry& e) {
  const std::string where = z.path + ": entry " + quote(e.name);
  // One spare byte shows a stream that would inflate past its declared size.
  std::vector<uint8_t> out(static_cast<size_t>(e.uncompressed) + 1);
  z_stream zs{};
  if (inflateInit2(&zs, -15) != Z_OK) throw FileError(where + ": cannot initialise zlib");
  const uint8_t* in = z.data + e.data_offset;
  constexpr uint64_t kChunk = 1u << 30;  // avail_in/avail_out are 32-bit
  int rc = Z_OK;
  while (rc == Z_OK) {
    uint64_t in_left = e.compressed - zs.total_in, out_left = out.size() - zs.total_out;
    zs.next_in = in + zs.total_in;
    zs.avail_in = static_cast<uInt>(std::min(in_left, kChunk));
    zs.next_out = out.data() + zs.total_out;
    zs.avail_out = static_cast<uInt>(std::min(out_left, kChunk));
    rc = inflate(&zs, Z_NO_FLUSH);
    if (zs.total_out > e.uncompressed) break;
  }
  std::string msg = zs.msg ? zs.msg : "";
  uint64_t produced = zs.total_out;
  inflateEnd(&zs);
  if (produced > e.uncompressed)
    throw FileError(where + ": inflates to more than the declared " +
                    std::to_string(e.uncompressed) + " bytes");
  if (rc == Z_BUF_ERROR)
    throw FileError(where + ": inflate failed: compressed data ends early (" +
                    std::to_string(produced) + " of " + std::to_string(e.uncompressed) + " bytes)");
  if (rc != Z_STREAM_END)
    throw FileError(where + ": inflate failed: " + (msg.empty() ? "zlib error " + std::to_string(rc) : msg));
  if (produced != e.uncompressed)
    throw FileError(where + ": inflated to " + std::to_string(produced) +
                    " bytes, but the zip declares " + std::to_string(e.uncompressed));
  out.pop_back();
  return out;
}

void put16(std::vector<uint8_t>& b, uint32_t v) { b.push_back(v & 0xff); b.push_back((v >> 8) & 0xff); }
void put32(std::vector<uint8_t>& b, uint32_t v) { put16(b, v & 0xffff); put16(b, v >> 16); }

}  // namespace

std::map<std::string, NpyArray> read_npz(const std::string& path) {
  std::vector<uint8_t> file = read_file(path);
  return parse_npz(file.data(), file.size(), path);
}

std::map<std::string, NpyArray> parse_npz(const uint8_t* data, size_t size, const std::string& path) {
  ZipImage z{data, size, path};
  std::vector<ZipEntry> entries = read_central_directory(z);

  // Validate every entry, and that entries neither repeat nor share bytes, before inflating
  // anything: overlapping entries are how small archives claim huge contents.
  std::set<std::string> names;
  uint64_t total = 0;
  for (ZipEntry& e : entries) {
    if (!names.insert(e.name).second) throw FileError(path + ": duplicate entry " + quote(e.name));
    if (e.name.size() < 5 || e.name.compare(e.name.size() - 4, 4, ".npy") != 0)
      throw FileError(path + ": entry " + quote(e.name) + " is not a .npy file");
    check_entry(z, e);
    total += e.uncompressed;
    if (total > kMaxNpzTotal)
      throw FileError(path + ": entries declare more than " + std::to_string(kMaxNpzTotal) +
                      " uncompressed bytes in total");
  }
  std::vector<const ZipEntry*> by_offset;
  for (const ZipEntry& e : entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const ZipEntry* a, const ZipEntry* b) { return a->local_offset < b->local_offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->data_offset + by_offset[i - 1]->compressed > by_offset[i]->local_offset)
      throw FileError(path + ": entries " + quote(by_offset[i - 1]->name) + " and " +
                      quote(by_offset[i]->name) + " overlap");

  std::map<std::string, NpyArray> arrays;
  for (const ZipEntry& e : entries) {
    const std::string where = path + ": entry " + quote(e.name);
    std::string key = e.name.substr(0, e.name.size() - 4);
    if (e.method == 0) {
      const uint8_t* p = data + e.data_offset;
      if (crc32_of(p, e.uncompressed) != e.crc) throw FileError(where + ": CRC mismatch");
      arrays[key] = parse_npy(p, e.uncompressed, where);
    } else {
      std::vector<uint8_t> image = inflate_entry(z, e);
      if (crc32_of(image.data(), image.size()) != e.crc) throw FileError(where + ": CRC mismatch");
      NpyHeader h = parse_npy_header(image.data(), image.size(), where);
      NpyArray a;
      a.descr = h.descr;
      a.shape = h.shape;
      image.erase(image.begin(), image.begin() + h.data_offset);  // reuse the buffer
      image.resize(h.data_bytes);
      a.bytes = std::move(image);
      arrays[key] = std::move(a);
    }
  }
  return arrays;
}

void write_npz(const std::string& path, const std::map<std::string, NpyArray>& arrays) {
  // Encode all entries first so an encoding error leaves no file behind.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> images;
  for (const auto& [key, a] : arrays) {
    try {
      images.emplace_back(key + ".npy", encode_npy(a));
    } catch (const FileError& e) {
      throw FileError(path + ": array " + quote(key) + ": " + e.what());
    }
  }
  std::vector<uint8_t> central;
  uint64_t offset = 0;
  std::vector<std::vector<uint8_t>> locals;
  for (const auto& [name, image] : images) {
    if (name.size() > 0xffff) throw FileError(path + ": array name too long: " + quote(name));
    if (image.size() >= 0xffffffff || offset >= 0xffffffff || images.size() >= 0xffff)
      throw FileError(path + ": too large for a zip without zip64 (entry " + quote(name) + ")");
    uint32_t crc = crc32_of(image.data(), image.size());
    uint32_t size = static_cast<uint32_t>(image.size());
    // Fields shared by the local header and the central record: version needed 2.0, no flags,
    // stored, 1980-01-01 00:00 like numpy, crc, sizes, name length, no extra.
    std::vector<uint8_t> common;
    put16(common, 20); put16(common, 0); put16(common, 0); put16(common, 0); put16(common, 0x21);
    put32(common, crc); put32(common, size); put32(common, size);
    put16(common, static_cast<uint32_t>(name.size())); put16(common, 0);
    std::vector<uint8_t> local;
    put32(local, kLocalSig);
    local.insert(local.end(), common.begin(), common.end());
    local.insert(local.end(), name.begin(), name.end());
    put32(central, kCentralSig);
    put16(central, 0x0314);  // made by: Unix, 2.0
    central.insert(central.end(), common.begin(), common.end());
    put16(central, 0); put16(central, 0); put16(central, 0);  // comment length, disk, int. attrs
    put32(central, 0644u << 16);                              // rw-r--r--
    put32(central, static_cast<uint32_t>(offset));
    central.insert(central.end(), name.begin(), name.end());
    offset += local.size() + image.size();
    locals.push_back(std::move(local));
  }
  if (offset + central.size() >= 0xffffffff)
    throw FileError(path + ": too large for a zip without zip64");
  std::vector<uint8_t> end;
  put32(end, kEndSig); put16(end, 0); put16(end, 0);
  put16(end, static_cast<uint32_t>(images.size())); put16(end, static_cast<uint32_t>(images.size()));
  put32(end, static_cast<uint32_t>(central.size())); put32(end, static_cast<uint32_t>(offset));
  put16(end, 0);
  write_file_atomic(path, [&](std::FILE* f) {
    for (size_t i = 0; i < images.size(); ++i) {
      write_bytes(f, locals[i].data(), locals[i].size(), path);
      write_bytes(f, images[i].second.data(), images[i].second.size(), path);
    }
    write_bytes(f, central.data(), central.size(), path);
    write_bytes(f, end.data(), end.size(), path);
  });
}

}  // namespace attnkit

// .npy parsing/encoding and the converters. The zip container (.npz) is engine/npz.cc.
#include "engine/npy.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "engine/error.h"
#include "engine/file_bytes.h"
#include "engine/file_io.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "attnkit's file formats are little-endian and are read by memcpy on a little-endian host"
#endif

namespace attnkit {

namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicLen = 6;
constexpr uint32_t kMaxNpyHeader = 1u << 20;  // numpy itself refuses headers over 10000 bytes


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

// size: the bytes at data (the whole image, or at least its header); total: the file's size
// (the data's bytes are checked against it).
NpyHeader parse_npy_header(const uint8_t* data, size_t size, const std::string& what, uint64_t total) {
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
  if (nbytes > total - h.data_offset)
    throw FileError(what + ": data truncated: shape " + shape_text(h.shape) + " of " + h.descr +
                    " needs " + std::to_string(nbytes) + " bytes, only " +
                    std::to_string(total - h.data_offset) + " present");
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

// The output of a conversion to Out: zeroed, or (copy_of) a copy of a's elements made as it is
// allocated; memory that cannot be had for it is a FileError naming the array and the bytes
// asked for, not a bare std::bad_alloc.
template <typename Out>
std::vector<Out> conversion_output(const NpyArray& a, const std::string& what, const char* target,
                                   const Out* copy_of = nullptr) {
  const int64_t n = a.numel();
  try {
    if (copy_of) return std::vector<Out>(copy_of, copy_of + n);
    return std::vector<Out>(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  throw FileError(what + ": converting " + std::to_string(n) + " elements to " + target + " needs " +
                  std::to_string(static_cast<uint64_t>(n) * sizeof(Out)) +
                  " bytes of memory, which cannot be allocated");
}

template <typename Out>
std::vector<Out> to_floating(const NpyArray& a, const std::string& what, const char* target) {
  std::vector<Out> out = conversion_output<Out>(a, what, target);
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
  const Dtype t = parse_descr(a.descr, what);
  if (t.kind == 'i' && t.itemsize == sizeof(Out) &&  // (Out is int32_t or int64_t)
      a.bytes.size() == static_cast<uint64_t>(a.numel()) * sizeof(Out)) {
    // The same type, little-endian on both sides: a copy, made as the output is allocated
    // (no zero-fill first).
    const Out* first = reinterpret_cast<const Out*>(a.bytes.data());
    return conversion_output<Out>(a, what, target, first);
  }
  std::vector<Out> out = conversion_output<Out>(a, what, target);
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
  NpyHeader h = parse_npy_header(data, size, what, size);
  NpyArray a;
  a.descr = h.descr;
  a.shape = h.shape;
  a.bytes.assign(data + h.data_offset, data + h.data_offset + h.data_bytes);
  return a;
}

NpyArray parse_npy(std::vector<uint8_t>&& image, const std::string& what) {
  NpyHeader h = parse_npy_header(image.data(), image.size(), what, image.size());
  NpyArray a;
  a.descr = h.descr;
  a.shape = h.shape;
  image.erase(image.begin(), image.begin() + h.data_offset);  // reuse the buffer
  image.resize(h.data_bytes);
  a.bytes = std::move(image);
  return a;
}

namespace {

// A .npy file's preamble and header (parse_npy_header checks them): its first 4 KiB, or as much
// as the header length in the preamble says when that is more (numpy writes headers of 128
// bytes; a few columns of a structured dtype can take more).
std::vector<uint8_t> read_npy_head(const ReadOnlyFile& file) {
  std::vector<uint8_t> head = file.read(0, 4096);
  if (head.size() >= 12 && std::memcmp(head.data(), kNpyMagic, kNpyMagicLen) == 0) {
    const bool v1 = head[6] == 1;
    const uint64_t want = v1 ? 10 + uint64_t{load_le<uint16_t>(head.data() + 8)}
                             : 12 + uint64_t{load_le<uint32_t>(head.data() + 8)};
    if (want > head.size() && head.size() < file.size())
      head = file.read(0, std::min<uint64_t>(want, 12 + kMaxNpyHeader));
  }
  return head;
}

}  // namespace

// The header, then the data read straight into the array's buffer: one copy in memory, not
// moved down over the header afterwards; both through one descriptor (one file, even if it is
// replaced under its name meanwhile).
NpyReader::NpyReader(const std::string& path) : file_(path) {
  const std::vector<uint8_t> head = read_npy_head(file_);
  NpyHeader h = parse_npy_header(head.data(), head.size(), path, file_.size());
  descr_ = std::move(h.descr);
  shape_ = std::move(h.shape);
  data_offset_ = h.data_offset;
  data_bytes_ = h.data_bytes;
}

char NpyReader::kind() const { return parse_descr(descr_, file_.path()).kind; }

NpyArray NpyReader::read() const {
  NpyArray a;
  a.descr = descr_;
  a.shape = shape_;
  // (parse_npy_header found the data within the file's size: read gives it all, or throws
  // naming the file if the file shrank since it was opened.)
  a.bytes = file_.read(data_offset_, data_bytes_);
  return a;
}

std::vector<int32_t> NpyReader::read_int32(const std::string& what) const {
  const Dtype t = parse_descr(descr_, what);
  if (!(t.kind == 'i' && t.itemsize == sizeof(int32_t))) return to_int32(read(), what);
  // Reserved, given huge pages, then zero-filled and read into: a large token file's pages are
  // faulted in 2 MiB at a time.
  const size_t n = data_bytes_ / sizeof(int32_t);
  std::vector<int32_t> out;
  try {
    out.reserve(n);
  } catch (const std::bad_alloc&) {
    throw FileError(what + ": reading " + std::to_string(n) + " int32 elements needs " + std::to_string(data_bytes_) +
                    " bytes of memory, which cannot be allocated");
  } catch (const std::length_error&) {
    throw FileError(what + ": " + std::to_string(n) + " int32 elements are more than a vector holds");
  }
  advise_huge_pages(out.data(), data_bytes_);
  out.resize(n);
  file_.read_into(out.data(), data_offset_, data_bytes_);
  return out;
}

NpyArray read_npy(const std::string& path) { return NpyReader(path).read(); }

NpyArray read_npy_entry(const std::string& path, int64_t index, int64_t* entries) {
  const ReadOnlyFile file(path);
  const std::vector<uint8_t> head = read_npy_head(file);
  const NpyHeader h = parse_npy_header(head.data(), head.size(), path, file.size());
  if (h.shape.empty()) throw FileError(path + ": a 0-d array has no entries along a first axis");
  const int64_t n = h.shape[0];
  if (entries) *entries = n;
  if (index < 0 || index >= n)
    throw FileError(path + ": entry " + std::to_string(index) + " is outside its first axis [0, " + std::to_string(n) +
                    ") (shape " + shape_text(h.shape) + ")");
  const uint64_t entry_bytes = h.data_bytes / static_cast<uint64_t>(n);
  NpyArray a;
  a.descr = h.descr;
  a.shape.assign(h.shape.begin() + 1, h.shape.end());
  try {
    a.bytes = file.read(h.data_offset + static_cast<uint64_t>(index) * entry_bytes, entry_bytes);
  } catch (const FileError& e) {  // (the file shrank since it was opened)
    throw FileError(std::string(e.what()) + " (entry " + std::to_string(index) + ")");
  }
  return a;
}

std::vector<uint8_t> encode_npy_header(const std::string& descr, const std::vector<int64_t>& shape) {
  NpyArray a;
  a.descr = descr;
  a.shape = shape;
  parse_descr(a.descr, "encode_npy");
  checked_byte_size(a.shape, parse_descr(a.descr, "encode_npy").itemsize, "encode_npy");
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
  return out;
}

std::vector<uint8_t> encode_npy(const NpyArray& a) {
  Dtype t = parse_descr(a.descr, "encode_npy");
  uint64_t nbytes = checked_byte_size(a.shape, t.itemsize, "encode_npy");
  if (a.bytes.size() != nbytes)
    throw FileError("encode_npy: array holds " + std::to_string(a.bytes.size()) +
                    " bytes, shape " + shape_text(a.shape) + " of " + a.descr + " needs " +
                    std::to_string(nbytes));
  std::vector<uint8_t> out = encode_npy_header(a.descr, a.shape);
  out.insert(out.end(), a.bytes.begin(), a.bytes.end());
  return out;
}

NpyStreamWriter::NpyStreamWriter(const std::string& path, const std::string& descr, std::vector<int64_t> shape)
    : path_(path), shape_(std::move(shape)) {
  const std::vector<uint8_t> header = encode_npy_header(descr, shape_);
  itemsize_ = parse_descr(descr, path).itemsize;
  total_ = 1;
  for (int64_t d : shape_) total_ *= d;
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw FileError(path + ": cannot create: " + std::strerror(errno));
  write_bytes(f_, header.data(), header.size(), path_);
}

NpyStreamWriter::~NpyStreamWriter() {
  if (f_) std::fclose(f_);
}

void NpyStreamWriter::append(const void* data, int64_t elements) {
  if (elements < 0 || written_ + elements > total_)
    throw FileError(path_ + ": " + std::to_string(written_ + elements) + " elements for shape " + shape_text(shape_));
  write_bytes(f_, data, static_cast<size_t>(elements) * itemsize_, path_);
  written_ += elements;
}

void NpyStreamWriter::finish() {
  if (written_ != total_)
    throw FileError(path_ + ": " + std::to_string(written_) + " of " + std::to_string(total_) +
                    " elements written for shape " + shape_text(shape_));
  std::string failure;
  if (std::fflush(f_) != 0) failure = std::string("write failed: ") + std::strerror(errno);
  else if (::fsync(::fileno(f_)) != 0) failure = std::string("fsync failed: ") + std::strerror(errno);
  if (std::fclose(f_) != 0 && failure.empty()) failure = std::string("close failed: ") + std::strerror(errno);
  f_ = nullptr;
  if (!failure.empty()) throw FileError(path_ + ": " + failure);
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

}  // namespace attnkit

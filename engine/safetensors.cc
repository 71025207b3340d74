#include "engine/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/error.h"
#include "engine/file_bytes.h"
#include "engine/file_io.h"

namespace attnkit {

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeader = 100'000'000;  // as the reference implementation
constexpr const char* kMetadataKey = "__metadata__";


std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// numel · itemsize, or a FileError for negative dimensions or overflow.
uint64_t tensor_bytes(const std::vector<int64_t>& shape, size_t itemsize, const std::string& where) {
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t n = itemsize;
  for (int64_t d : shape)
    if (d < 0) throw FileError(where + ": shape has a negative dimension " + std::to_string(d));
  for (int64_t d : shape) {
    if (d != 0 && n > limit / static_cast<uint64_t>(d))
      throw FileError(where + ": shape's byte size overflows int64");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

// Parses the header JSON, refusing repeated keys in any object (nlohmann keeps the last one
// silently, which would hide a second tensor of the same name).
json parse_header_json(const std::string& text, const std::string& what) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    else if (event == json::parse_event_t::object_end) open_objects.pop_back();
    else if (event == json::parse_event_t::key && duplicate.empty() && !open_objects.empty() &&
             !open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = (depth == 1 ? "duplicate tensor name " : "duplicate key ") +
                  quote(parsed.get<std::string>());
    return true;
  };
  json header;
  try {
    header = json::parse(text, callback);
  } catch (const json::exception& e) {
    throw FileError(what + ": header is not valid JSON: " + printable(e.what()));
  }
  if (!duplicate.empty()) throw FileError(what + ": header has a " + duplicate);
  if (!header.is_object())
    throw FileError(what + ": header is not a JSON object (it is " + header.type_name() + ")");
  return header;
}

// One tensor's header entry, checked on its own.
struct Entry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& name, const json& info, const std::string& what) {
  const std::string where = what + ": tensor " + quote(name);
  if (!info.is_object()) throw FileError(where + ": entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!info.contains(key)) throw FileError(where + ": missing '" + key + "'");
  Entry e;
  e.name = name;
  const json& dtype = info["dtype"];
  if (!dtype.is_string()) throw FileError(where + ": 'dtype' is not a string");
  e.dtype = dtype.get<std::string>();
  size_t itemsize = safetensors_dtype_size(e.dtype);
  if (itemsize == 0) throw FileError(where + ": unknown dtype " + quote(e.dtype));
  const json& shape = info["shape"];
  if (!shape.is_array()) throw FileError(where + ": 'shape' is not an array");
  for (const json& d : shape) {
    if (!d.is_number_integer())
      throw FileError(where + ": 'shape' holds " + d.dump() + ", not an integer");
    if (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      throw FileError(where + ": shape's byte size overflows int64");
    e.shape.push_back(d.get<int64_t>());
  }
  const json& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw FileError(where + ": 'data_offsets' is " + offsets.dump() +
                    ", not [begin, end] with non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end)
    throw FileError(where + ": data_offsets " + range_text(e.begin, e.end) + " has begin > end");
  uint64_t nbytes = tensor_bytes(e.shape, itemsize, where);
  if (e.end - e.begin != nbytes)
    throw FileError(where + ": dtype " + e.dtype + " and shape " + shape.dump() + " need " +
                    std::to_string(nbytes) + " bytes, data_offsets " + range_text(e.begin, e.end) +
                    " hold " + std::to_string(e.end - e.begin));
  return e;
}

std::string encode_header(const std::vector<TensorView>& tensors,
                          const std::map<std::string, std::string>& metadata,
                          const std::string& path, uint64_t* data_bytes) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    const std::string where = path + ": tensor " + quote(t.name);
    if (t.name.empty() || t.name == kMetadataKey) throw FileError(where + ": reserved or empty name");
    if (header.contains(t.name)) throw FileError(path + ": duplicate tensor name " + quote(t.name));
    size_t itemsize = safetensors_dtype_size(t.dtype);
    if (itemsize == 0) throw FileError(where + ": unknown dtype " + quote(t.dtype));
    uint64_t nbytes = tensor_bytes(t.shape, itemsize, where);
    if (nbytes != 0 && t.data == nullptr) throw FileError(where + ": no data");
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  *data_bytes = offset;
  return text;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

const TensorBlob* SafetensorsFile::find(const std::string& name) const {
  for (const TensorBlob& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

// The header's length from the first 8 bytes, checked against the limit and the file size.
uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& what) {
  if (file_size < 8)
    throw FileError(what + ": file is " + std::to_string(file_size) +
                    " bytes, shorter than the 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, first8, 8);
  if (header_len > kMaxHeader)
    throw FileError(what + ": header length " + std::to_string(header_len) +
                    " is absurd (limit " + std::to_string(kMaxHeader) + " bytes)");
  if (header_len > file_size - 8)
    throw FileError(what + ": header length " + std::to_string(header_len) +
                    " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  return header_len;
}

// Parses the header text and checks the tensors' layout against a data section of
// data_size bytes. Returns the entries in data-offset order; fills `metadata`.
std::vector<Entry> parse_layout(const std::string& header_text, uint64_t data_size, const std::string& what,
                                std::map<std::string, std::string>* metadata) {
  json header = parse_header_json(header_text, what);
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == kMetadataKey) {
      if (!info.is_object()) throw FileError(what + ": __metadata__ is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string())
          throw FileError(what + ": __metadata__ value " + quote(key) + " is not a string");
        (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, info, what));
  }

  // The tensors must tile the data buffer exactly: sorted by offset, each starts where the
  // previous one ended, the first at 0, the last at the end of the file.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.end > data_size)
      throw FileError(what + ": tensor " + quote(e.name) + ": data_offsets " +
                      range_text(e.begin, e.end) + " past the end of the data (" +
                      std::to_string(data_size) + " bytes)");
    if (e.begin < covered)
      throw FileError(what + ": tensor " + quote(e.name) + ": data_offsets " +
                      range_text(e.begin, e.end) + " overlap tensor " + quote(previous->name) +
                      " " + range_text(previous->begin, previous->end));
    if (e.begin > covered)
      throw FileError(what + ": tensor " + quote(e.name) + ": data_offsets " +
                      range_text(e.begin, e.end) + " leave a gap " + range_text(covered, e.begin) +
                      (previous ? " after tensor " + quote(previous->name) : " at the start"));
    covered = e.end;
    previous = &e;
  }
  if (covered != data_size)
    throw FileError(what + ": " + std::to_string(data_size - covered) +
                    " bytes of data after the last tensor (tensors cover " +
                    std::to_string(covered) + " of " + std::to_string(data_size) + " bytes)");
  return entries;
}

}  // namespace

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& what) {
  const uint64_t header_len = header_length(data, size, what);
  SafetensorsFile file;
  std::vector<Entry> entries = parse_layout(
      std::string(reinterpret_cast<const char*>(data + 8), static_cast<size_t>(header_len)),
      size - 8 - header_len, what, &file.metadata);
  const uint8_t* base = data + 8 + header_len;
  for (Entry& e : entries) {
    TensorBlob t;
    t.name = std::move(e.name);
    t.dtype = std::move(e.dtype);
    t.shape = std::move(e.shape);
    t.bytes.assign(base + e.begin, base + e.end);
    file.tensors.push_back(std::move(t));
  }
  return file;
}

const TensorInfo* SafetensorsHeader::find(const std::string& name) const {
  for (const TensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw FileError(path + ": cannot open: " + std::strerror(errno));
  // Closes the file on every path out of this function.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(f, &std::fclose);
  struct stat st {};
  if (::fstat(::fileno(f), &st) != 0) throw FileError(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw FileError(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint8_t first8[8] = {};
  if (size >= 8 && std::fread(first8, 1, 8, f) != 8) throw FileError(path + ": read failed");
  const uint64_t header_len = header_length(first8, size, path);
  std::string text(static_cast<size_t>(header_len), '\0');
  if (header_len && std::fread(text.data(), 1, text.size(), f) != text.size())
    throw FileError(path + ": read failed (header of " + std::to_string(header_len) + " bytes)");
  SafetensorsHeader header;
  for (Entry& e : parse_layout(text, size - 8 - header_len, path, &header.metadata))
    header.tensors.push_back({std::move(e.name), std::move(e.dtype), std::move(e.shape), e.end - e.begin});
  return header;
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::vector<uint8_t> bytes = read_file(path);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  uint64_t data_bytes = 0;
  std::string header = encode_header(tensors, metadata, path, &data_bytes);
  write_file_atomic(path, [&](std::FILE* f) {
    uint64_t len = header.size();
    write_bytes(f, &len, 8, path);
    write_bytes(f, header.data(), header.size(), path);
    for (const TensorView& t : tensors)
      write_bytes(f, t.data, tensor_bytes(t.shape, safetensors_dtype_size(t.dtype), path), path);
  });
}

void write_safetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorView> views;
  for (const TensorBlob& t : tensors) {
    uint64_t nbytes = 0;
    size_t itemsize = safetensors_dtype_size(t.dtype);
    if (itemsize != 0) nbytes = tensor_bytes(t.shape, itemsize, path + ": tensor " + quote(t.name));
    if (itemsize != 0 && nbytes != t.bytes.size())
      throw FileError(path + ": tensor " + quote(t.name) + ": holds " +
                      std::to_string(t.bytes.size()) + " bytes, dtype " + t.dtype + " and its shape need " +
                      std::to_string(nbytes));
    views.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  }
  write_safetensors(path, views, metadata);
}

}  // namespace attnkit

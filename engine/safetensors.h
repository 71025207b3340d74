// safetensors files: 8-byte little-endian header length N, N bytes of JSON
// {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the tensors' little-endian row-major bytes, contiguous and in offset order.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnkit {

// One tensor with its own copy of the bytes.
struct TensorBlob {
  std::string name;
  std::string dtype;           // "F32", "F64", "I32", "I64", "U8", "BOOL", "F16", "BF16", …
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<uint8_t> bytes;  // numel · dtype_size(dtype) bytes
};

// A tensor to be written straight from caller memory (e.g. a slice of a flat parameter block).
struct TensorView {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel · dtype_size(dtype) bytes
};

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;  // "__metadata__", string to string
  std::vector<TensorBlob> tensors;              // in data-offset order
  const TensorBlob* find(const std::string& name) const;  // nullptr if absent
};

// Bytes per element of a safetensors dtype name; 0 if the name is unknown.
size_t safetensors_dtype_size(const std::string& dtype);

// Parses a whole file image; `what` names it in errors. Every inconsistency (header length,
// JSON, dtypes, shapes, offsets that overlap, leave gaps or miss the data) is a FileError.
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& what);
SafetensorsFile read_safetensors(const std::string& path);

// One tensor's header entry, without its bytes.
struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;  // numel · dtype_size(dtype)
};

struct SafetensorsHeader {
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;                        // in data-offset order
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
};

// Reads only the 8-byte length and the JSON header (not the tensors' data), with the same
// checks as read_safetensors, the layout checked against the file's size. For looking at a
// file's names and shapes before deciding to load it.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Writes atomically (see write_file_atomic), tensors in the given order with contiguous
// offsets from 0, header padded with spaces to a multiple of 8, "__metadata__" omitted when
// empty. Throws FileError for duplicate or empty names, unknown dtypes, or a size mismatch.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::vector<TensorBlob>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace attnkit

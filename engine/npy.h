// NumPy .npy files: read what numpy writes, write what numpy reads (.npz archives of them:
// engine/npz.h). Every malformed input is a FileError naming the file and what was wrong;
// sizes are checked against the bytes actually present before anything large is allocated.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "file_io.h"  // ReadOnlyFile

namespace attnkit {

// One array as stored in a .npy file. Supported dtypes: '<f4' '<f8', '<i2' '<i4' '<i8',
// '<u2' '<u4' '<u8', '|i1' '|u1' '|b1' (bool) and '|S<n>' (bytes). Big-endian, objects,
// unicode, complex, datetime and structured dtypes are rejected, as is Fortran order.
struct NpyArray {
  std::string descr;          // as in the file, e.g. "<f4", "|b1", "|S7"
  std::vector<int64_t> shape;  // empty for a 0-d (scalar) array
  std::vector<uint8_t> bytes;  // numel() · itemsize() bytes, C order, little-endian

  int64_t numel() const;
  size_t itemsize() const;    // bytes per element, from descr
  char kind() const;          // 'f' float, 'i' signed, 'u' unsigned, 'b' bool, 'S' bytes
};

// Converters; `what` names the array in error messages (e.g. "case.npz: 'targets'").
// to_float32/to_float64 accept floats, integers and bools; to_int32/to_int64 accept integers
// and bools and throw FileError if a value does not fit; to_string accepts one 'S' element and
// drops trailing NULs, as numpy does. Memory that cannot be had for the result is a FileError.
std::vector<float> to_float32(const NpyArray& a, const std::string& what);
std::vector<double> to_float64(const NpyArray& a, const std::string& what);
std::vector<int32_t> to_int32(const NpyArray& a, const std::string& what);
std::vector<int64_t> to_int64(const NpyArray& a, const std::string& what);
std::string to_string(const NpyArray& a, const std::string& what);

// Copies data into an array with descr '<f4', '<f8', '<i4', '<i8' or '|u1'.
NpyArray make_npy(const float* data, const std::vector<int64_t>& shape);
NpyArray make_npy(const double* data, const std::vector<int64_t>& shape);
NpyArray make_npy(const int32_t* data, const std::vector<int64_t>& shape);
NpyArray make_npy(const int64_t* data, const std::vector<int64_t>& shape);
NpyArray make_npy(const uint8_t* data, const std::vector<int64_t>& shape);

// Parses a whole .npy image (versions 1.0, 2.0, 3.0); `what` names it in errors.
// Bytes after the data are ignored, as numpy does.
NpyArray parse_npy(const uint8_t* data, size_t size, const std::string& what);
// The same for an image in a buffer of its own, which becomes the array's bytes (the header
// is erased from its front): no second copy of the data.
NpyArray parse_npy(std::vector<uint8_t>&& image, const std::string& what);
NpyArray read_npy(const std::string& path);

// A .npy file open with its header read and checked (the same FileErrors as read_npy's), its
// data read on request: a caller can refuse an array by dtype or shape before reading it, and
// int32 data goes straight into its vector.
class NpyReader {
 public:
  explicit NpyReader(const std::string& path);
  const std::string& descr() const { return descr_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  char kind() const;
  NpyArray read() const;  // the whole array, as read_npy gives it
  // to_int32(read(), what), a '<i4' file's data read into the result itself: one buffer, not
  // two (a large token file's pages touched once).
  std::vector<int32_t> read_int32(const std::string& what) const;

 private:
  ReadOnlyFile file_;
  std::string descr_;
  std::vector<int64_t> shape_;
  uint64_t data_offset_ = 0, data_bytes_ = 0;
};
// Entry `index` along the first axis (shape[1:]), reading only its bytes from the file: one
// sequence's maps of a large [N, ...] array. *entries (when given) gets N. A FileError names
// the file for the same faults as read_npy's and for an index outside [0, N).
NpyArray read_npy_entry(const std::string& path, int64_t index, int64_t* entries = nullptr);

// The .npy image numpy's np.save would write for this array: version 1.0 (2.0 if the header
// needs it), header padded with spaces so the data starts at a multiple of 64.
std::vector<uint8_t> encode_npy(const NpyArray& a);

// Atomic writes (see write_file_atomic).
void write_npy(const std::string& path, const NpyArray& a);
// The header alone (numpy's layout), for arrays written in pieces.
std::vector<uint8_t> encode_npy_header(const std::string& descr, const std::vector<int64_t>& shape);

// An .npy file of a known shape written in pieces, for arrays larger than one wants in memory
// (e.g. attention maps of a million sequences): the header first, then append() the elements in
// C order; finish() checks that exactly shape's elements came, flushes and fsyncs. Not atomic by
// itself: write into a staging folder (tools/run_folder.h) or a temporary name. Errors are
// FileErrors naming the file.
class NpyStreamWriter {
 public:
  NpyStreamWriter(const std::string& path, const std::string& descr, std::vector<int64_t> shape);
  ~NpyStreamWriter();
  NpyStreamWriter(const NpyStreamWriter&) = delete;
  NpyStreamWriter& operator=(const NpyStreamWriter&) = delete;
  void append(const void* data, int64_t elements);
  void finish();

 private:
  std::string path_;
  std::vector<int64_t> shape_;
  std::FILE* f_ = nullptr;
  size_t itemsize_ = 4;
  int64_t total_ = 0, written_ = 0;
};
void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const int32_t* data, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape);

}  // namespace attnkit

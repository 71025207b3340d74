// NumPy .npy and .npz files: read what numpy writes, write what numpy reads.
// Every malformed input is a FileError naming the file (and the zip entry) and what was wrong;
// sizes are checked against the bytes actually present before anything large is allocated.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
// drops trailing NULs, as numpy does.
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
NpyArray read_npy(const std::string& path);

// The .npy image numpy's np.save would write for this array: version 1.0 (2.0 if the header
// needs it), header padded with spaces so the data starts at a multiple of 64.
std::vector<uint8_t> encode_npy(const NpyArray& a);

// Atomic writes (see write_file_atomic).
void write_npy(const std::string& path, const NpyArray& a);
void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const int32_t* data, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape);

// Reads every "NAME.npy" entry of a zip written by np.savez (stored) or np.savez_compressed
// (deflated), zip64 records included; keys are NAME. Entries that are not .npy files,
// encrypted, split over disks or compressed otherwise are rejected.
std::map<std::string, NpyArray> read_npz(const std::string& path);
// The same for an archive image in memory; `what` names it in errors.
std::map<std::string, NpyArray> parse_npz(const uint8_t* data, size_t size, const std::string& what);

// Writes a zip of "NAME.npy" entries, stored (method 0), readable by np.load. Atomic.
// Throws FileError if the archive would need zip64 (an entry or the total above 4 GiB).
void write_npz(const std::string& path, const std::map<std::string, NpyArray>& arrays);

}  // namespace attnkit

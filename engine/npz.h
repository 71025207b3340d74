// NumPy .npz files (zip archives of .npy files): read what np.savez and np.savez_compressed
// write, write what np.load reads. Every malformed input is a FileError naming the file, the
// zip entry and what was wrong; declared sizes are checked against the bytes the file can
// hold, and against the memory the process can have, before anything large is allocated.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "npy.h"

namespace attnkit {

// Reads every "NAME.npy" entry of a zip written by np.savez (stored) or np.savez_compressed
// (deflated), zip64 records included; keys are NAME. Entries that are not .npy files,
// encrypted, split over disks or compressed otherwise are rejected, and so is an entry that
// needs more memory than the process can have (a FileError naming the entry and the bytes).
std::map<std::string, NpyArray> read_npz(const std::string& path);
// The same for an archive image in memory; `what` names it in errors.
std::map<std::string, NpyArray> parse_npz(const uint8_t* data, size_t size, const std::string& what);

// Writes a zip of "NAME.npy" entries, stored (method 0), readable by np.load. Atomic.
// Throws FileError if the archive would need zip64 (an entry or the total above 4 GiB).
void write_npz(const std::string& path, const std::map<std::string, NpyArray>& arrays);

}  // namespace attnkit

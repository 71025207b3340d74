// Whole-file reads and crash-safe writes. Every error is a FileError naming the file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace attnkit {

// Reads the whole file. Throws FileError if it is missing, not a regular file, unreadable, or
// larger than max_bytes (default 16 GiB), so a wrong path cannot exhaust memory.
std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes = 1ull << 34);

// A regular file open for reading slices of it: several reads (a header, then the data it
// describes) through one descriptor, so all of them see the same file even when it is
// replaced under its name in between (as write_file_atomic does). The same errors as
// read_file, each naming the path.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // as it was when opened
  // At most `count` bytes from `offset` (fewer where the file ends).
  std::vector<uint8_t> read(uint64_t offset, uint64_t count) const;
  // Exactly `count` bytes from `offset` into dst (a FileError if the file holds fewer).
  void read_into(void* dst, uint64_t offset, uint64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Replaces `path` atomically: `write` fills a temporary file `path.tmp.<pid>` in the same
// directory (when that name would exceed NAME_MAX, a shortened name with a hash of the file
// name, still holding ".tmp.<pid>"), which is then flushed, fsync'ed and renamed over `path`,
// and the directory is fsync'ed. On any failure (the callback throws, a write fails, e.g. disk
// full) the temporary file is removed, `path` is left as it was, and a FileError naming `path`
// is thrown (an exception from the callback is passed on unchanged). The callback may ignore
// fwrite's result: stream errors are checked here. Temporary files of `path` left by processes
// no longer running (killed mid-write) are removed first.
void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write);

// Same, for bytes already in memory.
void write_file_atomic(const std::string& path, const void* data, size_t size);

// fwrite that throws FileError (naming `path`) on a short write. For use inside callbacks.
void write_bytes(std::FILE* f, const void* data, size_t size, const std::string& path);

// The most memory this process can have: the machine's physical memory, lowered by the
// RLIMIT_AS and RLIMIT_DATA soft limits when they are set. Buffers larger than it are refused
// before any of them is allocated (zero-filling such a buffer would get the process killed
// rather than throw): .npz entries, an executor's arena, the CLI's generated data sets.
uint64_t memory_limit();

// Asks the kernel for transparent huge pages (2 MiB) for the whole 2 MiB blocks of
// [p, p + bytes), before they are first touched: a large buffer then takes a page fault per
// 2 MiB instead of per 4 KiB (faults cost ~10 µs each on the VMs this project runs on). Only
// where the kernel gives them on request (THP `[madvise]` or `[always]`); otherwise, and for
// buffers under 4 MiB, nothing happens.
void advise_huge_pages(void* p, size_t bytes);

}  // namespace attnkit

#include "engine/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>

#include "engine/error.h"
#include "engine/hash.h"

namespace attnkit {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Makes the rename itself durable. Filesystems that cannot sync directories report EINVAL;
// there is nothing more to do on those.
void sync_directory(const std::string& path) {
  std::string dir = directory_of(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw FileError(path + ": written, but cannot open directory " + dir +
                              " to sync it: " + errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL)
    throw FileError(path + ": written, but syncing directory " + dir + " failed: " +
                    errno_text(err));
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The temporary files of `path` are named <prefix><pid>: `base.tmp.` when that name fits
// NAME_MAX with room for any pid (10 digits), else the base's first bytes, `~`, a 64-bit
// FNV-1a hash of the whole base in hex and `.tmp.`, which fits too. The same path always gets
// the same prefix, so the stale-temporary cleanup finds the files either form left behind.
std::string temporary_prefix(const std::string& path) {
  constexpr size_t kPidDigits = 10, kTmpLen = 5;  // ".tmp."
  const std::string base = base_name(path);
  if (base.size() + kTmpLen + kPidDigits <= NAME_MAX) return base + ".tmp.";
  Fnv1a fnv;
  fnv.add(base.data(), base.size());
  const uint64_t hash = fnv.h;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  const size_t keep = NAME_MAX - kPidDigits - kTmpLen - 16 - 1;
  return base.substr(0, keep) + "~" + hex + ".tmp.";
}

}  // namespace

// Opens path for reading, refusing anything but a regular file; its size into *size. The
// caller closes the descriptor.
static int open_regular(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer before the check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw FileError(path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw FileError(path + ": cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FileError(path + ": not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t max_bytes) {
  uint64_t size = 0;
  const int fd = open_regular(path, &size);
  if (size > max_bytes) {
    ::close(fd);
    throw FileError(path + ": file is " + std::to_string(size) + " bytes, more than the limit of " +
                    std::to_string(max_bytes) + " bytes");
  }
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    const int err = errno;
    ::close(fd);
    throw FileError(path + ": cannot open: " + errno_text(err));
  }
  std::vector<uint8_t> bytes(size);
  size_t got = size ? std::fread(bytes.data(), 1, size, f) : 0;
  bool failed = std::ferror(f);
  int err = errno;
  std::fclose(f);
  if (failed) throw FileError(path + ": read failed: " + errno_text(err));
  if (got != size)
    throw FileError(path + ": file shrank while reading (" + std::to_string(got) + " of " +
                    std::to_string(size) + " bytes)");
  return bytes;
}

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) { fd_ = open_regular(path, &size_); }

ReadOnlyFile::~ReadOnlyFile() { ::close(fd_); }

std::vector<uint8_t> ReadOnlyFile::read(uint64_t offset, uint64_t count) const {
  const uint64_t n = offset >= size_ ? 0 : std::min(count, size_ - offset);
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(n);
  } catch (const std::bad_alloc&) {
    throw FileError(path_ + ": no memory for " + std::to_string(n) + " bytes");
  }
  read_into(bytes.data(), offset, n);
  return bytes;
}

void ReadOnlyFile::read_into(void* dst, uint64_t offset, uint64_t count) const {
  uint8_t* out = static_cast<uint8_t*>(dst);
  uint64_t got = 0;
  while (got < count) {
    const ssize_t r = ::pread(fd_, out + got, count - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw FileError(path_ + ": read failed: " + errno_text(errno));
    if (r == 0)
      throw FileError(path_ + ": file shrank while reading (" + std::to_string(got) + " of " +
                      std::to_string(count) + " bytes at offset " + std::to_string(offset) + ")");
    got += static_cast<uint64_t>(r);
  }
}

void write_bytes(std::FILE* f, const void* data, size_t size, const std::string& path) {
  if (size && std::fwrite(data, 1, size, f) != size)
    throw FileError(path + ": write failed: " + errno_text(errno));
}

// Removes the temporary files of `path` (see temporary_prefix) left by processes that died
// mid-write (killed, power cut): only those whose pid is no longer running, so a concurrent
// writer's file is left alone.
void remove_stale_temporaries(const std::string& path) {
  const std::string dir = directory_of(path);
  const std::string prefix = temporary_prefix(path);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) std::remove((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& write) {
  remove_stale_temporaries(path);
  const std::string tmp = path.substr(0, path.size() - base_name(path).size()) +
                          temporary_prefix(path) + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw FileError(path + ": cannot create " + tmp + ": " + errno_text(errno));
  errno = 0;
  try {
    write(f);
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  // Any failed fwrite in the callback leaves the error flag set; fflush/fsync catch the rest
  // (ENOSPC is often only reported when buffered data reaches the disk).
  std::string failure;
  if (std::ferror(f)) failure = errno ? "write failed: " + errno_text(errno) : "write failed";
  else if (std::fflush(f) != 0) failure = "write failed: " + errno_text(errno);
  else if (::fsync(::fileno(f)) != 0) failure = "fsync failed: " + errno_text(errno);
  if (std::fclose(f) != 0 && failure.empty()) failure = "close failed: " + errno_text(errno);
  if (failure.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    failure = "cannot rename " + tmp + " over it: " + errno_text(errno);
  if (!failure.empty()) {
    std::remove(tmp.c_str());
    throw FileError(path + ": " + failure);
  }
  sync_directory(path);
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  write_file_atomic(path, [&](std::FILE* f) { write_bytes(f, data, size, path); });
}

uint64_t memory_limit() {
  uint64_t limit = std::numeric_limits<uint64_t>::max();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit r;
    if (getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
      limit = std::min<uint64_t>(limit, static_cast<uint64_t>(r.rlim_cur));
  }
  return limit;
}

void advise_huge_pages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  if (bytes < 2 * kHuge) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // (a hint: errors ignored)
#else
  (void)p, (void)bytes;
#endif
}

}  // namespace attnkit

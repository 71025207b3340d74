// .npz files: a zip of .npy files, read as np.savez / np.savez_compressed (Python's zipfile)
// and common zip tools write them, written as np.savez does. Only the parts of the zip format
// those produce: one disk, stored or deflated entries, zip64 size/offset records.
#include "engine/npz.h"

#include <sys/resource.h>
#include <unistd.h>

#define ZLIB_CONST
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <set>
#include <utility>

#include "engine/error.h"
#include "engine/file_bytes.h"
#include "engine/file_io.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "attnkit's file formats are little-endian and are read by memcpy on a little-endian host"
#endif

namespace attnkit {

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
  // Every entry's uncompressed bytes are held in memory at once (the arrays returned).
  std::set<std::string> names;
  uint64_t total = 0;
  const uint64_t memory = memory_limit();
  for (ZipEntry& e : entries) {
    if (!names.insert(e.name).second) throw FileError(path + ": duplicate entry " + quote(e.name));
    if (e.name.size() < 5 || e.name.compare(e.name.size() - 4, 4, ".npy") != 0)
      throw FileError(path + ": entry " + quote(e.name) + " is not a .npy file");
    check_entry(z, e);
    if (e.uncompressed > memory)
      throw FileError(path + ": entry " + quote(e.name) + ": needs " + std::to_string(e.uncompressed) +
                      " bytes of memory, more than the " + std::to_string(memory) +
                      " bytes this process can have");
    total += e.uncompressed;
    if (total > kMaxNpzTotal)
      throw FileError(path + ": entries declare more than " + std::to_string(kMaxNpzTotal) +
                      " uncompressed bytes in total");
    if (total > memory)
      throw FileError(path + ": entries need " + std::to_string(total) +
                      " bytes of memory in all, more than the " + std::to_string(memory) +
                      " bytes this process can have");
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
    try {
      if (e.method == 0) {
        const uint8_t* p = data + e.data_offset;
        if (crc32_of(p, e.uncompressed) != e.crc) throw FileError(where + ": CRC mismatch");
        arrays[key] = parse_npy(p, e.uncompressed, where);
      } else {
        std::vector<uint8_t> image = inflate_entry(z, e);
        if (crc32_of(image.data(), image.size()) != e.crc) throw FileError(where + ": CRC mismatch");
        arrays[key] = parse_npy(std::move(image), where);
      }
    } catch (const std::bad_alloc&) {
      throw FileError(where + ": needs " + std::to_string(e.uncompressed) +
                      " bytes of memory, which cannot be allocated");
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

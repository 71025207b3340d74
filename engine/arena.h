// An aligned, zero-initialized block of bytes owned by an Executor: the arena, the flat
// parameter / gradient / moment blocks, the input block.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace attnkit {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t bytes) { resize(bytes); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; o.size_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  void resize(int64_t bytes) {
    std::free(data_);
    data_ = nullptr;
    size_ = bytes;
    if (bytes <= 0) return;
    const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, rounded);
  }
  uint8_t* data() const { return data_; }
  float* f32() const { return reinterpret_cast<float*>(data_); }
  int64_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace attnkit

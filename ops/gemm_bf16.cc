// bf16 products (ops/gemm_bf16.h): operands packed once per call into bf16 tiles, then
// multiplied by AMX-BF16 tile products or AVX512-BF16 dot products, chosen at run time.
//
// Highway 1.0.3 has neither AMX nor vdpbf16ps, so the kernels are written with the compiler's
// intrinsics, each function compiled for its instruction set alone (target attributes, not
// file-wide flags: nothing else in this file may use AVX-512, and nothing here runs before
// the CPU check).
//
// Packed layouts (bf16 = uint16_t bits), zero-padded to whole tiles and to an even number of
// tiles along m and n (the kernels compute 2 × 2 tiles of C at a time):
//   A: [m tiles][k tiles][16 rows][32 k]      — an AMX A tile: row i holds A[i, k0 .. k0+31];
//   B: [n tiles][k tiles][16 pairs][16 cols][2] — an AMX B tile in VNNI form: row r holds, for
//      each column j, the pair B[k0+2r, j], B[k0+2r+1, j].
// vdpbf16ps reads the same layouts: a broadcast dword of A's row (a k pair) times a B tile row.
#include "ops/gemm_bf16.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <vector>

#include "ops/gemm.h"

#define ATTNKIT_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define ATTNKIT_AMX_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")))

// g++ 12 warns "'__Y' may be used uninitialized" inside its own intrinsic headers (the
// _mm512_undefined_* placeholders of unmasked shuffles and loads): not our variables.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attnkit {
namespace {

constexpr int64_t kTile = 16;                   // rows of every tile; columns of B and C tiles
constexpr int64_t kTileK = 32;                  // k values in a row of an A tile
constexpr int64_t kTileElems = kTile * kTileK;  // 512 bf16: 1 KB

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t even_tiles(int64_t n) { return (ceil_div(n, kTile) + 1) / 2 * 2; }

// ---- What the CPU can do -------------------------------------------------------------------

uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

struct CpuFeatures {
  bool avx512_bf16 = false;  // with AVX512F/BW/VL/DQ and the OS saving their state
  bool amx = false;          // AMX-TILE and AMX-BF16, and the OS granted the tile data
  std::string amx_note;      // why a CPU with AMX does not use it (bf16_kernel_note)
};

// Linux's permission for the AMX tile data (XFEATURE_XTILEDATA), asked for once per process;
// on refusal, *why says what was refused and the error.
bool request_amx_permission(std::string* why) {
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    const int err = errno;
    *why = std::string("Linux refused the AMX tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(err) + (err == ENOSPC ? "; a thread's signal stack is too small for the tile state" : "") +
           ")";
    return false;
  }
  unsigned long bits = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bits) != 0 || !((bits >> kXfeatureXtiledata) & 1)) {
    *why = "Linux did not grant the AMX tile-data permission (arch_prctl ARCH_GET_XCOMP_PERM)";
    return false;
  }
  return true;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return f;  // OSXSAVE
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);  // F DQ BW VL
  const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool bf16 = __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && ((a1 >> 5) & 1);
  f.avx512_bf16 = os_avx512 && avx512 && bf16;
  const bool os_amx = ((xcr0 >> 17) & 3) == 3;  // XTILECFG, XTILEDATA
  if (f.avx512_bf16 && amx_bf16 && amx_tile) {
    std::string why;
    if (!os_amx) {
      why = "the operating system does not enable the AMX tile state (XCR0)";
    } else {
      f.amx = request_amx_permission(&why);
    }
    if (!f.amx) f.amx_note = "AMX-BF16 unused: " + why;
  }
  return f;
}

const CpuFeatures& cpu() {
  static const CpuFeatures f = detect();
  return f;
}

Bf16Kernel best_kernel() {
  if (cpu().amx) return Bf16Kernel::kAmx;
  if (cpu().avx512_bf16) return Bf16Kernel::kAvx512Bf16;
  return Bf16Kernel::kNone;
}

std::atomic<int> g_kernel{-1};  // -1: the best one

// ---- Scratch ---------------------------------------------------------------------------------

// 64-byte-aligned buffers (bytes rounded up to whole cache lines), freed with std::free.
struct Free {
  void operator()(void* p) const { std::free(p); }
};
size_t whole_lines(size_t bytes) { return (bytes + 63) / 64 * 64; }
void* aligned_lines(size_t bytes) { return std::aligned_alloc(64, whole_lines(bytes)); }

// Per-thread buffers that grow and are then reused: no allocation per call after the first.
struct Scratch {
  std::unique_ptr<void, Free> data[3];
  size_t capacity[3] = {0, 0, 0};
  void* get(int slot, size_t bytes) {
    if (bytes > capacity[slot]) {
      data[slot].reset(aligned_lines(bytes));
      if (!data[slot]) throw std::bad_alloc();
      capacity[slot] = whole_lines(bytes);
    }
    return data[slot].get();
  }
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// ---- Packed operands kept for reuse (bf16_gemm_block's b_stamp) -----------------------------

std::atomic<bool> g_pack_cache{true};

// A thread's packed forms of B operands that stay the same for a whole run (the weights of a
// chunked training step: every chunk's forward and backward multiply by them). Entries are
// found by where B is and how this thread packs it; one whose stamp is the run's is reused
// as it is, one from another run is packed again in place. The entries of a model's weights
// are made in its first run and found again by every later one (no allocation); a full cache
// lends another run's large-enough buffers, else leaves B to the scratch.
class PackCache {
 public:
  static constexpr size_t kMaxEntries = 64;
  static constexpr size_t kMaxBytes = size_t{64} << 20;  // per thread; beyond it, no caching

  struct Key {
    const float* b;
    int64_t ldb, k, j0, j1, kc;
    bool trans_b, amx;
    bool operator==(const Key& o) const {
      return b == o.b && ldb == o.ldb && k == o.k && j0 == o.j0 && j1 == o.j1 && kc == o.kc &&
             trans_b == o.trans_b && amx == o.amx;
    }
  };
  struct Slot {
    uint16_t* data;  // nullptr: cannot cache (pack into scratch as usual)
    bool packed;     // already holds B packed for this stamp
  };

  // The buffer for B of `key` under `stamp` (elems bf16 values: all of B's tiles).
  Slot find(const Key& key, uint64_t stamp, size_t elems) {
    const size_t bytes = elems * sizeof(uint16_t);
    for (Entry& e : entries_) {
      if (e.key == key) {  // (the same key: the same size)
        e.used = ++clock_;
        if (e.stamp == stamp) return {e.data.get(), true};
        e.stamp = stamp;
        return {e.data.get(), false};
      }
    }
    Entry* slot = nullptr;
    if (entries_.size() < kMaxEntries && total_ + bytes <= kMaxBytes) {  // a new operand
      if (entries_.capacity() < kMaxEntries) entries_.reserve(kMaxEntries);
      std::unique_ptr<uint16_t, Free> data(static_cast<uint16_t*>(aligned_lines(bytes)));
      if (!data) return {nullptr, false};  // no memory to spare: pack into the scratch as before
      slot = &entries_.emplace_back();
      slot->data = std::move(data);
      slot->capacity = whole_lines(bytes);
      total_ += slot->capacity;
    } else {  // full: the least recently used buffer of another run that is large enough (no
              // allocation once a model's operands have their entries), else no caching
      for (Entry& e : entries_)
        if (e.stamp != stamp && e.capacity >= bytes && (!slot || e.used < slot->used)) slot = &e;
      if (!slot) return {nullptr, false};
    }
    slot->key = key;
    slot->stamp = stamp;
    slot->used = ++clock_;
    return {slot->data.get(), false};
  }

 private:
  struct Entry {
    Key key{};
    uint64_t stamp = 0, used = 0;
    std::unique_ptr<uint16_t, Free> data;
    size_t capacity = 0;
  };
  std::vector<Entry> entries_;  // (a Slot points into an entry's buffer, never at the entry)
  size_t total_ = 0;
  uint64_t clock_ = 0;
};
PackCache& pack_cache() {
  thread_local PackCache c;
  return c;
}

// ---- Packing (AVX512-BF16: vcvtne2ps2bf16 rounds 32 floats at a time) ---------------------

ATTNKIT_AVX512_BF16 inline __mmask16 first_n(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// 32 bf16 in k order from two vectors of 16 floats.
ATTNKIT_AVX512_BF16 inline __m512i to_bf16(__m512 lo, __m512 hi) {
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Pairs (even[j], odd[j]) for 16 columns j: 16 dwords, the VNNI form of two rows.
ATTNKIT_AVX512_BF16 inline __m512i interleave_rows(__m512 even, __m512 odd) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                       22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, to_bf16(even, odd));
}

// out row x (16 dwords, 64 bytes apart in a tile) = dword x of each of the 16 rows r, in
// registers: 32-bit, then 64-bit unpacks within 128-bit lanes, then two rounds of 128-bit lane
// shuffles (64 shuffles; 16 gathers from a stack tile took twice as long).
ATTNKIT_AVX512_BF16 inline void transpose_dwords(const __m512i (&r)[16], uint16_t* out) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // t[2i], t[2i+1]: rows 2i, 2i+1 interleaved, columns 4L, 4L+1 | 4L+2, 4L+3
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + c], lane L: column 4L + c of rows 4g .. 4g+3
    u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c: lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
    const __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    _mm512_store_si512(out + c * kTileK, _mm512_shuffle_i32x4(x0, y0, 0x88));
    _mm512_store_si512(out + (4 + c) * kTileK, _mm512_shuffle_i32x4(x0, y0, 0xdd));
    _mm512_store_si512(out + (8 + c) * kTileK, _mm512_shuffle_i32x4(x1, y1, 0x88));
    _mm512_store_si512(out + (12 + c) * kTileK, _mm512_shuffle_i32x4(x1, y1, 0xdd));
  }
}

// op(A) rows [i0, i1), k tiles [kt0, kt1) of k values in all, into A tiles (m tiles padded
// to mt; kt = kt1 - kt0 tiles a row). Each source row is read in order: A's rows (k-major
// when transposed) one band after another, so no pass strides down thousands of rows (a TLB
// miss a row).
ATTNKIT_AVX512_BF16 void pack_a(bool trans_a, const float* a, int64_t lda, int64_t i0, int64_t i1, int64_t k,
                                int64_t kt0, int64_t kt1, int64_t mt, uint16_t* out) {
  const int64_t kt = kt1 - kt0;
  if (!trans_a) {  // row i of a tile: A[i, k0 .. k0+31]; a tile row of tiles reads 16 rows along
    const int64_t k_first = kt0 * kTileK;
    const int64_t whole = std::min(kt, std::max<int64_t>(0, (k - k_first) / kTileK));  // tiles with 32 values
    for (int64_t tm = 0; tm < mt; ++tm) {
      const int64_t ib = i0 + tm * kTile;
      const int64_t rows = std::max<int64_t>(0, std::min<int64_t>(kTile, i1 - ib));
      uint16_t* tiles = out + tm * kt * kTileElems;
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = a + (ib + r) * lda + k_first;
        uint16_t* dst = tiles + r * kTileK;
        for (int64_t tk = 0; tk < whole; ++tk)  // unmasked: the common case
          _mm512_store_si512(dst + tk * kTileElems,
                             to_bf16(_mm512_loadu_ps(src + tk * kTileK), _mm512_loadu_ps(src + tk * kTileK + 16)));
        for (int64_t tk = whole; tk < kt; ++tk) {  // the last, partial k tile (and padding)
          const int64_t left = k - k_first - tk * kTileK;
          _mm512_store_si512(dst + tk * kTileElems,
                             to_bf16(_mm512_maskz_loadu_ps(first_n(left), src + tk * kTileK),
                                     _mm512_maskz_loadu_ps(first_n(left - 16), src + tk * kTileK + 16)));
        }
      }
      for (int64_t r = rows; r < kTile; ++r)  // padding rows
        for (int64_t tk = 0; tk < kt; ++tk) _mm512_store_si512(tiles + tk * kTileElems + r * kTileK, _mm512_setzero_si512());
    }
    return;
  }
  // A stored k × m: pairs of its rows give dword columns; transpose them. A band of 32 rows of
  // A (one k tile) is read across all its columns before the next.
  for (int64_t tk = 0; tk < kt; ++tk) {
    const int64_t k0 = (kt0 + tk) * kTileK;
    for (int64_t tm = 0; tm < mt; ++tm) {
      const int64_t ib = i0 + tm * kTile;
      const __mmask16 cols = first_n(i1 - ib);
      __m512i t[16];
      for (int64_t r = 0; r < kTile; ++r) {
        const int64_t kk = k0 + 2 * r;
        const __m512 even = kk < k ? _mm512_maskz_loadu_ps(cols, a + kk * lda + ib) : _mm512_setzero_ps();
        const __m512 odd = kk + 1 < k ? _mm512_maskz_loadu_ps(cols, a + (kk + 1) * lda + ib) : _mm512_setzero_ps();
        t[r] = interleave_rows(even, odd);
      }
      transpose_dwords(t, out + (tm * kt + tk) * kTileElems);
    }
  }
}

// op(B) columns [j0, j1), k tiles [kt0, kt1), into B tiles in VNNI form (n tiles padded to
// nt), B's rows read in order as in pack_a.
// With colsum (B not transposed): colsum[j - j0] += B[kk, j] row after row, as it is read.
ATTNKIT_AVX512_BF16 void pack_b(bool trans_b, const float* b, int64_t ldb, int64_t j0, int64_t j1, int64_t k,
                                int64_t kt0, int64_t kt1, int64_t nt, uint16_t* out, float* colsum) {
  const int64_t kt = kt1 - kt0;
  if (!trans_b) {  // B stored k × n: rows 2r, 2r+1 interleaved are tile row r, across all tiles
    for (int64_t tk = 0; tk < kt; ++tk) {
      for (int64_t r = 0; r < kTile; ++r) {
        const int64_t kk = (kt0 + tk) * kTileK + 2 * r;
        const float* even_row = b + kk * ldb;
        const float* odd_row = even_row + ldb;
        const bool has_even = kk < k, has_odd = kk + 1 < k;
        uint16_t* dst = out + tk * kTileElems + r * kTileK;
        if (has_odd && !colsum) {  // the common case: whole column tiles unmasked
          const int64_t whole = (j1 - j0) / kTile;
          for (int64_t tn = 0; tn < whole; ++tn) {
            const int64_t jb = j0 + tn * kTile;
            _mm512_store_si512(dst + tn * kt * kTileElems,
                               interleave_rows(_mm512_loadu_ps(even_row + jb), _mm512_loadu_ps(odd_row + jb)));
          }
          for (int64_t tn = whole; tn < nt; ++tn) {
            const int64_t jb = j0 + tn * kTile;
            const __mmask16 cols = first_n(j1 - jb);
            _mm512_store_si512(dst + tn * kt * kTileElems,
                               interleave_rows(_mm512_maskz_loadu_ps(cols, even_row + jb),
                                               _mm512_maskz_loadu_ps(cols, odd_row + jb)));
          }
          continue;
        }
        for (int64_t tn = 0; tn < nt; ++tn) {
          const int64_t jb = j0 + tn * kTile;
          const __mmask16 cols = first_n(j1 - jb);
          const __m512 even = has_even ? _mm512_maskz_loadu_ps(cols, even_row + jb) : _mm512_setzero_ps();
          const __m512 odd = has_odd ? _mm512_maskz_loadu_ps(cols, odd_row + jb) : _mm512_setzero_ps();
          _mm512_store_si512(out + (tn * kt + tk) * kTileElems + r * kTileK, interleave_rows(even, odd));
          if (colsum && cols) {
            float* sum = colsum + (jb - j0);
            __m512 v = _mm512_maskz_loadu_ps(cols, sum);
            if (has_even) v = _mm512_add_ps(v, even);
            if (has_odd) v = _mm512_add_ps(v, odd);
            _mm512_mask_storeu_ps(sum, cols, v);
          }
        }
      }
    }
    return;
  }
  // B stored n × k: column j's 32 k values are 16 pairs; transpose them.
  for (int64_t tn = 0; tn < nt; ++tn) {
    const int64_t jb = j0 + tn * kTile;
    for (int64_t tk = 0; tk < kt; ++tk) {
      const int64_t k0 = (kt0 + tk) * kTileK;
      const __mmask16 lo = first_n(k - k0), hi = first_n(k - k0 - 16);
      __m512i t[16];
      for (int64_t c = 0; c < kTile; ++c) {
        const int64_t j = jb + c;
        __m512i v = _mm512_setzero_si512();
        if (j < j1) {
          const float* src = b + j * ldb + k0;
          v = to_bf16(_mm512_maskz_loadu_ps(lo, src), _mm512_maskz_loadu_ps(hi, src + 16));
        }
        t[c] = v;
      }
      transpose_dwords(t, out + (tn * kt + tk) * kTileElems);
    }
  }
}

// ---- Storing a 32 × 32 block of sums ----------------------------------------------------------

struct Out {
  float* c;
  int64_t ldc;
  float alpha, beta;
  int64_t i1, j1;  // rows and columns of C that exist (absolute)
  const GemmEpilogue* epilogue;  // or nullptr
};

// C[ib.., jb..] = alpha·acc + beta·C for the part of the 32 × 32 block acc (row stride 32)
// inside C, then the epilogue. Branches on the flags stay outside the vector expressions.
ATTNKIT_AVX512_BF16 void store_block(const float* acc, int64_t rows, const Out& o, int64_t ib, int64_t jb) {
  const int64_t nrows = std::min(rows, o.i1 - ib);
  const __m512 alpha = _mm512_set1_ps(o.alpha), beta = _mm512_set1_ps(o.beta), zero = _mm512_setzero_ps();
  const GemmEpilogue* e = o.epilogue;
  // The blocks sweep C's columns 32 at a time for the same 32 rows: the mask and addend rows
  // of the blocks two ahead are fetched now (from memory they would stall every row).
  if (e && (e->mask || e->addend) && jb + 64 < o.j1) {
    for (int64_t r = 0; r < nrows; ++r) {
      if (e->mask) {
        _mm_prefetch(reinterpret_cast<const char*>(e->mask + (ib + r) * e->ldm + jb + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(e->mask + (ib + r) * e->ldm + jb + 80), _MM_HINT_T0);
      }
      if (e->addend) {
        _mm_prefetch(reinterpret_cast<const char*>(e->addend + (ib + r) * e->ld_addend + jb + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(e->addend + (ib + r) * e->ld_addend + jb + 80), _MM_HINT_T0);
      }
    }
  }
  for (int64_t h = 0; h < 2; ++h) {
    const int64_t j = jb + h * kTile;
    if (j >= o.j1) break;
    const __mmask16 mask = first_n(o.j1 - j);
    const __m512 bias = e && e->bias ? _mm512_maskz_loadu_ps(mask, e->bias + j) : zero;
    for (int64_t r = 0; r < nrows; ++r) {
      const int64_t i = ib + r;
      float* dst = o.c + i * o.ldc + j;
      __m512 v = _mm512_load_ps(acc + r * 2 * kTile + h * kTile);
      if (o.alpha != 1.0f) v = _mm512_mul_ps(alpha, v);
      if (o.beta == 1.0f) {
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, dst));
      } else if (o.beta != 0.0f) {
        v = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask, dst), v);
      }
      if (e) {  // as ops/gemm_tile-inl.h's EpilogueWith: bitwise relu_forward's, relu_backward's, add_forward's
        if (e->bias) v = _mm512_add_ps(v, bias);
        if (e->relu && !e->relu_last) v = _mm512_max_ps(v, zero);
        if (e->mask) {
          const __m512 m = _mm512_maskz_loadu_ps(mask, e->mask + i * e->ldm + j);
          v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ), v);
        }
        if (e->addend) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, e->addend + i * e->ld_addend + j));
        if (e->relu && e->relu_last) v = _mm512_max_ps(v, zero);
      }
      _mm512_mask_storeu_ps(dst, mask, v);
    }
  }
}

// Column panels: B tiles of a panel (all of k) stay in L2 while every row pair of A passes.
int64_t panel_tiles(int64_t kt, int64_t nt) {
  const int64_t bytes_per_tile_column = kt * kTileElems * 2;
  int64_t tiles = std::max<int64_t>(2, (512 * 1024 / bytes_per_tile_column) / 2 * 2);
  return std::min(tiles, nt);
}

// ---- AVX512-BF16 kernel ------------------------------------------------------------------------

// 8 rows × 32 columns of sums over all k tiles: A tile rows r0 .. r0+7, B tiles b0, b1.
ATTNKIT_AVX512_BF16 void dot_8x32(const uint16_t* a_tiles, const uint16_t* b0_tiles, const uint16_t* b1_tiles,
                                  int64_t kt, int64_t r0, float* acc) {
  __m512 s[8][2];
  for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = _mm512_setzero_ps();
  for (int64_t tk = 0; tk < kt; ++tk) {
    const uint32_t* at = reinterpret_cast<const uint32_t*>(a_tiles + tk * kTileElems) + r0 * 16;
    const uint16_t* bt0 = b0_tiles + tk * kTileElems;
    const uint16_t* bt1 = b1_tiles + tk * kTileElems;
    for (int r = 0; r < 16; ++r) {
      const __m512bh vb0 = (__m512bh)_mm512_load_si512(bt0 + r * kTileK);
      const __m512bh vb1 = (__m512bh)_mm512_load_si512(bt1 + r * kTileK);
      for (int i = 0; i < 8; ++i) {
        const __m512bh va = (__m512bh)_mm512_set1_epi32(static_cast<int>(at[i * 16 + r]));
        s[i][0] = _mm512_dpbf16_ps(s[i][0], va, vb0);
        s[i][1] = _mm512_dpbf16_ps(s[i][1], va, vb1);
      }
    }
  }
  for (int i = 0; i < 8; ++i) {
    _mm512_store_ps(acc + i * 32, s[i][0]);
    _mm512_store_ps(acc + i * 32 + 16, s[i][1]);
  }
}

ATTNKIT_AVX512_BF16 void multiply_avx512(const uint16_t* pa, const uint16_t* pb, int64_t mt, int64_t nt, int64_t kt,
                                         const Out& o, int64_t i0, int64_t j0) {
  alignas(64) float acc[32 * 32];
  const int64_t panel = panel_tiles(kt, nt);
  for (int64_t n0 = 0; n0 < nt; n0 += panel) {
    const int64_t n1 = std::min(nt, n0 + panel);
    for (int64_t tm = 0; tm < mt; ++tm) {
      const uint16_t* a_tiles = pa + tm * kt * kTileElems;
      const int64_t ib = i0 + tm * kTile;
      if (ib >= o.i1) break;
      for (int64_t tn = n0; tn < n1; tn += 2) {
        const uint16_t* b0 = pb + tn * kt * kTileElems;
        dot_8x32(a_tiles, b0, b0 + kt * kTileElems, kt, 0, acc);
        if (ib + 8 < o.i1) dot_8x32(a_tiles, b0, b0 + kt * kTileElems, kt, 8, acc + 8 * 32);
        store_block(acc, kTile, o, ib, j0 + tn * kTile);
      }
    }
  }
}

// ---- AMX-BF16 kernel ---------------------------------------------------------------------------

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// k blocks of the AMX path (see bf16_gemm_block): a row pair's A strips (2 × 8 KB) stay in L1
// while the block's B tiles stream from L2.
constexpr int64_t kKc = 8;        // k tiles per block (256 values)
constexpr int64_t kKcWhole = 12;  // up to this many k tiles: one block, no partial sums

// Tiles 0-3: C (2 × 2 blocks of 16 × 16 floats); 4, 5: A tiles; 6, 7: B tiles. All 16 rows of
// 64 bytes. One k block of kt tiles: the sums start from zero (first) or from `partial`
// (float32, row stride ld), and end in C through store_block (last) or back in `partial`.
ATTNKIT_AMX_BF16 void multiply_amx(const uint16_t* pa, const uint16_t* pb, int64_t mt, int64_t nt, int64_t kt,
                                   const Out& o, int64_t i0, int64_t j0, float* partial, int64_t ld, bool first,
                                   bool last) {
  // Every call uses the same configuration: each thread loads it once and keeps it.
  thread_local bool configured = false;
  if (!configured) {
    TileConfig cfg;
    std::memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    configured = true;
  }
  alignas(64) float acc[32 * 32];
  constexpr int64_t kStride = 64;  // bytes between tile rows in the packed operands
  const int64_t ld_bytes = ld * 4;
  // C = A·B into whole blocks (one k block, alpha 1, beta 0, no epilogue): see below. (Not for
  // beta 1: tiles starting from C would add in another order than sum-then-add-C, and a plain
  // product must stay bitwise the fused epilogue's.)
  const bool direct = first && last && o.alpha == 1.0f && o.beta == 0.0f && !o.epilogue;
  const int64_t panel = panel_tiles(kt, nt);
  for (int64_t n0 = 0; n0 < nt; n0 += panel) {
    const int64_t n1 = std::min(nt, n0 + panel);
    for (int64_t tm = 0; tm < mt; tm += 2) {
      const int64_t ib = i0 + tm * kTile;
      if (ib >= o.i1) break;
      const uint16_t* a0 = pa + tm * kt * kTileElems;
      const uint16_t* a1 = a0 + kt * kTileElems;
      for (int64_t tn = n0; tn < n1; tn += 2) {
        const uint16_t* b0 = pb + tn * kt * kTileElems;
        const uint16_t* b1 = b0 + kt * kTileElems;
        float* p = partial ? partial + tm * kTile * ld + tn * kTile : nullptr;
        const int64_t jb = j0 + tn * kTile;
        if (first) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        } else {
          _tile_loadd(0, p, ld_bytes);
          _tile_loadd(1, p + kTile, ld_bytes);
          _tile_loadd(2, p + kTile * ld, ld_bytes);
          _tile_loadd(3, p + kTile * ld + kTile, ld_bytes);
        }
        for (int64_t tk = 0; tk < kt; ++tk) {  // each product issued as soon as its tiles are in
          const int64_t off = tk * kTileElems;
          _tile_loadd(4, a0 + off, kStride);
          _tile_loadd(6, b0 + off, kStride);
          _tile_dpbf16ps(0, 4, 6);
          _tile_loadd(7, b1 + off, kStride);
          _tile_dpbf16ps(1, 4, 7);
          _tile_loadd(5, a1 + off, kStride);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        if (direct && ib + 2 * kTile <= o.i1 && jb + 2 * kTile <= o.j1) {
          // A whole 32 × 32 block of C = A·B: the tiles are stored straight into C, with no pass
          // through acc and no vector loads waiting for the tile stores.
          float* c = o.c + ib * o.ldc + jb;
          const int64_t ldc_bytes = o.ldc * 4;
          _tile_stored(0, c, ldc_bytes);
          _tile_stored(1, c + kTile, ldc_bytes);
          _tile_stored(2, c + kTile * o.ldc, ldc_bytes);
          _tile_stored(3, c + kTile * o.ldc + kTile, ldc_bytes);
        } else if (last) {
          _tile_stored(0, acc, 128);
          _tile_stored(1, acc + 16, 128);
          _tile_stored(2, acc + 16 * 32, 128);
          _tile_stored(3, acc + 16 * 32 + 16, 128);
          store_block(acc, 2 * kTile, o, ib, jb);
        } else {
          _tile_stored(0, p, ld_bytes);
          _tile_stored(1, p + kTile, ld_bytes);
          _tile_stored(2, p + kTile * ld, ld_bytes);
          _tile_stored(3, p + kTile * ld + kTile, ld_bytes);
        }
      }
    }
  }
}

// ---- Without bf16 instructions: round, then the float32 kernels ------------------------------

uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);        // ±0, subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN, quiet
  u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even (overflow gives ±inf)
  return static_cast<uint16_t>(u >> 16);
}

void multiply_rounded(bool trans_a, bool trans_b, int64_t k, float alpha, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int64_t i0, int64_t i1,
                      int64_t j0, int64_t j1) {
  const int64_t rows = i1 - i0, cols = j1 - j0;
  float* ra = static_cast<float*>(scratch().get(0, static_cast<size_t>(rows * k) * sizeof(float)));
  float* rb = static_cast<float*>(scratch().get(1, static_cast<size_t>(k * cols) * sizeof(float)));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t kk = 0; kk < k; ++kk)
      ra[i * k + kk] = round_to_bf16(trans_a ? a[kk * lda + i0 + i] : a[(i0 + i) * lda + kk]);
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < cols; ++j)
      rb[kk * cols + j] = round_to_bf16(trans_b ? b[(j0 + j) * ldb + kk] : b[kk * ldb + j0 + j]);
  sgemm_slice(false, false, rows, cols, k, alpha, ra, k, rb, cols, beta, c + i0 * ldc + j0, ldc, Slice{});
}

// The epilogue over a finished block without AVX-512 (the same operations as store_block's).
void plain_epilogue(const GemmEpilogue& e, float* c, int64_t ldc, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  auto relu = [](float x) { return x > 0.0f ? x : 0.0f; };  // vmaxps(x, 0): NaN and -0 give 0
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) {
      float v = c[i * ldc + j];
      if (e.bias) v += e.bias[j];
      if (e.relu && !e.relu_last) v = relu(v);
      if (e.mask && !(e.mask[i * e.ldm + j] > 0.0f)) v = 0.0f;
      if (e.addend) v += e.addend[i * e.ld_addend + j];
      if (e.relu && e.relu_last) v = relu(v);
      c[i * ldc + j] = v;
    }
  }
}

void scale_block(float beta, float* c, int64_t ldc, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t i = i0; i < i1; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row + j0, row + j1, 0.0f);
    } else if (beta != 1.0f) {
      for (int64_t j = j0; j < j1; ++j) row[j] *= beta;
    }
  }
}

}  // namespace

float round_to_bf16(float x) {
  const uint32_t u = static_cast<uint32_t>(bf16_bits(x)) << 16;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

bool bf16_kernel_supported(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::kAmx: return cpu().amx;
    case Bf16Kernel::kAvx512Bf16: return cpu().avx512_bf16;
    case Bf16Kernel::kNone: return true;
  }
  return false;
}

// (Not hwy::SupportedTargets(): in Highway 1.0.3 it re-chooses the dispatch target from the
// CPU's targets, undoing a forced one until the next DisableTargets.)
static std::atomic<bool> g_avx512_allowed{true};
bool avx512_allowed() { return g_avx512_allowed.load(std::memory_order_relaxed); }
void set_avx512_allowed(bool allowed) { g_avx512_allowed.store(allowed); }

Bf16Kernel bf16_kernel() {
  if (!avx512_allowed()) return Bf16Kernel::kNone;  // AVX-512 code: not below a forced AVX3
  const int k = g_kernel.load(std::memory_order_relaxed);
  return k < 0 ? best_kernel() : static_cast<Bf16Kernel>(k);
}

bool set_bf16_kernel(Bf16Kernel kernel) {
  if (!bf16_kernel_supported(kernel)) return false;
  g_kernel.store(static_cast<int>(kernel));
  return true;
}

void use_best_bf16_kernel() { g_kernel.store(-1); }

const char* bf16_kernel_name(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::kAmx: return "AMX-BF16";
    case Bf16Kernel::kAvx512Bf16: return "AVX512-BF16";
    case Bf16Kernel::kNone: return "none";
  }
  return "?";
}

std::string bf16_kernels_available() {
  std::string s;
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kNone})
    if (bf16_kernel_supported(k)) s += std::string(s.empty() ? "" : ", ") + bf16_kernel_name(k);
  return s;
}

std::string bf16_kernel_note() { return cpu().amx_note; }

bool bf16_product_worth(int64_t m, int64_t n, int64_t k) { return m >= 16 && n >= 16 && k >= 32; }

void set_bf16_pack_cache(bool on) { g_pack_cache.store(on); }
bool bf16_pack_cache() { return g_pack_cache.load(); }

void bf16_gemm_block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int64_t i0,
                     int64_t i1, int64_t j0, int64_t j1, const GemmEpilogue* epilogue, uint64_t b_stamp) {
  (void)m, (void)n;
  if (i0 >= i1 || j0 >= j1) return;
  // The column sums of columns [j0, j1): colsum[0] is column j0's.
  float* colsum = epilogue && epilogue->colsum && !trans_b ? epilogue->colsum + j0 : nullptr;
  if (colsum && !epilogue->colsum_accumulate) std::fill(colsum, colsum + (j1 - j0), 0.0f);
  auto plain_colsum = [&] {  // without packing: row by row, each column in k order
    if (!colsum) return;
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = j0; j < j1; ++j) colsum[j - j0] += b[kk * ldb + j];
  };
  if (k <= 0 || alpha == 0.0f) {
    scale_block(beta, c, ldc, i0, i1, j0, j1);
    if (epilogue) plain_epilogue(*epilogue, c, ldc, i0, i1, j0, j1);
    plain_colsum();
    return;
  }
  const Bf16Kernel kernel = bf16_kernel();
  if (kernel == Bf16Kernel::kNone) {
    multiply_rounded(trans_a, trans_b, k, alpha, a, lda, b, ldb, beta, c, ldc, i0, i1, j0, j1);
    if (epilogue) plain_epilogue(*epilogue, c, ldc, i0, i1, j0, j1);
    plain_colsum();
    return;
  }
  // Blocked as in a BLIS-style GEMM so the packed operands are used while still in cache: k in
  // blocks of kKc tiles (AMX; up to kKcWhole tiles in one), each block's B tiles (≤ 512 KB for
  // the shapes of the models here) packed once, then rows of A in blocks of ≤ 256 KB of
  // tiles, each packed and multiplied at once. Every element of A and B is packed once.
  const bool amx = kernel == Bf16Kernel::kAmx;
  const int64_t nt = even_tiles(j1 - j0), kt = ceil_div(k, kTileK);
  const int64_t kc = !amx || kt <= kKcWhole ? kt : kKc;
  const int64_t mc = std::max<int64_t>(2 * kTile, (256 * 1024 / (kc * kTileK * 2)) / (2 * kTile) * (2 * kTile));
  const int64_t mt_block = even_tiles(std::min(mc, i1 - i0));
  auto* pa = static_cast<uint16_t*>(scratch().get(0, static_cast<size_t>(mt_block * kc * kTileElems) * 2));
  auto* pb = static_cast<uint16_t*>(scratch().get(1, static_cast<size_t>(nt * kc * kTileElems) * 2));
  const int64_t ld = nt * kTile;  // floats in a row of the partial sums
  float* partial = kc < kt ? static_cast<float*>(scratch().get(
                                 2, static_cast<size_t>(even_tiles(i1 - i0) * kTile * ld) * sizeof(float)))
                           : nullptr;
  // B the same all run long (b_stamp): packed whole into this thread's cache by the run's
  // first product with it, read from there by the others (k block k0 at nt·k0 tiles).
  PackCache::Slot kept{nullptr, false};
  if (b_stamp != 0 && !colsum && g_pack_cache.load(std::memory_order_relaxed))
    kept = pack_cache().find({b, ldb, k, j0, j1, kc, trans_b, amx}, b_stamp, static_cast<size_t>(nt * kt * kTileElems));
  for (int64_t k0 = 0; k0 < kt; k0 += kc) {
    const int64_t k1 = std::min(kt, k0 + kc);
    if (kept.data) {
      pb = kept.data + nt * k0 * kTileElems;
      if (!kept.packed) {
        pack_b(trans_b, b, ldb, j0, j1, k, k0, k1, nt, pb, nullptr);
      } else {  // into L2 ahead of the tile loads, as packing it here would have left it
        const char* bytes = reinterpret_cast<const char*>(pb);
        const int64_t n_bytes = nt * (k1 - k0) * kTileElems * 2;
        for (int64_t off = 0; off < n_bytes; off += 64) _mm_prefetch(bytes + off, _MM_HINT_T1);
      }
    } else {
      pack_b(trans_b, b, ldb, j0, j1, k, k0, k1, nt, pb, colsum);
    }
    for (int64_t ib = i0; ib < i1; ib += mc) {
      const int64_t ie = std::min(i1, ib + mc), mt = even_tiles(ie - ib);
      pack_a(trans_a, a, lda, ib, ie, k, k0, k1, mt, pa);
      const Out o{c, ldc, alpha, beta, ie, j1, epilogue};
      if (amx) {
        multiply_amx(pa, pb, mt, nt, k1 - k0, o, ib, j0, partial ? partial + (ib - i0) * ld : nullptr, ld, k0 == 0,
                     k1 == kt);
      } else {
        multiply_avx512(pa, pb, mt, nt, k1 - k0, o, ib, j0);
      }
    }
  }
}

void bf16_gemm_slice(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, Slice s) {
  if (m <= 0 || n <= 0) return;
  int64_t i0 = 0, i1 = m, j0 = 0, j1 = n;
  if (s.count > 1) {  // a block of C per slice: rows when C is tall, else columns (whole tile pairs)
    if (m >= n) {
      std::tie(i0, i1) = slice_range_grain(m, 2 * kTile, s);
    } else {
      std::tie(j0, j1) = slice_range_grain(n, 2 * kTile, s);
    }
  }
  bf16_gemm_block(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, i0, i1, j0, j1, nullptr);
}

void bf16_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m * n * std::max<int64_t>(k, 1) < (int64_t{1} << 20) || omp_in_parallel() || omp_get_max_threads() <= 1) {
    bf16_gemm_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, Slice{});
    return;
  }
#pragma omp parallel
  bf16_gemm_slice(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                  Slice{omp_get_thread_num(), omp_get_num_threads()});
}

}  // namespace attnkit

// What this CPU's vector units do beside an FMA: the floor under the small products' kernels
// (ops/gemm_small-inl.h), whose A values come either as broadcast loads or as permutes of a
// register, next to every FMA.
//
//   bench_ports [--width=512|256] [--iterations=N]
//
// Each loop runs 12 (256-bit: 8) independent FMA chains; every FMA takes one operand made by the instruction
// under test (a broadcast from memory, a permute of a register, ...). Printed: nanoseconds per
// FMA, and that time over the bare FMA loop's, in FMA slots: 1.00 means the extra instruction is
// free (it runs on ports the FMAs leave idle), 1.50 that it takes half an FMA's slot. The bare
// loop's FMAs per nanosecond give the clock the others are measured by (two FMA pipes: twice the
// GHz). Medians of 5 timings. x86-64 only; 512-bit rows need avx512f (Highway's AVX3 target).
#if defined(__x86_64__) || defined(__i386__)
// GCC 12's _mm512_permutexvar_ps starts from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports once inlined here (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

alignas(64) float g_buf[4096];
// Independent FMA chains: enough to cover the FMA latency (4 cycles at 2 a cycle) and, with the
// operands, to fit the registers (32 vectors with AVX-512, 16 with AVX2: more would spill).
constexpr int kChains = 12, kChains256 = 8;

enum class Op { kFma, kBroadcastMem, kBroadcast64Mem, kBroadcast256Mem, kLoad, kPermute, kPermute2 };
const char* const kOpNames[] = {
    "FMA alone",
    "+ broadcast float from memory",
    "+ broadcast 2 floats (64-bit) from memory",
    "+ broadcast 8 floats (256-bit) from memory",
    "+ full-width load",
    "+ permute, one source (vpermps)",
    "+ permute, two sources (vpermt2ps)",
};
// The 256-bit loops' instructions where they differ from the 512-bit ones (AVX2 has no
// two-source permute).
const char* const kOpNames256[] = {
    "FMA alone",
    "+ broadcast float from memory",
    "+ broadcast 2 floats (64-bit) from memory",
    "+ 128-bit load inserted in both halves",
    "+ full-width load",
    "+ permute, one source (vpermps)",
    "+ permute and blend",
};

template <Op kOp>
__attribute__((noinline, target("avx512f,avx512vl,avx512dq,avx512bw,fma"))) double Run512(long n) {
  __m512 acc[kChains];
  const __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  __m512 src = _mm512_loadu_ps(g_buf);
  const float* p = g_buf;
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < n; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) {
      __m512 x;
      if constexpr (kOp == Op::kFma) {
        acc[i] = _mm512_fmadd_ps(acc[i], b, c);
        continue;
      } else if constexpr (kOp == Op::kBroadcastMem) {
        x = _mm512_set1_ps(p[i]);
      } else if constexpr (kOp == Op::kBroadcast64Mem) {
        double v;
        std::memcpy(&v, p + 2 * i, sizeof v);
        x = _mm512_castpd_ps(_mm512_set1_pd(v));
      } else if constexpr (kOp == Op::kBroadcast256Mem) {
        x = _mm512_broadcast_f32x8(_mm256_loadu_ps(p + 8 * i));
      } else if constexpr (kOp == Op::kLoad) {
        x = _mm512_loadu_ps(p + 16 * i);
      } else if constexpr (kOp == Op::kPermute) {
        x = _mm512_permutexvar_ps(_mm512_set1_epi32(i), src);
      } else {
        x = _mm512_permutex2var_ps(src, _mm512_set1_epi32(i), b);
      }
      acc[i] = _mm512_fmadd_ps(x, b, acc[i]);
    }
    asm volatile("" : "+r"(p), "+v"(src));  // neither hoisted out of the loop
  }
  const auto t1 = std::chrono::steady_clock::now();
  alignas(64) float lanes[16];
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  _mm512_store_ps(lanes, s);  // (kept: the chains are not dead code)
  asm volatile("" : : "m"(lanes));
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (static_cast<double>(n) * kChains);
}

template <Op kOp>
__attribute__((noinline, target("avx2,fma"))) double Run256(long n) {
  __m256 acc[kChains256];
  const __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < kChains256; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  __m256 src = _mm256_loadu_ps(g_buf);
  const float* p = g_buf;
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < n; ++it) {
#pragma GCC unroll 8
    for (int i = 0; i < kChains256; ++i) {
      __m256 x;
      if constexpr (kOp == Op::kFma) {
        acc[i] = _mm256_fmadd_ps(acc[i], b, c);
        continue;
      } else if constexpr (kOp == Op::kBroadcastMem) {
        x = _mm256_broadcast_ss(p + i);
      } else if constexpr (kOp == Op::kBroadcast64Mem) {
        x = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(p + 2 * i)));
      } else if constexpr (kOp == Op::kBroadcast256Mem) {
        x = _mm256_castps128_ps256(_mm_loadu_ps(p + 4 * i));
        x = _mm256_insertf128_ps(x, _mm_loadu_ps(p + 4 * i), 1);
      } else if constexpr (kOp == Op::kLoad) {
        x = _mm256_loadu_ps(p + 8 * i);
      } else if constexpr (kOp == Op::kPermute) {
        x = _mm256_permutevar8x32_ps(src, _mm256_set1_epi32(i % 8));
      } else {  // (no two-source permute in AVX2: a blend of two one-source ones' worth)
        x = _mm256_blend_ps(_mm256_permutevar8x32_ps(src, _mm256_set1_epi32(i % 8)), b, 0x0F);
      }
      acc[i] = _mm256_fmadd_ps(x, b, acc[i]);
    }
    asm volatile("" : "+r"(p), "+x"(src));
  }
  const auto t1 = std::chrono::steady_clock::now();
  alignas(32) float lanes[8];
  __m256 s = acc[0];
  for (int i = 1; i < kChains256; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(lanes, s);
  asm volatile("" : : "m"(lanes));
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (static_cast<double>(n) * kChains256);
}

template <int kWidth>
double Time(Op op, long n) {
  auto run = [&](auto f) {
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) t.push_back(f(n));
    std::sort(t.begin(), t.end());
    return t[2];
  };
  switch (op) {
    case Op::kFma: return run(kWidth == 512 ? Run512<Op::kFma> : Run256<Op::kFma>);
    case Op::kBroadcastMem: return run(kWidth == 512 ? Run512<Op::kBroadcastMem> : Run256<Op::kBroadcastMem>);
    case Op::kBroadcast64Mem: return run(kWidth == 512 ? Run512<Op::kBroadcast64Mem> : Run256<Op::kBroadcast64Mem>);
    case Op::kBroadcast256Mem: return run(kWidth == 512 ? Run512<Op::kBroadcast256Mem> : Run256<Op::kBroadcast256Mem>);
    case Op::kLoad: return run(kWidth == 512 ? Run512<Op::kLoad> : Run256<Op::kLoad>);
    case Op::kPermute: return run(kWidth == 512 ? Run512<Op::kPermute> : Run256<Op::kPermute>);
    case Op::kPermute2: return run(kWidth == 512 ? Run512<Op::kPermute2> : Run256<Op::kPermute2>);
  }
  return 0;
}

template <int kWidth>
void Report(long n) {
  std::printf("%d-bit vectors, %d FMA chains, %ld iterations, medians of 5\n", kWidth, kWidth == 512 ? kChains : kChains256, n);
  const double fma = Time<kWidth>(Op::kFma, n);
  std::printf("%-46s %8.4f ns/FMA  %5.2f FMA slots   (%.2f FMAs per ns)\n", kOpNames[0], fma, 1.0, 1.0 / fma);
  for (Op op : {Op::kBroadcastMem, Op::kBroadcast64Mem, Op::kBroadcast256Mem, Op::kLoad, Op::kPermute, Op::kPermute2}) {
    const double t = Time<kWidth>(op, n);
    const char* name = (kWidth == 512 ? kOpNames : kOpNames256)[static_cast<int>(op)];
    std::printf("%-46s %8.4f ns/FMA  %5.2f FMA slots\n", name, t, t / fma);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int width = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? 512 : 256;
  long n = 20000000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--width=", 0) == 0) {
      width = std::atoi(a.c_str() + 8);
    } else if (a.rfind("--iterations=", 0) == 0) {
      n = std::atol(a.c_str() + 13);
    } else {
      std::fprintf(stderr, "bench_ports: unknown argument '%s' (--width=512|256, --iterations=N)\n", a.c_str());
      return 2;
    }
  }
  if (n < 1 || (width != 512 && width != 256)) {
    std::fprintf(stderr, "bench_ports: --width must be 512 or 256 and --iterations at least 1\n");
    return 2;
  }
  if (width == 512 && !(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))) {
    std::fprintf(stderr, "bench_ports: this CPU has no AVX-512 F/DQ/VL/BW (Highway's AVX3): run with --width=256\n");
    return 2;
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "bench_ports: this CPU has no AVX2 and FMA\n");
    return 2;
  }
  std::printf("CPU: %s\n", [] {
    static char name[49] = {};
    unsigned regs[12];
    for (unsigned l = 0; l < 3; ++l)
      __asm__("cpuid" : "=a"(regs[4 * l]), "=b"(regs[4 * l + 1]), "=c"(regs[4 * l + 2]), "=d"(regs[4 * l + 3])
              : "a"(0x80000002u + l), "c"(0));
    std::memcpy(name, regs, 48);
    return name;
  }());
  if (width == 512) {
    Report<512>(n);
  } else {
    Report<256>(n);
  }
  return 0;
}
#else
#include <cstdio>
int main() {
  std::fprintf(stderr, "bench_ports: x86-64 only\n");
  return 0;
}
#endif

// bf16 products (ops/gemm_bf16.h) on every bf16 kernel this CPU has: against a double
// reference of the bf16-rounded inputs (tight: only float32 summation error) and of the float32
// inputs (loose: the documented rounding of the inputs), at every shape class and edge.
// Kernels the CPU lacks report their test case as skipped.
#include <catch2/catch.hpp>

#include <cpuid.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/simd_target.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "gemm_problem.h"
#include "skip_test_util.h"

namespace {

using attnkit::Bf16Kernel;
using attnkit::round_to_bf16;

using attnkit::testing::kSentinel;
using attnkit::testing::make_problem;
using attnkit::testing::Problem;

float at_a(const Problem& p, int64_t i, int64_t kk) { return p.ta ? p.a[kk * p.lda + i] : p.a[i * p.lda + kk]; }
float at_b(const Problem& p, int64_t kk, int64_t j) { return p.tb ? p.b[j * p.ldb + kk] : p.b[kk * p.ldb + j]; }

std::vector<float> run(const Problem& p, attnkit::Slice s = {}, int slices = 1) {
  std::vector<float> c = p.c;
  for (int i = 0; i < slices; ++i) {
    s.index = i, s.count = slices;
    attnkit::bf16_gemm_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta,
                             c.data(), p.ldc, s);
  }
  return c;
}

// got against double references: of the bf16-rounded inputs within float32 summation error
// (4·k·2⁻²⁴·Σ|a·b| + 2⁻²³·|β·c|), and of the float32 inputs within the rounding of the inputs
// (2·2⁻⁸·Σ|a·b|, each input off by at most half a bf16 ulp: 2⁻⁹ relative, plus the above).
void check(const Problem& p, const std::vector<float>& got) {
  int bad = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double rounded = 0.0, exact = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double a = at_a(p, i, kk), b = at_b(p, kk, j);
        rounded += static_cast<double>(round_to_bf16(at_a(p, i, kk))) * round_to_bf16(at_b(p, kk, j));
        exact += a * b;
        mag += std::fabs(a * b);
      }
      const double c0 = p.beta == 0.0f ? 0.0 : p.beta * static_cast<double>(p.c[i * p.ldc + j]);
      const double want_rounded = p.alpha * rounded + c0, want_exact = p.alpha * exact + c0;
      const double sum_tol = std::fabs(p.alpha) * (4.0 * (p.k + 1) * std::ldexp(1.0, -24) * mag) +
                             std::ldexp(1.0, -23) * std::fabs(c0) + 1e-30;
      const double input_tol = std::fabs(p.alpha) * 2.0 * std::ldexp(1.0, -8) * mag + sum_tol;
      const double g = got[i * p.ldc + j];
      if (!(std::fabs(g - want_rounded) <= sum_tol) || !(std::fabs(g - want_exact) <= input_tol)) {
        if (++bad <= 3)
          UNSCOPED_INFO("C[" << i << "," << j << "] = " << g << ", bf16-input reference " << want_rounded
                             << " (tol " << sum_tol << "), float32-input reference " << want_exact);
      }
    }
    for (int64_t j = p.n; j < p.ldc; ++j)
      if (got[i * p.ldc + j] != kSentinel) ++bad;
  }
  INFO("ta " << p.ta << " tb " << p.tb << " m " << p.m << " n " << p.n << " k " << p.k << " alpha " << p.alpha
             << " beta " << p.beta);
  CHECK(bad == 0);
}

// Runs `body` with every kernel forced in turn and restores the best one.
struct KernelScope {
  explicit KernelScope(Bf16Kernel k) { ok = attnkit::set_bf16_kernel(k); }
  ~KernelScope() { attnkit::set_bf16_kernel(best); }
  Bf16Kernel best = best_kernel();
  bool ok = false;
  static Bf16Kernel best_kernel() {
    for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16})
      if (attnkit::bf16_kernel_supported(k)) return k;
    return Bf16Kernel::kNone;
  }
};

void shapes_on(Bf16Kernel kernel) {
  const int64_t edges[] = {1, 2, 15, 16, 17, 31, 32, 33};
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : edges)
        for (int64_t n : edges)
          for (int64_t k : edges) {
            const float beta = (seed % 3 == 0) ? 0.0f : (seed % 3 == 1) ? 1.0f : -0.5f;
            const float alpha = (seed % 4 == 0) ? 0.75f : 1.0f;
            const Problem p = make_problem(ta, tb, m, n, k, alpha, beta, static_cast<int64_t>(seed % 3), seed);
            ++seed;
            check(p, run(p));
          }
  // Larger shapes: several tile pairs, column panels, k longer than a panel's budget.
  const int64_t big[][3] = {{100, 70, 300}, {257, 129, 65}, {64, 1040, 256}, {48, 40, 2100}, {130, 33, 97},
                            {1100, 40, 700}};  // (the last: several row blocks and k blocks)
  for (const auto& s : big)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Problem p = make_problem(ta, tb, s[0], s[1], s[2], 1.0f, seed % 2 ? 1.0f : 0.0f, 3, seed);
        ++seed;
        check(p, run(p));
      }
  (void)kernel;
}

}  // namespace

// First in this file: its forked child must be the first of the process to look at the CPU
// (CTest runs every case in a process of its own; run whole, Catch2 takes them in this order).
TEST_CASE("a refused AMX tile permission falls back to AVX512-BF16 with a note saying why") {
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool cpu_amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> 22) & 1) && ((d >> 24) & 1);
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  if (cpu_amx) __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if (!cpu_amx || ((xcr0_lo >> 17) & 3) != 3) ATTNKIT_SKIP("this CPU (or OS) has no AMX tile state");
  // Linux refuses the permission (ENOSPC) while a thread's signal stack is too small for the
  // tiles: a 4 KB one in a child process, which then reports what the library chose.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    static char small_stack[4096];
    stack_t ss{};
    ss.ss_sp = small_stack;
    ss.ss_size = sizeof small_stack;
    std::string report = sigaltstack(&ss, nullptr) != 0 ? std::string("sigaltstack failed")
                         : std::string(attnkit::bf16_kernel_name(attnkit::bf16_kernel())) + "|" +
                               attnkit::bf16_kernels_available() + "|" + attnkit::bf16_kernel_note();
    (void)!write(fds[1], report.data(), report.size());
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[512];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child: " << report);
  REQUIRE(WIFEXITED(status));
  REQUIRE(report.rfind("AVX512-BF16|AVX512-BF16, none|AMX-BF16 unused: Linux refused the AMX tile-data permission", 0) == 0);
  CHECK(report.find("arch_prctl ARCH_REQ_XCOMP_PERM") != std::string::npos);
  CHECK(report.find("signal stack") != std::string::npos);
  // This process was not refused.
  CHECK(attnkit::bf16_kernel_supported(Bf16Kernel::kAmx));
  CHECK(attnkit::bf16_kernel_note().empty());
}

TEST_CASE("bf16 rounding: nearest, ties to even, subnormals to zero, NaN and overflow kept") {
  CHECK(round_to_bf16(1.0f) == 1.0f);
  CHECK(round_to_bf16(-2.5f) == -2.5f);
  CHECK(round_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 1.0f);  // tie: to even (1.0)
  CHECK(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));  // tie: to even (up)
  CHECK(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(round_to_bf16(0.1f) == 0.10009765625f);
  CHECK(round_to_bf16(std::numeric_limits<float>::denorm_min()) == 0.0f);
  CHECK(std::signbit(round_to_bf16(-std::numeric_limits<float>::denorm_min())));
  CHECK(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));
  CHECK(round_to_bf16(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
}

TEST_CASE("bf16 kernels: names, what this CPU has, refusal of the unsupported") {
  CHECK(attnkit::bf16_kernel_supported(Bf16Kernel::kNone));
  const std::string avail = attnkit::bf16_kernels_available();
  INFO("available: " << avail << "; in use: " << attnkit::bf16_kernel_name(attnkit::bf16_kernel()));
  CHECK(avail.find("none") != std::string::npos);
  CHECK(attnkit::bf16_kernel() == KernelScope::best_kernel());
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    const bool supported = attnkit::bf16_kernel_supported(k);
    CHECK((avail.find(attnkit::bf16_kernel_name(k)) != std::string::npos) == supported);
    KernelScope scope(k);
    CHECK(scope.ok == supported);
    CHECK((attnkit::bf16_kernel() == k) == supported);
  }
  CHECK(attnkit::bf16_kernel() == KernelScope::best_kernel());
}

TEST_CASE("bf16 kernels run only on AVX-512 targets: below AVX3 the products run none, the choice kept") {
  const Bf16Kernel best = KernelScope::best_kernel();
  if (best == Bf16Kernel::kNone) ATTNKIT_SKIP("this CPU has no bf16 kernel");
  struct Restore {
    ~Restore() {
      attnkit::force_simd_target("");
      attnkit::use_best_bf16_kernel();
    }
  } restore;
  const Problem p = make_problem(false, true, 40, 33, 70, 1.0f, 0.5f, 1, 11);
  attnkit::force_simd_target("AVX2");
  REQUIRE(!attnkit::avx512_allowed());
  CHECK(attnkit::bf16_kernel() == Bf16Kernel::kNone);
  // A choice made below AVX3 is kept, but the products still run none: the same bits as none's.
  CHECK(attnkit::set_bf16_kernel(Bf16Kernel::kNone));
  const std::vector<float> none = run(p);
  for (Bf16Kernel k : {best, Bf16Kernel::kAvx512Bf16}) {
    INFO("chosen " << attnkit::bf16_kernel_name(k));
    CHECK(attnkit::set_bf16_kernel(k));
    CHECK(attnkit::bf16_kernel() == Bf16Kernel::kNone);
    const std::vector<float> got = run(p);
    CHECK(std::memcmp(none.data(), got.data(), none.size() * sizeof(float)) == 0);
  }
  attnkit::use_best_bf16_kernel();
  CHECK(attnkit::bf16_kernel() == Bf16Kernel::kNone);
  CHECK_THROWS_WITH(attnkit::force_bf16_kernel("avx512_bf16"),
                    Catch::Contains("bf16 kernel AVX512-BF16 needs AVX-512, but the SIMD target in use is AVX2"));
  attnkit::force_bf16_kernel("best");  // not a contradiction: the best there is, none
  CHECK(attnkit::bf16_kernel() == Bf16Kernel::kNone);
  // Back on the best target the choice holds again.
  attnkit::force_simd_target("");
  REQUIRE(attnkit::avx512_allowed());
  CHECK(attnkit::bf16_kernel() == best);
  attnkit::set_bf16_kernel(Bf16Kernel::kAvx512Bf16);
  attnkit::force_simd_target("AVX2");
  CHECK(attnkit::bf16_kernel() == Bf16Kernel::kNone);
  attnkit::force_simd_target("");
  CHECK(attnkit::bf16_kernel() == Bf16Kernel::kAvx512Bf16);
}

TEST_CASE("bf16 GEMM on AMX-BF16 against double references, every shape class and edge") {
  if (!attnkit::bf16_kernel_supported(Bf16Kernel::kAmx)) ATTNKIT_SKIP("this CPU has no AMX-BF16");
  KernelScope scope(Bf16Kernel::kAmx);
  shapes_on(Bf16Kernel::kAmx);
}

TEST_CASE("bf16 GEMM on AVX512-BF16 against double references, every shape class and edge") {
  if (!attnkit::bf16_kernel_supported(Bf16Kernel::kAvx512Bf16)) ATTNKIT_SKIP("this CPU has no AVX512-BF16");
  KernelScope scope(Bf16Kernel::kAvx512Bf16);
  shapes_on(Bf16Kernel::kAvx512Bf16);
}

TEST_CASE("bf16 GEMM without bf16 instructions (rounded inputs, float32 kernels) against double references") {
  KernelScope scope(Bf16Kernel::kNone);
  shapes_on(Bf16Kernel::kNone);
}

TEST_CASE("bf16 GEMM: the same bits whatever the slice count, and every kernel the same rounding of inputs") {
  for (Bf16Kernel kernel : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kNone}) {
    KernelScope scope(kernel);
    if (!scope.ok) continue;
    INFO("kernel " << attnkit::bf16_kernel_name(kernel));
    for (bool ta : {false, true}) {
      const Problem p = make_problem(ta, !ta, 150, 97, 70, 1.0f, 0.5f, 1, 7);
      const std::vector<float> one = run(p);
      for (int slices : {2, 3, 5}) {
        const std::vector<float> many = run(p, {}, slices);
        CHECK(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
      }
      const Problem wide = make_problem(ta, false, 20, 200, 40, 1.0f, 0.0f, 0, 8);
      const std::vector<float> w1 = run(wide), w3 = run(wide, {}, 3);
      CHECK(std::memcmp(w1.data(), w3.data(), w1.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("bf16 GEMM: k == 0 and alpha == 0 scale C by beta, beta == 0 never reads C") {
  for (Bf16Kernel kernel : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kNone}) {
    KernelScope scope(kernel);
    if (!scope.ok) continue;
    Problem p = make_problem(false, false, 20, 20, 0, 1.0f, 0.5f, 0, 3);
    std::vector<float> got = run(p);
    for (int64_t i = 0; i < 400; ++i) CHECK(got[i] == 0.5f * p.c[i]);
    p = make_problem(false, false, 20, 20, 40, 0.0f, 0.0f, 0, 4);  // C holds NaN
    got = run(p);
    for (int64_t i = 0; i < 400; ++i) CHECK(got[i] == 0.0f);
    p = make_problem(true, false, 40, 20, 40, 1.0f, 0.0f, 0, 5);  // NaN in C must not leak
    check(p, run(p));
  }
}

TEST_CASE("bf16 GEMM through the thread-parallel entry point") {
  const Problem p = make_problem(false, true, 300, 200, 100, 1.0f, 0.0f, 2, 11);
  std::vector<float> c = p.c;
  attnkit::bf16_gemm(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta, c.data(),
                     p.ldc);
  check(p, c);
  const std::vector<float> serial = run(p);
  CHECK(std::memcmp(serial.data(), c.data(), c.size() * sizeof(float)) == 0);
}

TEST_CASE("bf16 path of sgemm_epilogue_slice: bias, ReLU, mask, residual and column sums as the float32 epilogue") {
  for (Bf16Kernel kernel : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kNone}) {
    KernelScope scope(kernel);
    if (!scope.ok) continue;
    for (int variant = 0; variant < 5; ++variant) {
      INFO("kernel " << attnkit::bf16_kernel_name(kernel) << ", variant " << variant);
      const bool tb = variant == 4;
      Problem p = make_problem(false, tb, 100, 70, 300, 1.0f, variant == 3 ? 1.0f : 0.0f, 1, 20 + variant);
      std::vector<float> bias(70), mask(100 * 70), addend(100 * 70), colsum(70, 0.25f);
      std::mt19937 rng(variant);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (auto& x : bias) x = u(rng);
      for (auto& x : mask) x = u(rng);
      for (auto& x : addend) x = u(rng);
      attnkit::GemmEpilogue e;
      e.bias = bias.data();
      e.relu = variant == 0 || variant == 2;
      e.relu_last = variant == 2;
      if (variant == 1) e.mask = mask.data(), e.ldm = 70;
      if (variant >= 2) e.addend = addend.data(), e.ld_addend = 70;
      if (!tb) e.colsum = colsum.data(), e.colsum_accumulate = variant == 1;
      std::vector<float> got = p.c;
      attnkit::Slice s;
      s.bf16 = true;
      for (int slices : {1, 2}) {
        got = p.c;
        for (int i = 0; i < slices; ++i) {
          s.index = i, s.count = slices;
          attnkit::sgemm_epilogue_slice(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                                        p.beta, got.data(), p.ldc, e, s);
        }
        std::vector<float> want = run(p);  // the plain bf16 product, then the epilogue by hand
        int bad = 0;
        for (int64_t i = 0; i < p.m; ++i)
          for (int64_t j = 0; j < p.n; ++j) {
            float v = want[i * p.ldc + j] + bias[j];
            if (e.relu && !e.relu_last) v = v > 0.0f ? v : 0.0f;
            if (e.mask && !(mask[i * 70 + j] > 0.0f)) v = 0.0f;
            if (e.addend) v += addend[i * 70 + j];
            if (e.relu && e.relu_last) v = v > 0.0f ? v : 0.0f;
            if (std::memcmp(&v, &got[i * p.ldc + j], 4) != 0) ++bad;
          }
        CHECK(bad == 0);
      }
      REQUIRE(attnkit::sgemm_fuses_colsum(false, p.m, p.n, p.k));  // the shape is on the packed path
      if (!tb) {
        for (int64_t j = 0; j < p.n; ++j) {  // each column summed in k order (the second run's)
          float sum = 0.0f;
          if (variant == 1) {  // accumulated twice onto 0.25: the first call's sums, then the second's
            sum = 0.25f;
            for (int rep = 0; rep < 2; ++rep)
              for (int64_t kk = 0; kk < p.k; ++kk) sum += p.b[kk * p.ldb + j];
          } else {
            for (int64_t kk = 0; kk < p.k; ++kk) sum += p.b[kk * p.ldb + j];
          }
          CHECK(colsum[j] == sum);
        }
      }
    }
  }
}

TEST_CASE("bf16 GEMM: a stamped B is packed once per thread and reused while the stamp lasts") {
  // Stamps far from the executors' (which count up from 1).
  uint64_t stamp = std::numeric_limits<uint64_t>::max() - 1000;
  for (Bf16Kernel kernel : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16, Bf16Kernel::kNone}) {
    KernelScope scope(kernel);
    if (!scope.ok) continue;
    const bool packs = kernel != Bf16Kernel::kNone;  // (without bf16 instructions nothing is packed)
    // k = 300: one k block; k = 700: blocks of 8 tiles on AMX (kept at their offsets).
    for (int64_t k : {int64_t{300}, int64_t{700}}) {
      for (bool tb : {false, true}) {
        INFO("kernel " << attnkit::bf16_kernel_name(kernel) << ", k " << k << ", B transposed " << tb);
        Problem p = make_problem(false, tb, 70, 48, k, 1.0f, 0.0f, 1, 21);
        auto product = [&](uint64_t s, int64_t j0, int64_t j1) {
          std::vector<float> c = p.c;
          attnkit::bf16_gemm_block(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                                   p.beta, c.data(), p.ldc, 0, p.m, j0, j1, nullptr, s);
          return c;
        };
        const uint64_t s1 = ++stamp;
        const std::vector<float> plain = product(0, 0, p.n);
        const std::vector<float> first = product(s1, 0, p.n);  // packs B and keeps it
        CHECK(std::memcmp(plain.data(), first.data(), plain.size() * sizeof(float)) == 0);
        check(p, first);
        CHECK(std::memcmp(first.data(), product(s1, 0, p.n).data(), first.size() * sizeof(float)) == 0);
        // B changes under the same stamp (what a caller must not do): the kept form is what
        // the product multiplies by, so the result stays the first one's.
        for (float& x : p.b) x = -x;
        const std::vector<float> stale = product(s1, 0, p.n);
        CHECK((std::memcmp(first.data(), stale.data(), first.size() * sizeof(float)) == 0) == packs);
        // A new stamp, another block of columns, or the reuse turned off: B packed afresh.
        const std::vector<float> fresh = product(++stamp, 0, p.n);
        CHECK(std::memcmp(fresh.data(), product(0, 0, p.n).data(), fresh.size() * sizeof(float)) == 0);
        check(p, fresh);
        const std::vector<float> part = product(s1, 16, p.n);
        for (int64_t i = 0; i < p.m; ++i)
          for (int64_t j = 16; j < p.n; ++j) CHECK(part[i * p.ldc + j] == fresh[i * p.ldc + j]);
        attnkit::set_bf16_pack_cache(false);
        const std::vector<float> off = product(s1, 0, p.n);
        attnkit::set_bf16_pack_cache(true);
        CHECK(std::memcmp(fresh.data(), off.data(), fresh.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("bf16 GEMM: more stamped operands than the cache keeps still multiply by their own values") {
  if (KernelScope::best_kernel() == Bf16Kernel::kNone) ATTNKIT_SKIP("this CPU has no bf16 kernel (nothing is packed)");
  uint64_t stamp = std::numeric_limits<uint64_t>::max() - 2000;
  // 80 weights (the cache keeps 64 a thread), two of them larger than the rest, over 3 runs
  // whose weights change between runs, each run taking them in another order.
  std::vector<Problem> ps;
  for (int w = 0; w < 80; ++w)
    ps.push_back(make_problem(false, w % 2 == 1, 40, w % 40 == 7 ? 96 : 32, 64, 1.0f, 0.0f, 0, 100 + w));
  for (int run = 0; run < 3; ++run) {
    const uint64_t s = ++stamp;
    for (int chunk = 0; chunk < 2; ++chunk) {
      for (size_t i = 0; i < ps.size(); ++i) {  // each run in another order: entries evicted
        const size_t w = (i + 24 * static_cast<size_t>(run)) % ps.size();
        const Problem& p = ps[w];
        std::vector<float> kept = p.c, plain = p.c;
        attnkit::bf16_gemm_block(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                                 p.beta, kept.data(), p.ldc, 0, p.m, 0, p.n, nullptr, s);
        attnkit::bf16_gemm_block(p.ta, p.tb, p.m, p.n, p.k, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                                 p.beta, plain.data(), p.ldc, 0, p.m, 0, p.n, nullptr, 0);
        INFO("run " << run << ", chunk " << chunk << ", weight " << w);
        REQUIRE(std::memcmp(kept.data(), plain.data(), kept.size() * sizeof(float)) == 0);
      }
    }
    for (Problem& p : ps)
      for (float& x : p.b) x *= 0.5f;  // the update between runs
  }
}

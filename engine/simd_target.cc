#include "engine/simd_target.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "engine/error.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "hwy/highway.h"
#include "hwy/targets.h"

namespace attnkit {
namespace {

std::vector<int64_t> target_bits(int64_t mask) {
  std::vector<int64_t> out;  // lowest bit = best target
  for (int64_t m = mask; m != 0; m &= m - 1) out.push_back(m & ~(m - 1));
  return out;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Targets force_simd_target disabled (hwy::DisableTargets has no getter).
int64_t g_disabled = 0;

void disable(int64_t mask) {
  g_disabled = mask;
  hwy::DisableTargets(mask);
}

}  // namespace

std::vector<std::string> compiled_simd_targets() {
  std::vector<std::string> out;
  for (int64_t t : target_bits(HWY_TARGETS)) out.push_back(hwy::TargetName(t));
  return out;
}

std::vector<std::string> supported_simd_targets() {
  // What the CPU supports, whatever force_simd_target disabled. (DisableTargets again after
  // asking: in Highway 1.0.3 SupportedTargets() also re-chooses the dispatch target from every
  // target the CPU has, which would undo a forced one.)
  const int64_t disabled = g_disabled;
  hwy::DisableTargets(0);
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  hwy::DisableTargets(disabled);
  std::vector<std::string> out;
  for (int64_t t : target_bits(supported)) out.push_back(hwy::TargetName(t));
  return out;
}

void force_simd_target(const std::string& name) {
  const std::string wanted = upper(name);
  const int64_t before = g_disabled;
  disable(0);
  if (wanted.empty() || wanted == "BEST") {
    set_avx512_allowed(true);
    return;
  }
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  disable(before);  // unchanged unless the name is usable
  for (int64_t t : target_bits(HWY_TARGETS)) {
    if (upper(hwy::TargetName(t)) != wanted) continue;
    if (!(supported & t)) {
      throw Error("SIMD target " + wanted + " is compiled in but this CPU does not support it (supported: " +
                  joined(supported_simd_targets()) + ")");
    }
    // Every better target (a lower bit) is disabled; the chosen one is then the best left.
    // Below AVX3 the bf16 kernels (AVX-512 code of their own) are off too: bf16_kernel() is none.
    disable(t - 1);
    set_avx512_allowed(avx512_target_in_use());
    return;
  }
  throw Error("unknown SIMD target '" + name + "' (compiled in: " + joined(compiled_simd_targets()) +
              "; supported by this CPU: " + joined(supported_simd_targets()) + ")");
}

void force_bf16_kernel(const std::string& name) {
  std::string wanted;
  for (char ch : upper(name))
    if (ch != '-' && ch != '_') wanted += ch;
  if (wanted.empty() || wanted == "BEST") {
    use_best_bf16_kernel();
    return;
  }
  Bf16Kernel kernel;
  if (wanted == "AMX" || wanted == "AMXBF16") {
    kernel = Bf16Kernel::kAmx;
  } else if (wanted == "AVX512BF16") {
    kernel = Bf16Kernel::kAvx512Bf16;
  } else if (wanted == "NONE" || wanted == "F32" || wanted == "FLOAT32") {
    kernel = Bf16Kernel::kNone;
  } else {
    throw Error("unknown bf16 kernel '" + name + "' (choices: amx, avx512_bf16, none; this machine has: " +
                bf16_kernels_available() + ")");
  }
  if (!bf16_kernel_supported(kernel))
    throw Error(std::string("bf16 kernel ") + bf16_kernel_name(kernel) + " is not supported by this CPU (it has: " +
                bf16_kernels_available() + ")");
  // Its instructions are AVX-512 ones: not under a SIMD target forced below AVX3.
  if (kernel != Bf16Kernel::kNone && !avx512_allowed())
    throw Error(std::string("bf16 kernel ") + bf16_kernel_name(kernel) + " needs AVX-512, but the SIMD target in use is " +
                simd_target_name() + " (ATTNKIT_SIMD_TARGET or force_simd_target chose it; the bf16 kernel then is none)");
  set_bf16_kernel(kernel);
}

namespace {
// Sets a choice by its index in `names` plus one (0 = E::kCpuDefault); each enum in ops/gemm.h
// lists its values in the order of the table's names.
template <class E, void (*Set)(E)>
void set_by_index(size_t index) {
  Set(static_cast<E>(index));
}
static_assert(static_cast<int>(SmallGemmValues::kSplit) == 1 && static_cast<int>(SmallGemmValues::kBroadcast) == 2);
static_assert(static_cast<int>(Avx512Width::kFull) == 1 && static_cast<int>(Avx512Width::kHalves) == 2);
static_assert(static_cast<int>(TenColumns::kWide) == 1 && static_cast<int>(TenColumns::kQuads) == 2);

const KernelChoice& choice_of(const char* variable) {
  for (const KernelChoice& choice : avx512_kernel_choices())
    if (std::string(choice.variable) == variable) return choice;
  throw Error(std::string("no AVX-512 kernel choice ") + variable);  // (a typo in this file)
}
}  // namespace

void KernelChoice::force(const std::string& name) const {
  const std::string wanted = upper(name);
  if (wanted.empty() || wanted == "BEST") return set(0);
  std::string choices;
  for (size_t i = 0; i < names.size(); ++i) {
    if (wanted == upper(names[i])) return set(i + 1);
    choices += std::string(names[i]) + ", ";
  }
  throw Error("unknown " + std::string(what) + " '" + name + "' (choices: " + choices + "best)");
}

std::string KernelChoice::in_use() const {
  return std::string(current()) + (std::getenv(variable) ? std::string(" (") + variable + ")" : "");
}

const std::vector<KernelChoice>& avx512_kernel_choices() {
  static const std::vector<KernelChoice> table = {
      {"ATTNKIT_SMALL_GEMM", "small products' A values (AVX-512)", "way for the small products to get A's values",
       {"split", "broadcast"}, gemm_small_values_name, set_by_index<SmallGemmValues, set_gemm_small_values>},
      {"ATTNKIT_AVX512_WIDTH", "AVX-512 core width (products shaped for it)", "width of the AVX-512 core",
       {"full", "halves"}, gemm_avx512_width_name, set_by_index<Avx512Width, set_gemm_avx512_width>},
      {"ATTNKIT_TEN_COLUMNS", "products of 9 or 10 columns (AVX-512)", "layout of the 9/10-column products",
       {"wide", "quads"}, gemm_ten_columns_name, set_by_index<TenColumns, set_gemm_ten_columns>},
  };
  return table;
}

void force_small_gemm_values(const std::string& name) { choice_of("ATTNKIT_SMALL_GEMM").force(name); }
void force_avx512_width(const std::string& name) { choice_of("ATTNKIT_AVX512_WIDTH").force(name); }
void force_ten_columns(const std::string& name) { choice_of("ATTNKIT_TEN_COLUMNS").force(name); }

void apply_simd_target_env() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    // The SIMD target first: force_bf16_kernel checks the kernel against it.
    std::vector<std::pair<const char*, std::function<void(const std::string&)>>> order = {
        {"ATTNKIT_SIMD_TARGET", force_simd_target}, {"ATTNKIT_BF16", force_bf16_kernel}};
    for (const KernelChoice& choice : avx512_kernel_choices())
      order.emplace_back(choice.variable, [&choice](const std::string& name) { choice.force(name); });
    for (const auto& [var, force] : order) {
      const char* value = std::getenv(var);
      if (!value) continue;
      try {
        force(value);
      } catch (const Error& e) {
        failure = std::string(var) + "=" + value + ": " + e.what();
        return;
      }
    }
  });
  if (!failure.empty()) throw Error(failure);
}

}  // namespace attnkit

// Runs a test body once per Highway target this machine supports (AVX2, SSE4, …, scalar),
// forcing the runtime dispatch to that target, so every compiled kernel variant is checked
// (those at or below ATTNKIT_SIMD_TARGET when it is set).
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "engine/simd_target.h"
#include "hwy/targets.h"

namespace attnkit::test {

// Restores normal dispatch even when a REQUIRE throws out of the body.
struct ScopedTarget {
  explicit ScopedTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~ScopedTarget() { hwy::SetSupportedTargetsForTest(0); }
};

template <class Body>
void for_each_simd_target(Body&& body) {
  apply_simd_target_env();  // ATTNKIT_SIMD_TARGET=AVX2 leaves out the better targets
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    ScopedTarget scoped(target);
    INFO("SIMD target " << hwy::TargetName(target));
    body(std::string(hwy::TargetName(target)));
  }
}

}  // namespace attnkit::test

// Skipping a test case whose tool (python3 with numpy, Chromium, /dev/full) is missing, so that
// CTest reports it as skipped, not passed: the case prints "ATTNKIT_SKIPPED: <reason>" (as a
// Catch2 warning, which the console reporter always prints) and returns, and tests/CMakeLists.txt
// sets SKIP_REGULAR_EXPRESSION "ATTNKIT_SKIPPED:" on every test. Use it before any check, in a
// test case of its own, so that a skip never hides a failure.
#pragma once
#include <catch2/catch.hpp>

#define ATTNKIT_SKIP(reason)                 \
  do {                                       \
    WARN("ATTNKIT_SKIPPED: " << reason);     \
    return;                                  \
  } while (false)

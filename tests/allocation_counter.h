// Counts every C++ heap allocation of a test program: replaces the global operator new and
// delete (all forms). Include it in exactly one .cc of a test program (each tests/test_*.cc is
// its own program), before anything else that allocates.
#pragma once
#include <atomic>
#include <cstdlib>
#include <new>

static std::atomic<long> g_allocations{0};
static std::atomic<bool> g_abort_on_allocation{false};  // debugging aid: set to find the caller
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (g_abort_on_allocation.load(std::memory_order_relaxed)) std::abort();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
// The nothrow forms too (Catch2 uses them): left to the runtime, their blocks would come from
// its operator new but reach std::free here (AddressSanitizer: alloc-dealloc-mismatch).
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

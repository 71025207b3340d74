// The small path's table of tile functions for one 256-bit vector a row (at most 8 columns), B not
// transposed: kSmallTilesNN256x1, read by SmallTileNNFor (ops/gemm_small-inl.h). A file of its own
// so that the GEMM's AVX-512 tiles compile in parallel.
#include "ops/gemm.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gemm_small_nn_256x1.cc"
#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/gemm_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {
#if ATTNKIT_HAVE_SMALL_GEMM
ATTNKIT_DEFINE_SMALL_TILES_NN(kSmallTilesNN256x1, hn::Full256<float>, 1)
#endif
}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

// The body of the four ops/gemm_small_nn_*.cc files, each of which defines one of the small
// path's tables of tile functions (SmallTileNNFor, ops/gemm_small-inl.h) so that the GEMM's
// AVX-512 tiles compile in parallel. Before including this file (no include guard: Highway's
// foreach_target.h includes the .cc, and so this file, once per target), the .cc defines
//   ATTNKIT_SMALL_NN_TABLE    the table's name (declared extern in ops/gemm_small-inl.h),
//   ATTNKIT_SMALL_NN_VEC      the vector type of its tiles (DF, or hn::Full256<float>),
//   ATTNKIT_SMALL_NN_VECTORS  the vectors a row,
//   HWY_TARGET_INCLUDE        the .cc's own path.
#include "ops/gemm.h"

#include "hwy/foreach_target.h"  // before highway.h
#include "hwy/highway.h"
#include "ops/gemm_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::HWY_NAMESPACE {
#if ATTNKIT_HAVE_SMALL_GEMM
ATTNKIT_DEFINE_SMALL_TILES_NN(ATTNKIT_SMALL_NN_TABLE, ATTNKIT_SMALL_NN_VEC, ATTNKIT_SMALL_NN_VECTORS)
#endif
}  // namespace attnkit::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

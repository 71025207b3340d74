// kSmallTilesNN256x1: the small path's tile functions for one 256-bit vector a row (at most 8 columns),
// B not transposed.
// (The body, shared by the four ops/gemm_small_nn_*.cc, is ops/gemm_small_nn_table-inl.h.)
#define ATTNKIT_SMALL_NN_TABLE kSmallTilesNN256x1
#define ATTNKIT_SMALL_NN_VEC hn::Full256<float>
#define ATTNKIT_SMALL_NN_VECTORS 1
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gemm_small_nn_256x1.cc"
#include "ops/gemm_small_nn_table-inl.h"

// kSmallTilesNNx4: the small path's tile functions for four full vectors a row (short k),
// B not transposed.
// (The body, shared by the four ops/gemm_small_nn_*.cc, is ops/gemm_small_nn_table-inl.h.)
#define ATTNKIT_SMALL_NN_TABLE kSmallTilesNNx4
#define ATTNKIT_SMALL_NN_VEC DF
#define ATTNKIT_SMALL_NN_VECTORS 4
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gemm_small_nn_x4.cc"
#include "ops/gemm_small_nn_table-inl.h"

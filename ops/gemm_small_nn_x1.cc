// kSmallTilesNNx1: the small path's tile functions for one full vector a row,
// B not transposed.
// (The body, shared by the four ops/gemm_small_nn_*.cc, is ops/gemm_small_nn_table-inl.h.)
#define ATTNKIT_SMALL_NN_TABLE kSmallTilesNNx1
#define ATTNKIT_SMALL_NN_VEC DF
#define ATTNKIT_SMALL_NN_VECTORS 1
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/gemm_small_nn_x1.cc"
#include "ops/gemm_small_nn_table-inl.h"

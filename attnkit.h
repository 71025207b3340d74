// attnkit: small attention models on the CPU. The one header a user includes:
//   #include <attnkit/attnkit.h>
#pragma once

#include "ops/adam.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/parallel.h"
#include "ops/softmax.h"

// attnkit: small attention models on the CPU. The one header a user includes:
//   #include <attnkit/attnkit.h>
#pragma once

// Kernels on raw pointers.
#include "ops/adam.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/finite.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "ops/layernorm.h"
#include "ops/math.h"
#include "ops/parallel.h"
#include "ops/softmax.h"

// The engine: graph, modules, executor, optimizer, files.
#include "engine/checkpoint.h"
#include "engine/collective.h"
#include "engine/error.h"
#include "engine/executor.h"
#include "engine/functional.h"
#include "engine/graph.h"
#include "engine/modules.h"
#include "engine/npy.h"
#include "engine/npz.h"
#include "engine/optimizer.h"
#include "engine/planner.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "engine/simd_target.h"

// The lesson models, task data, attention rollout and the trainer.
#include "models/lessons.h"
#include "models/rollout.h"
#include "models/tasks.h"
#include "models/predictor.h"
#include "models/trainer.h"

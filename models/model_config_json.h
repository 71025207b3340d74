// A model configuration as a JSON object, and back: the one list of ModelConfig's saved
// fields, used by the checkpoint's "config." entries (models/checkpoint_config.h) and by the
// run files that describe the model (metrics.json, meta.json).
//
//   {"task": "neighbor-sum", "vocab": 10, "classes": 10, "seq_len": 10, "d_model": 32,
//    "heads": 2, "layers": 1, "positions": true, "causal": false, "head": "mlp",
//    "mlp_hidden": 128, "pre_norm": false, "block_mlp": 0}
//
// fold_embedding_projections and fuse_elementwise (how the graph computes, not what) are not
// part of it; model_config_from_json leaves them at their defaults.
//
// Separate from checkpoint_config.h so that attnkit.h does not pull in nlohmann/json.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "lessons.h"

namespace attnkit {

// The object above: integers as JSON integers, booleans as JSON booleans, task and head as
// strings ("mlp" or "layernorm-linear").
nlohmann::json model_config_to_json(const ModelConfig& config);

// Reads that object: every field required, of its JSON type, no unknown fields; the result
// passes validate_config. Throws FileError naming `source` (e.g. the file) and the field:
//   "runs/x/metrics.json: model config field 'd_model' is "32", not an integer".
ModelConfig model_config_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace attnkit

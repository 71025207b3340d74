// The "config." entries of a checkpoint (engine/checkpoint.h): the model configuration and
// the training options stored with the parameters, and the check of a stored configuration
// against the checkpoint's tensors before a model of that size is built.
//
// Entries are strings: integers in decimal, booleans "true"/"false", the head "mlp" or
// "layernorm-linear", the learning rate with 9 significant digits, snapshot steps
// comma-separated or "none", the data path or "generated" and, for data from a file,
// "data_fnv1a": its task_data_fingerprint in 16 hex digits (absent in older checkpoints).
// The model's keys are those of model_config_to_json (models/model_config_json.h in the source
// tree; the CLI's, not installed).
#pragma once
#include <map>
#include <string>

#include "../engine/safetensors.h"
#include "lessons.h"

namespace attnkit {

struct TrainerOptions;  // models/trainer.h

// The checkpoint "config." entries of a model and its training, and back.
std::map<std::string, std::string> config_entries(const ModelConfig& model, const TrainerOptions& options);

// Rebuilds the model configuration from read_checkpoint_metadata(path) and checks its sizes
// against the tensors in the header of the checkpoint file `path` (check_config_against_tensors),
// so a config that asks for more than the file holds fails here, before anything is allocated.
// Any task name loads (a library model may have its own). Throws FileError naming `path`, the
// entry and its value for a missing, malformed or invalid entry, or the entry and the tensor
// for a size that disagrees.
ModelConfig model_config_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path);

// Where the task's rule is needed (its generated data, its targets: eval, --resume), a
// FileError naming `path` and 'config.task' unless c.task is one of known_tasks().
void require_known_task(const ModelConfig& c, const std::string& path);

// The training options stored with it (epochs, batch_size, lr, seed, sizes, snapshot steps,
// data), each within the command line's range (e.g. epochs in [0, 10^9], lr positive and
// finite, sample inside the validation set); a FileError names `path`, the entry and its value.
TrainerOptions trainer_options_from_metadata(const std::map<std::string, std::string>& meta, const std::string& path);

// Checks that the parameters a model of `config` declares are exactly the parameter tensors
// of a checkpoint (header from read_safetensors_header(path); "optimizer." tensors are left to
// load_checkpoint), every dimension equal to the config field it comes from. Throws FileError
// naming `path`, the config field and the tensor, e.g.
//   "m.safetensors: config d_model = 1000000000 but tensor 'tok.weight' has shape [10, 32]
//    (dimension 1 is d_model)".
// Needs no memory in proportion to the config's sizes. The one size no parameter holds is
// seq_len without a position embedding.
void check_config_against_tensors(const ModelConfig& config, const SafetensorsHeader& header,
                                  const std::string& path);

}  // namespace attnkit

// Training checkpoints: parameters, Adam moments and the training position in one
// safetensors file, so a run can be resumed bit for bit.
//
// Layout (all tensors F32, little-endian, shape = the parameter's shape in the graph):
//   "<param name>"            one tensor per graph parameter, e.g. "tok.weight"
//   "optimizer.m.<name>"      Adam first moment   (only when saved with an Adam)
//   "optimizer.v.<name>"      Adam second moment  (only when saved with an Adam)
// "__metadata__" (decimal strings):
//   "attnkit.format" = "1", "attnkit.step", "attnkit.epoch", "attnkit.batch_in_epoch",
//   "attnkit.rng" = four uint64 separated by single spaces, "config.<key>" = config entries.
// The parameters are plain safetensors tensors, loadable by Python safetensors / numpy.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "executor.h"
#include "optimizer.h"

namespace attnkit {

// Everything needed to resume exactly, besides parameters and moments.
struct TrainingState {
  int64_t step = 0;                        // optimizer steps taken (Adam t)
  int64_t epoch = 0, batch_in_epoch = 0;   // data position
  std::array<uint64_t, 4> rng_state{};     // data-order RNG (Rng::state())
  std::map<std::string, std::string> config;  // model/task config, stored as "config.<key>"
};

// Writes the checkpoint atomically (a failed save leaves an existing file at `path` intact).
// With an Adam, its moments are saved and "attnkit.step" is adam->steps() (the optimizer is the
// authority on t); without one, st.step is written. Throws FileError on any failure, or Error if
// the Adam's size does not match the executor's parameter count. Config keys must be non-empty.
void save_checkpoint(const std::string& path, const Executor& ex, const Adam* adam,
                     const TrainingState& st);

// Loads a checkpoint into ex (parameters), adam (moments and step count; may be nullptr, in
// which case optimizer tensors in the file are ignored) and st (step, data position, RNG,
// config). Validates everything against ex.graph() first and throws FileError naming the file
// and the tensor for a missing or unexpected tensor, a wrong dtype, a shape that differs from
// the parameter's, a NaN or Inf in a parameter or moment (the message gives the flat position
// and the index), or missing/garbled metadata. On any error nothing in ex, adam or st changes.
// `check`, when given, sees the file's TrainingState (step, data position, RNG state, config)
// after the metadata is parsed and before anything changes; what it throws is passed on, with
// nothing changed (e.g. a trainer's check that the data position fits its training set).
void load_checkpoint(const std::string& path, Executor& ex, Adam* adam, TrainingState& st,
                     const std::function<void(const TrainingState&)>& check = {});

// The file's whole "__metadata__" (e.g. to rebuild the model from its "config." entries
// before loading). Throws FileError if the file is not a valid safetensors file or has no
// "attnkit.format" = "1".
std::map<std::string, std::string> read_checkpoint_metadata(const std::string& path);

}  // namespace attnkit

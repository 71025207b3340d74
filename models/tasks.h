// The tasks' data: sequences x [N, T] of tokens and per-position targets y [N, T] (−1 = no
// answer, ignored by the loss and by accuracy), generated from a seed with attnkit's own Rng,
// or read from a .npz file made by numpy.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "../engine/rng.h"
#include "lessons.h"

namespace attnkit {

struct Dataset {
  int64_t size = 0, seq_len = 0;
  std::vector<int32_t> x, y;  // row-major [size, seq_len]; y empty: no targets (every one −1)
  const int32_t* tokens(int64_t i) const { return x.data() + i * seq_len; }
  bool has_targets() const { return !y.empty(); }
  const int32_t* targets(int64_t i) const { return y.data() + i * seq_len; }  // (has_targets())
};

struct TaskData {
  Dataset train, val;
};

// The lesson's training settings of a task; the CLI's defaults.
struct TrainingConfig {
  int64_t epochs = 8;
  int64_t batch_size = 64;
  float lr = 0.01f;
  int64_t train_size = 3000, val_size = 500;
  std::vector<int64_t> snapshot_steps;  // steps at which the sample's attention is saved
};
TrainingConfig lesson_training(const std::string& task);

// The targets of one sequence under the task's rule (the task of config.task; "reversal-large"
// follows "reversal"):
//   neighbor-sum  y_i = (x_{i-1} + x_{i+1}) mod V, indices around the ring
//   duplicates    y_i = 1 if x_i occurs at another position, else 0
//   reversal      y_i = x_{T-1-i}
//   induction     y_i = x_{j+1} where j < i is the latest earlier position with x_j = x_i;
//                 −1 (no answer) when x_i has not occurred before
void task_targets(const ModelConfig& config, const int32_t* x, int32_t* y);

// One random sequence of the task (uniform tokens; induction: see generate_induction).
void task_sequence(const ModelConfig& config, Rng& rng, int32_t* x);

// An induction sequence of length T over V ≥ T tokens: a segment of L ~ U{2..T/2} tokens is
// seen once and later repeated, everything else is a token seen nowhere else:
//   u = T − L distinct tokens drawn uniformly without replacement,
//   s ~ U{0..T−2L} (segment start), d ~ U{s+L..T−L} (where the repeat starts),
//   x = u[0:d] ++ u[s:s+L] ++ u[d:T−L].
// So exactly the positions d..d+L−1 have an answer, and it is determined by the sequence.
void generate_induction(int64_t seq_len, int64_t vocab, Rng& rng, int32_t* x);

// n sequences and their targets.
Dataset generate_dataset(const ModelConfig& config, int64_t n, Rng& rng);

// Training and validation sets from a seed: Rng(seed) draws the training set, then the
// validation set, as the lesson draws them from one generator.
TaskData generate_task_data(const ModelConfig& config, int64_t train_size, int64_t val_size,
                            uint64_t seed);

// Checks a dataset against a model: shape [N, T] with N ≥ 1, tokens in [0, vocab), targets in
// [0, classes) or −1. Throws Error naming `what` (e.g. "data.npz: 'X_train'"), the largest
// (or negative) value, the first bad value with its index, and config_source, the other party:
//   "data.npz: 'X_train' has tokens up to 15 but the checkpoint runs/x/model.safetensors has
//    vocab 10 (first outside the vocabulary [0, 10): token 12 at [0, 3])".
void validate_dataset(const Dataset& d, const ModelConfig& config, const std::string& what,
                      const std::string& config_source = "the model");

// Reads X_train, Y_train, X_val, Y_val (integer arrays [N, T], written by np.savez or
// np.savez_compressed) and validates them against config, which comes from config_source
// (e.g. "the checkpoint runs/x/model.safetensors" when resuming). Throws FileError / Error
// naming the file, the array and config_source; also when Y_train or Y_val is all −1 (nothing
// to train on, or an accuracy of 0 of 0 positions).
TaskData load_task_data(const std::string& path, const ModelConfig& config,
                        const std::string& config_source = "the model");

// FNV-1a (engine/hash.h) of both sets' sizes, tokens and targets as int32: what identifies the
// data a model trained on, whatever dtype or compression the file used.
uint64_t task_data_fingerprint(const TaskData& data);

// Sequences to evaluate or run: an .npz with X (or X_val) and optionally Y (or Y_val), or an
// .npy of tokens [N, T]; integer arrays, checked against config like load_task_data (errors
// name the file, the array, the row and the position). Without targets y is empty
// (Dataset::has_targets() false; a caller that scores fills it).
Dataset load_sequences(const std::string& path, const ModelConfig& config, const std::string& config_source);

// Accuracy counts over the positions that have an answer (target ≥ 0).
struct Accuracy {
  int64_t correct = 0, total = 0;
  double value() const { return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0; }
  // Counts n positions' predictions against their targets (a target < 0: no answer, not counted).
  void add(const int32_t* predictions, const int32_t* targets, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if (targets[i] < 0) continue;
      ++total;
      correct += predictions[i] == targets[i];
    }
  }
};

// The score of always answering the class most common among a data set's targets (-1s not
// counted; ties go to the smaller class): the bar a model must clear — the lesson's "always say
// «repeat»" for duplicates. cls is -1 when no position has a target.
struct MajorityBaseline {
  int32_t cls = -1;
  Accuracy accuracy;
};
MajorityBaseline majority_baseline(const Dataset& d);

}  // namespace attnkit

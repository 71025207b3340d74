// Training a task model the way lesson 004 does: Adam, epochs that each reshuffle the training
// set and train on the final partial batch too, loss per step, validation accuracy per epoch,
// snapshots of one fixed sequence's attention at chosen steps, and checkpoints that resume
// bit for bit (training 8 epochs equals training 4 and resuming to 8, same thread count).
//
// Randomness, all from one seed: parameters from Executor seed `seed`; generated data from
// Rng(seed) (models/tasks.h); the order of the training set from Rng(seed + 1).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../engine/checkpoint.h"
#include "../engine/collective.h"
#include "../engine/executor.h"
#include "../engine/optimizer.h"
#include "../engine/rng.h"
#include "checkpoint_config.h"  // config_entries, model_config_from_metadata, …
#include "lessons.h"
#include "tasks.h"

namespace attnkit {

struct TrainerOptions {
  TrainingConfig training;
  uint64_t seed = 0;
  int threads = 1;
  // Products in float32 or bf16 (ExecutorOptions::precision). Checkpoints are float32 either
  // way, so a run can resume in the other precision.
  Precision precision = Precision::kF32;
  // Batch entries per chunk of a training step (ExecutorOptions::train_chunk_rows: -1 chosen
  // by the arena's size, 0 whole batches). Chunks change only the order of sums over rows.
  int64_t train_chunk_rows = -1;
  // Data-parallel shards of each step's batch inside the process (ExecutorOptions::
  // train_shards; 0 or 1: off). Results depend on it (stored in checkpoints), not on threads.
  int train_shards = 0;
  int64_t sample = 0;  // validation sequence whose attention is snapshotted
  std::string data_path;  // the .npz the data came from ("" = generated from the seed)
  // task_data_fingerprint of that file's data, 16 hex digits ("" = generated data, or a
  // checkpoint older than the entry). The Trainer sets it from its data; resume() refuses a
  // checkpoint whose recorded fingerprint differs (the file changed since).
  std::string data_fingerprint;
  // After every step, look for NaN/Inf in the loss, the gradients and the updated parameters
  // and stop with a NumericError naming the step and the tensor (costs ~1% of a lesson step).
  bool check_finite = true;
  // Time every node of the training steps (not the evaluations, nor the first step, which
  // starts threads and touches memory first): executor().profile_report().
  bool profile = false;
  // Data-parallel training over a group of processes (nullptr, or a group of one: this process
  // alone). Every process builds the same model from the same seed and data and takes its
  // contiguous share of every global batch of training.batch_size rows (which must divide by
  // the group's size); the gradients are summed (weighted by each share's answered positions,
  // so the sum is the whole batch's mean-loss gradient) and every process applies the same
  // Adam update. Validation is shared out too. The group must outlive the Trainer.
  Collective* collective = nullptr;
};

struct StepReport {
  int64_t step;               // optimizer steps taken, this one included
  int64_t total_steps;        // at the end of training
  int64_t epoch;              // 0-based
  float loss;
};

struct EpochReport {
  int64_t epoch;              // 0-based, just finished
  int64_t step;               // optimizer steps taken so far
  double mean_loss;           // over this epoch's steps
  double val_accuracy;
  double steps_per_second;    // this epoch's training steps
};

// The attention of one sequence and the model's answers.
struct SequenceResult {
  std::vector<float> attention;     // [layers, heads, T, T]
  std::vector<int32_t> predictions; // [T]: argmax over classes
};

// A built model with its executor: evaluation and single-sequence runs (also for a model
// loaded from a checkpoint, without training).
class ModelRunner {
 public:
  // Throws Error naming the sizes when the model does not fit in memory.
  ModelRunner(const ModelConfig& config, int64_t max_batch, int threads, uint64_t seed, bool with_backward,
              Precision precision = Precision::kF32, int64_t train_chunk_rows = -1, int train_shards = 0);
  // Loads the parameters (and, with an Adam, its moments) from a checkpoint of this model.
  TrainingState load(const std::string& checkpoint_path, Adam* adam = nullptr,
                     const std::function<void(const TrainingState&)>& check = {});

  // Accuracy over the positions with an answer; predictions (optional) gets [size, T].
  Accuracy evaluate(const Dataset& d, std::vector<int32_t>* predictions = nullptr);
  // Attention maps and predictions of one sequence of T tokens (checked against the vocab).
  SequenceResult run_sequence(const int32_t* tokens);
  // Copies rows of d into the inputs (targets −1 when with_targets is false).
  void load_batch(const Dataset& d, const int64_t* rows, int64_t n, bool with_targets);

  const Model& model() const { return model_; }
  const ModelConfig& config() const { return model_.config; }
  Executor& executor() const { return *executor_; }

 private:
  Model model_;
  std::unique_ptr<Executor> executor_;
};

class Trainer {
 public:
  // data.val may be empty (size 0): validation accuracy is then reported as 0. The graph (and
  // so the arena, and the evaluation batches) is sized for min(batch_size, training set size)
  // sequences, the largest batch training runs.
  Trainer(const ModelConfig& config, const TrainerOptions& options, TaskData data);

  // Loads parameters, Adam moments and the data position from a checkpoint of the same model.
  // A checkpoint that records the fingerprint of other data than this Trainer's (the .npz
  // changed since) is a FileError naming the checkpoint and the data file.
  void resume(const std::string& checkpoint_path);

  // Trains until options.training.epochs epochs are done (returns true), or until `stop`,
  // asked after every step, says so (returns false; save() then resumes after that step).
  // In a data-parallel group `stop` is asked before each step and its answer summed with the
  // step's gradients: when any rank says yes, every rank stops after that step.
  // Callbacks may be empty; on_step may call save().
  bool train(const std::function<void(const StepReport&)>& on_step = {},
             const std::function<void(const EpochReport&)>& on_epoch = {},
             const std::function<bool()>& stop = {});

  Accuracy evaluate(const Dataset& d, std::vector<int32_t>* predictions = nullptr) {
    return runner_.evaluate(d, predictions);
  }
  SequenceResult run_sequence(const int32_t* tokens) { return runner_.run_sequence(tokens); }

  // Writes the checkpoint (atomically) at the current position. Throws NumericError after a
  // numeric fault: the parameters are then no longer good, and the file on disk is kept.
  void save(const std::string& path) const;

  const ModelConfig& config() const { return runner_.config(); }
  const TrainerOptions& options() const { return options_; }
  const TaskData& data() const { return data_; }
  const Executor& executor() const { return runner_.executor(); }
  int64_t step() const { return adam_->steps(); }
  int64_t batches_per_epoch() const;
  // The data-parallel group's size and this process's rank (1 and 0 without a group).
  int ranks() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  // Floats summed across the group per step (the gradients, the loss and the stop flag).
  int64_t floats_summed_per_step() const { return group_ ? runner_.executor().param_count() + 2 : 0; }
  const std::vector<float>& losses() const { return losses_; }       // steps taken by this object
  int64_t first_step() const { return first_step_; }                  // step of losses()[0], minus 1
  double train_seconds() const { return train_seconds_; }             // time in training steps
  float last_loss() const { return last_loss_; }
  // Snapshots taken: steps and [layers, heads, T, T] maps each.
  const std::vector<int64_t>& snapshot_steps() const { return snapshot_steps_; }
  const std::vector<std::vector<float>>& snapshots() const { return snapshots_; }

 private:
  void take_snapshot();
  // One data-parallel step over the global batch rows[0, n): this process's share, the
  // group's sum of the gradients and losses. Returns the batch's loss; *stop_all tells whether
  // any process asked to stop (asked_stop is this one's answer).
  float group_step(const int64_t* rows, int64_t n, bool asked_stop, bool* stop_all);
  // Accuracy over d, each process evaluating its share.
  Accuracy group_evaluate(const Dataset& d);
  // Refuses (Error, on every process) a group whose processes disagree on the model, the
  // options, the data or the parameters and optimizer state they start from.
  void check_group_agrees();
  // Throws NumericError when the step just taken left NaN/Inf in the loss, a gradient or a
  // parameter; remembers the fault so save() refuses.
  void check_finite(float loss);

  TrainerOptions options_;
  TaskData data_;
  ModelRunner runner_;
  std::unique_ptr<Adam> adam_;
  Rng order_rng_;
  std::array<uint64_t, 4> epoch_rng_state_{};  // order RNG before the current epoch's shuffle
  int64_t epoch_ = 0, batch_in_epoch_ = 0;
  int64_t first_step_ = 0;
  std::vector<float> losses_;
  float last_loss_ = 0.0f;
  double train_seconds_ = 0.0;
  std::vector<int64_t> snapshot_steps_;
  std::vector<std::vector<float>> snapshots_;
  std::string numeric_fault_;  // the NumericError message, once one happened
  Collective* group_ = nullptr;  // a group of more than one process, else nullptr
  bool group_checked_ = false;
  std::vector<float> payload_;   // gradients, loss, stop flag: what the group sums each step
};

}  // namespace attnkit

#include "models/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <numeric>
#include <stdexcept>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "ops/finite.h"

namespace attnkit {
namespace {

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));  // round-trips a float
  return buf;
}

// A model too large for the machine's memory fails to allocate; the Error names the sizes
// instead of leaving a bare std::bad_alloc.
[[noreturn]] void too_large(const ModelConfig& c, int64_t max_batch, const char* why) {
  throw Error("cannot allocate the model (batch " + std::to_string(max_batch) + ", T = " +
              std::to_string(c.seq_len) + ", d_model = " + std::to_string(c.d_model) + ", heads = " +
              std::to_string(c.heads) + ", layers = " + std::to_string(c.layers) + ", vocab = " +
              std::to_string(c.vocab) + "): " + why);
}

}  // namespace

ModelRunner::ModelRunner(const ModelConfig& config, int64_t max_batch, int threads, uint64_t seed,
                         bool with_backward) try
    : model_(build_model(config, max_batch, with_backward)),
      executor_(std::make_unique<Executor>(*model_.graph, ExecutorOptions{threads, seed})) {
} catch (const std::bad_alloc&) {
  too_large(config, max_batch, "out of memory");
} catch (const std::length_error&) {
  too_large(config, max_batch, "larger than a buffer can be");
}

TrainingState ModelRunner::load(const std::string& path, Adam* adam) {
  TrainingState st;
  load_checkpoint(path, *executor_, adam, st);
  return st;
}

namespace {

const TrainerOptions& checked(const TrainerOptions& o) {
  const TrainingConfig& t = o.training;
  if (t.epochs < 0) throw Error("epochs must be >= 0, got " + std::to_string(t.epochs));
  if (t.batch_size < 1) throw Error("batch size must be >= 1, got " + std::to_string(t.batch_size));
  if (!(t.lr > 0) || !std::isfinite(t.lr))
    throw Error("learning rate must be a positive finite number, got " + float_text(t.lr));
  if (o.threads < 1) throw Error("threads must be >= 1, got " + std::to_string(o.threads));
  return o;
}

// The largest batch training runs: batch_size, or the whole training set when that is
// smaller, so the graph, the arena and the evaluation batches follow the data and not an
// oversized --batch-size. For batch_size <= the set this is batch_size, so results are as before.
int64_t max_train_batch(const TrainerOptions& o, const TaskData& data) {
  return std::max<int64_t>(1, std::min(o.training.batch_size, data.train.size));
}

}  // namespace

Trainer::Trainer(const ModelConfig& config, const TrainerOptions& options, TaskData data)
    : options_(checked(options)),
      data_(std::move(data)),
      runner_(config, max_train_batch(options_, data_), options.threads, options.seed, true),
      order_rng_(options.seed + 1) {
  const TrainingConfig& t = options_.training;
  validate_dataset(data_.train, config, "training set");
  if (data_.val.size > 0) validate_dataset(data_.val, config, "validation set");
  if (options_.sample < 0 || (options_.sample > 0 && options_.sample >= data_.val.size))
    throw Error("sample " + std::to_string(options_.sample) + " is outside the validation set (" +
                std::to_string(data_.val.size) + " sequences)");
  AdamOptions adam_options;
  adam_options.lr = t.lr;
  adam_ = std::make_unique<Adam>(runner_.executor().param_count(), adam_options);
  epoch_rng_state_ = order_rng_.state();
}

int64_t Trainer::batches_per_epoch() const {
  const int64_t b = options_.training.batch_size;
  return (data_.train.size + b - 1) / b;
}

void Trainer::resume(const std::string& path) {
  const TrainingState st = runner_.load(path, adam_.get());
  if (st.batch_in_epoch < 0 || st.batch_in_epoch >= batches_per_epoch() || st.epoch < 0)
    throw FileError(path + ": data position (epoch " + std::to_string(st.epoch) + ", batch " +
                    std::to_string(st.batch_in_epoch) + ") does not fit this training set");
  epoch_ = st.epoch;
  batch_in_epoch_ = st.batch_in_epoch;
  order_rng_.set_state(st.rng_state);
  epoch_rng_state_ = st.rng_state;
  first_step_ = adam_->steps();
}

void Trainer::save(const std::string& path) const {
  if (!numeric_fault_.empty())
    throw NumericError("not saving " + path + " after a numeric fault (" + numeric_fault_ + ")");
  // The RNG state saved is the one before the current epoch's shuffle, so a resume redraws the
  // same order and skips batch_in_epoch batches.
  // Saved between steps: after the last batch of an epoch (before the loop moves on) the
  // position is the start of the next epoch, whose shuffle starts from the RNG's current state.
  const bool epoch_done = batch_in_epoch_ >= batches_per_epoch();
  TrainingState st{adam_->steps(), epoch_done ? epoch_ + 1 : epoch_, epoch_done ? 0 : batch_in_epoch_,
                   epoch_done ? order_rng_.state() : epoch_rng_state_, config_entries(runner_.config(), options_)};
  save_checkpoint(path, runner_.executor(), adam_.get(), st);
}

void ModelRunner::load_batch(const Dataset& d, const int64_t* rows, int64_t n, bool with_targets) {
  const int64_t T = d.seq_len;
  executor_->set_batch(n);
  int32_t* ids = executor_->i32(model_.ids.id());
  int32_t* targets = executor_->i32(model_.targets.id());
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(ids + r * T, d.tokens(rows[r]), static_cast<size_t>(T) * 4);
    if (with_targets)
      std::memcpy(targets + r * T, d.targets(rows[r]), static_cast<size_t>(T) * 4);
    else
      std::fill(targets + r * T, targets + (r + 1) * T, -1);
  }
}

SequenceResult ModelRunner::run_sequence(const int32_t* tokens) {
  const ModelConfig& c = model_.config;
  for (int64_t i = 0; i < c.seq_len; ++i)
    if (tokens[i] < 0 || tokens[i] >= c.vocab)
      throw Error("token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(c.vocab) + ")");
  executor_->set_batch(1);
  std::memcpy(executor_->i32(model_.ids.id()), tokens, static_cast<size_t>(c.seq_len) * 4);
  std::fill(executor_->i32(model_.targets.id()), executor_->i32(model_.targets.id()) + c.seq_len, -1);
  executor_->forward();
  SequenceResult r;
  const int64_t per_layer = c.heads * c.seq_len * c.seq_len;
  r.attention.resize(static_cast<size_t>(c.layers * per_layer));
  for (int64_t l = 0; l < c.layers; ++l) {
    const float* a = executor_->f32(model_.attention[static_cast<size_t>(l)].attn().id());
    std::copy(a, a + per_layer, r.attention.begin() + l * per_layer);
  }
  const float* logits = executor_->f32(model_.logits.id());
  for (int64_t i = 0; i < c.seq_len; ++i) {
    const float* row = logits + i * c.classes;
    r.predictions.push_back(static_cast<int32_t>(std::max_element(row, row + c.classes) - row));
  }
  return r;
}

Accuracy ModelRunner::evaluate(const Dataset& d, std::vector<int32_t>* predictions) {
  const ModelConfig& c = model_.config;
  if (d.size > 0) validate_dataset(d, c, "evaluation set");
  Accuracy acc;
  if (predictions) predictions->assign(static_cast<size_t>(d.size * c.seq_len), 0);
  const int64_t B = model_.graph->max_batch();
  std::vector<int64_t> rows(static_cast<size_t>(B));
  for (int64_t start = 0; start < d.size; start += B) {
    const int64_t n = std::min(B, d.size - start);
    std::iota(rows.begin(), rows.begin() + n, start);
    load_batch(d, rows.data(), n, false);
    executor_->forward();
    const float* logits = executor_->f32(model_.logits.id());
    for (int64_t r = 0; r < n * c.seq_len; ++r) {
      const float* row = logits + r * c.classes;
      const int32_t pred = static_cast<int32_t>(std::max_element(row, row + c.classes) - row);
      const int32_t target = d.y[static_cast<size_t>(start * c.seq_len + r)];
      if (predictions) (*predictions)[static_cast<size_t>(start * c.seq_len + r)] = pred;
      if (target < 0) continue;
      ++acc.total;
      acc.correct += pred == target;
    }
  }
  return acc;
}

namespace {

// "[3, 17]": the position of flat element i in a tensor of this shape.
std::string index_text(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.rank));
  for (int d = shape.rank - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = i % shape[d];
    i /= shape[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// "NaN", "Inf", "-Inf" or the number.
std::string value_text(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Inf" : "-Inf";
  return float_text(v);
}

}  // namespace

void Trainer::check_finite(float loss) {
  const Executor& ex = runner_.executor();
  std::string found;
  if (!std::isfinite(loss)) found = "the loss is " + value_text(loss);
  // The first parameter (in declaration order) whose gradient is not finite points at where
  // the fault entered; failing that, the first whose updated value is not (e.g. a huge lr).
  auto first_bad = [&](const float* block, const char* kind, const char* suffix) {
    for (const ParamInfo& p : ex.graph().params()) {
      const int64_t i = first_nonfinite(block + p.offset, p.numel);
      if (i < 0) continue;
      const Shape& shape = ex.graph().tensor(p.tensor).shape;
      found += std::string(found.empty() ? "" : "; ") + kind + " '" + p.name + "' " + shape.str() + " is " +
               value_text(block[p.offset + i]) + " at " + index_text(shape, i) + suffix;
      return true;
    }
    return false;
  };
  if (!first_bad(ex.grads(), "gradient of", "")) first_bad(ex.params(), "parameter", " after the update");
  if (found.empty()) return;
  numeric_fault_ = "step " + std::to_string(adam_->steps()) + " (epoch " + std::to_string(epoch_ + 1) +
                   ", batch " + std::to_string(batch_in_epoch_ + 1) + "): " + found;
  throw NumericError(numeric_fault_ + "; training stopped, nothing saved from this run");
}

void Trainer::take_snapshot() {
  if (data_.val.size == 0) return;
  snapshot_steps_.push_back(adam_->steps());
  snapshots_.push_back(run_sequence(data_.val.tokens(options_.sample)).attention);
}

bool Trainer::train(const std::function<void(const StepReport&)>& on_step,
                    const std::function<void(const EpochReport&)>& on_epoch, const std::function<bool()>& stop) {
  using Clock = std::chrono::steady_clock;
  const TrainingConfig& t = options_.training;
  const int64_t N = data_.train.size, B = t.batch_size, nb = batches_per_epoch();
  const int64_t total_steps = t.epochs * nb;
  auto wanted = [&](int64_t step) {
    return std::find(t.snapshot_steps.begin(), t.snapshot_steps.end(), step) != t.snapshot_steps.end();
  };
  std::vector<int64_t> perm(static_cast<size_t>(N));
  for (; epoch_ < t.epochs; ++epoch_) {
    epoch_rng_state_ = order_rng_.state();
    std::iota(perm.begin(), perm.end(), 0);
    order_rng_.shuffle(perm.data(), N);
    double loss_sum = 0, seconds = 0;
    int64_t steps = 0;
    while (batch_in_epoch_ < nb) {
      if (wanted(adam_->steps())) take_snapshot();
      const int64_t start = batch_in_epoch_ * B;
      const auto t0 = Clock::now();
      runner_.load_batch(data_.train, perm.data() + start, std::min(B, N - start), true);
      // The first step (thread start, first touch of the arena) is not part of a profile.
      const bool profile = options_.profile && !losses_.empty();
      if (profile) runner_.executor().set_profiling(true, /*keep_record=*/true);
      runner_.executor().train_step(adam_.get());
      if (profile) runner_.executor().set_profiling(false);
      const float loss = runner_.executor().f32(runner_.model().loss.id())[0];
      if (options_.check_finite) check_finite(loss);
      seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      losses_.push_back(loss);
      last_loss_ = loss;
      loss_sum += loss;
      ++steps;
      ++batch_in_epoch_;  // before the callback, so a save() there resumes after this step
      if (on_step) on_step({adam_->steps(), total_steps, epoch_, loss});
      if (stop && stop()) {
        train_seconds_ += seconds;
        return false;
      }
    }
    batch_in_epoch_ = 0;
    train_seconds_ += seconds;
    epoch_rng_state_ = order_rng_.state();
    if (on_epoch) {
      const double acc = data_.val.size > 0 ? evaluate(data_.val).value() : 0.0;
      on_epoch({epoch_, adam_->steps(), steps ? loss_sum / static_cast<double>(steps) : 0.0, acc,
                seconds > 0 ? static_cast<double>(steps) / seconds : 0.0});
    }
  }
  epoch_rng_state_ = order_rng_.state();
  if (wanted(adam_->steps())) take_snapshot();
  return true;
}

}  // namespace attnkit

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
#include "engine/hash.h"
#include "ops/gemm.h"  // simd_target_name
#include "ops/elementwise.h"  // argmax_rows
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
  throw MemoryError("cannot allocate the model (batch " + std::to_string(max_batch) + ", T = " +
              std::to_string(c.seq_len) + ", d_model = " + std::to_string(c.d_model) + ", heads = " +
              std::to_string(c.heads) + ", layers = " + std::to_string(c.layers) + ", vocab = " +
              std::to_string(c.vocab) + "): " + why);
}

// An inference runner's parameters change only through load(): its weights-only nodes run
// on the first call after it (see ExecutorOptions::fixed_parameters).
ExecutorOptions runner_options(int threads, uint64_t seed, bool with_backward, Precision precision,
                               int64_t train_chunk_rows, int train_shards) {
  ExecutorOptions o{threads, seed};
  o.fixed_parameters = !with_backward;
  o.precision = precision;
  o.train_chunk_rows = train_chunk_rows;
  o.train_shards = with_backward ? train_shards : 0;
  return o;
}

// 16 hex digits: the checkpoint's "data_fnv1a" entry.
std::string fingerprint_text(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

ModelRunner::ModelRunner(const ModelConfig& config, int64_t max_batch, int threads, uint64_t seed,
                         bool with_backward, Precision precision, int64_t train_chunk_rows, int train_shards) try
    : model_(build_model(config, max_batch, with_backward)),
      executor_(std::make_unique<Executor>(
          *model_.graph, runner_options(threads, seed, with_backward, precision, train_chunk_rows, train_shards))) {
} catch (const MemoryError& e) {
  too_large(config, max_batch, e.what());
} catch (const std::bad_alloc&) {
  too_large(config, max_batch, "out of memory");
} catch (const std::length_error&) {
  too_large(config, max_batch, "larger than a buffer can be");
}

TrainingState ModelRunner::load(const std::string& path, Adam* adam,
                                const std::function<void(const TrainingState&)>& check) {
  TrainingState st;
  load_checkpoint(path, *executor_, adam, st, check);
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
  if (o.collective && o.collective->size() > 1 && t.batch_size % o.collective->size() != 0)
    throw Error("batch size " + std::to_string(t.batch_size) + " does not divide among " +
                std::to_string(o.collective->size()) + " processes (the global batch is split evenly)");
  return o;
}

Collective* group_of(const TrainerOptions& o) {
  return o.collective && o.collective->size() > 1 ? o.collective : nullptr;
}

// The largest batch training runs: batch_size, or the whole training set when that is
// smaller, so the graph, the arena and the evaluation batches follow the data and not an
// oversized --batch-size. For batch_size <= the set this is batch_size, so results are as before.
// In a data-parallel group, each process runs at most its share of that.
int64_t max_train_batch(const TrainerOptions& o, const TaskData& data) {
  const int64_t b = std::max<int64_t>(1, std::min(o.training.batch_size, data.train.size));
  const Collective* group = group_of(o);
  return group ? std::max<int64_t>(1, (b + group->size() - 1) / group->size()) : b;
}

// Fingerprints of what the processes of a group must agree on.
using Fingerprint = Fnv1a;

// Rows [share_begin(n, k), share_begin(n, k + 1)) of a batch of n are process k's.
int64_t share_begin(int64_t n, int k, int size) { return n * k / size; }

}  // namespace

Trainer::Trainer(const ModelConfig& config, const TrainerOptions& options, TaskData data)
    : options_(checked(options)),
      data_(std::move(data)),
      runner_(config, max_train_batch(options_, data_), options.threads, options.seed, true, options.precision,
              options.train_chunk_rows, options.train_shards),
      order_rng_(options.seed + 1),
      group_(group_of(options_)) {
  const TrainingConfig& t = options_.training;
  validate_dataset(data_.train, config, "training set");
  if (!data_.train.has_targets()) throw Error("training set: no targets (y is empty)");
  if (data_.val.size > 0) validate_dataset(data_.val, config, "validation set");
  if (options_.sample < 0 || (options_.sample > 0 && options_.sample >= data_.val.size))
    throw Error("sample " + std::to_string(options_.sample) + " is outside the validation set (" +
                std::to_string(data_.val.size) + " sequences)");
  AdamOptions adam_options;
  adam_options.lr = t.lr;
  adam_ = std::make_unique<Adam>(runner_.executor().param_count(), adam_options);
  epoch_rng_state_ = order_rng_.state();
  if (!options_.data_path.empty()) options_.data_fingerprint = fingerprint_text(task_data_fingerprint(data_));
}

int64_t Trainer::batches_per_epoch() const {
  const int64_t b = options_.training.batch_size;
  return (data_.train.size + b - 1) / b;
}

void Trainer::resume(const std::string& path) {
  // Checked before loading: a refused checkpoint leaves the parameters as they were.
  const auto meta = read_checkpoint_metadata(path);
  const auto recorded = meta.find("config.data_fnv1a");
  if (recorded != meta.end() && recorded->second != options_.data_fingerprint)
    throw FileError(path + ": trained on data with fingerprint " + recorded->second + " ('config.data_fnv1a'), but " +
                    (options_.data_path.empty() ? std::string("the generated data")
                                                : options_.data_path + " holds other data") +
                    " (fingerprint " + (options_.data_fingerprint.empty() ? "none" : options_.data_fingerprint) + ")");
  // The data position and the order generator, checked before anything is loaded (a refused
  // checkpoint leaves the trainer as it was).
  const int64_t bpe = batches_per_epoch();
  const TrainingState st = runner_.load(path, adam_.get(), [&](const TrainingState& s) {
    if (s.batch_in_epoch < 0 || s.batch_in_epoch >= bpe || s.epoch < 0)
      throw FileError(path + ": data position (epoch " + std::to_string(s.epoch) + ", batch " +
                      std::to_string(s.batch_in_epoch) + ") does not fit this training set");
    // Where step `step` leaves the data: epoch · batches per epoch + batch (without overflow).
    const int64_t whole = s.step - s.batch_in_epoch;
    if (whole < 0 || whole % bpe != 0 || whole / bpe != s.epoch)
      throw FileError(path + ": data position (epoch " + std::to_string(s.epoch) + ", batch " +
                      std::to_string(s.batch_in_epoch) + " of " + std::to_string(bpe) +
                      " per epoch) is not where step " + std::to_string(s.step) + " leaves the training set");
    // xoshiro256** never leaves the all-zero state (a checkpoint saved without a data-order
    // generator has it): every draw would be 0 and the shuffle would never end.
    if ((s.rng_state[0] | s.rng_state[1] | s.rng_state[2] | s.rng_state[3]) == 0)
      throw FileError(path + ": data-order generator state 'attnkit.rng' is all zero, which the generator cannot "
                      "have (a checkpoint saved without a training run's data order cannot be resumed by the "
                      "trainer)");
  });
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
    if (with_targets && d.has_targets())
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
  r.predictions.resize(static_cast<size_t>(c.seq_len));
  argmax_rows(executor_->f32(model_.logits.id()), c.seq_len, c.classes, r.predictions.data());
  return r;
}

Accuracy ModelRunner::evaluate(const Dataset& d, std::vector<int32_t>* predictions) {
  const ModelConfig& c = model_.config;
  if (d.size > 0) validate_dataset(d, c, "evaluation set");
  Accuracy acc;
  if (predictions) predictions->assign(static_cast<size_t>(d.size * c.seq_len), 0);
  const int64_t B = model_.graph->max_batch();
  const bool scored = d.has_targets();  // (without targets: predictions only, no position scored)
  std::vector<int64_t> rows(static_cast<size_t>(B));
  std::vector<int32_t> batch_predictions(predictions ? 0 : static_cast<size_t>(B * c.seq_len));
  for (int64_t start = 0; start < d.size; start += B) {
    const int64_t n = std::min(B, d.size - start);
    std::iota(rows.begin(), rows.begin() + n, start);
    load_batch(d, rows.data(), n, false);
    executor_->forward();
    int32_t* pred = predictions ? predictions->data() + start * c.seq_len : batch_predictions.data();
    argmax_rows(executor_->f32(model_.logits.id()), n * c.seq_len, c.classes, pred);
    if (scored) acc.add(pred, d.y.data() + start * c.seq_len, n * c.seq_len);
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
  if (data_.val.size == 0 || rank() != 0) return;  // snapshots are for the run folder: rank 0's
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
  if (group_ && !group_checked_) check_group_agrees();
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
      // The first step (thread start, first touch of the arena) is not part of a profile.
      const bool profile = options_.profile && !losses_.empty();
      if (profile) runner_.executor().set_profiling(true, /*keep_record=*/true);
      bool stop_all = false;
      float loss;
      if (group_) {
        loss = group_step(perm.data() + start, std::min(B, N - start), stop && stop(), &stop_all);
      } else {
        runner_.load_batch(data_.train, perm.data() + start, std::min(B, N - start), true);
        runner_.executor().train_step(adam_.get());
        loss = runner_.executor().f32(runner_.model().loss.id())[0];
      }
      if (profile) runner_.executor().set_profiling(false);
      if (options_.check_finite) check_finite(loss);
      seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      losses_.push_back(loss);
      last_loss_ = loss;
      loss_sum += loss;
      ++steps;
      ++batch_in_epoch_;  // before the callback, so a save() there resumes after this step
      if (on_step) on_step({adam_->steps(), total_steps, epoch_, loss});
      // A group stops together, after the same step; a stop asked for during the last step
      // lets the run finish (the caller saves it as finished).
      if ((group_ ? stop_all : stop && stop()) && adam_->steps() < total_steps) {
        train_seconds_ += seconds;
        return false;
      }
    }
    batch_in_epoch_ = 0;
    train_seconds_ += seconds;
    epoch_rng_state_ = order_rng_.state();
    if (on_epoch) {
      const double acc = data_.val.size == 0 ? 0.0 : group_ ? group_evaluate(data_.val).value() : evaluate(data_.val).value();
      on_epoch({epoch_, adam_->steps(), steps ? loss_sum / static_cast<double>(steps) : 0.0, acc,
                seconds > 0 ? static_cast<double>(steps) / seconds : 0.0});
    }
  }
  epoch_rng_state_ = order_rng_.state();
  if (wanted(adam_->steps())) take_snapshot();
  return true;
}

namespace {

// The loss and gradients of a data-parallel step: this process's share, weighted, summed.
class GroupSum final : public GradientHook {
 public:
  GroupSum(Collective& group, std::vector<float>& payload, const float* loss, float weight, bool asked_stop)
      : group_(group), payload_(payload), loss_(loss), weight_(weight), asked_stop_(asked_stop) {}
  void on_gradients(float* grads, int64_t n) override {
    payload_.resize(static_cast<size_t>(group_.sum_room(n + 2)));  // allocates at the first step only
    float* p = payload_.data();
    const float w = weight_;
    for (int64_t i = 0; i < n; ++i) p[i] = grads[i] * w;
    p[n] = loss_ ? *loss_ * w : 0.0f;
    p[n + 1] = asked_stop_ ? 1.0f : 0.0f;
    group_.sum(p, n + 2);
    std::memcpy(grads, p, static_cast<size_t>(n) * sizeof(float));
    loss = p[n];
    stop = p[n + 1] > 0;
  }
  float loss = 0;
  bool stop = false;

 private:
  Collective& group_;
  std::vector<float>& payload_;
  const float* loss_;
  float weight_;
  bool asked_stop_;
};

}  // namespace

float Trainer::group_step(const int64_t* rows, int64_t n, bool asked_stop, bool* stop_all) {
  const int size = group_->size(), me = group_->rank();
  const int64_t T = data_.train.seq_len;
  // The cross-entropy is a mean over the answered positions of the rows a process runs, so
  // share k's gradient enters the sum weighted by its answered positions over the batch's.
  int64_t answered_all = 0, answered_mine = 0;
  for (int k = 0; k < size; ++k) {
    int64_t answered = 0;
    for (int64_t r = share_begin(n, k, size); r < share_begin(n, k + 1, size); ++r) {
      const int32_t* y = data_.train.targets(rows[r]);
      for (int64_t i = 0; i < T; ++i) answered += y[i] >= 0;
    }
    answered_all += answered;
    if (k == me) answered_mine = answered;
  }
  const float weight =
      answered_all > 0 ? static_cast<float>(static_cast<double>(answered_mine) / static_cast<double>(answered_all)) : 0.0f;
  const int64_t begin = share_begin(n, me, size), count = share_begin(n, me + 1, size) - begin;
  Executor& ex = runner_.executor();
  if (count > 0) {
    runner_.load_batch(data_.train, rows + begin, count, true);
    GroupSum sum(*group_, payload_, ex.f32(runner_.model().loss.id()), weight, asked_stop);
    ex.train_step(adam_.get(), &sum);
    *stop_all = sum.stop;
    return sum.loss;
  }
  // No rows for this process in this (final, short) batch: it adds nothing, and still takes
  // part in the sum and the update.
  std::memset(ex.grads(), 0, static_cast<size_t>(ex.param_count()) * sizeof(float));
  GroupSum sum(*group_, payload_, nullptr, 0.0f, asked_stop);
  sum.on_gradients(ex.grads(), ex.param_count());
  ex.apply_update(adam_.get());
  *stop_all = sum.stop;
  return sum.loss;
}

Accuracy Trainer::group_evaluate(const Dataset& d) {
  const int size = group_->size(), me = group_->rank();
  const int64_t begin = share_begin(d.size, me, size), end = share_begin(d.size, me + 1, size);
  Dataset share;
  share.seq_len = d.seq_len;
  share.size = end - begin;
  share.x.assign(d.x.begin() + begin * d.seq_len, d.x.begin() + end * d.seq_len);
  if (d.has_targets()) share.y.assign(d.y.begin() + begin * d.seq_len, d.y.begin() + end * d.seq_len);
  const Accuracy mine = runner_.evaluate(share);
  Accuracy all;
  for (uint64_t v : group_->all_gather(static_cast<uint64_t>(mine.correct))) all.correct += static_cast<int64_t>(v);
  for (uint64_t v : group_->all_gather(static_cast<uint64_t>(mine.total))) all.total += static_cast<int64_t>(v);
  return all;
}

void Trainer::check_group_agrees() {
  group_checked_ = true;
  const Executor& ex = runner_.executor();
  Fingerprint model, state;
  for (const auto& [key, value] : config_entries(runner_.config(), options_))
    if (key != "data_fnv1a") model.add(key), model.add(value);  // the data has its own check below
  state.add(ex.params(), static_cast<size_t>(ex.param_count()) * sizeof(float));
  state.add(adam_->m(), static_cast<size_t>(adam_->size()) * sizeof(float));
  state.add(adam_->v(), static_cast<size_t>(adam_->size()) * sizeof(float));
  const int64_t position[3] = {adam_->steps(), epoch_, batch_in_epoch_};
  state.add(position, sizeof position);
  Fingerprint target;  // different kernels round differently: the ranks' parameters would drift apart
  target.add(simd_target_name());
  const std::pair<const char*, uint64_t> checks[] = {
      {"the SIMD target (a different CPU? set ATTNKIT_SIMD_TARGET alike on every rank)", target.h},
      {"the model and training options", model.h},
      {"the training and validation data", task_data_fingerprint(data_)},
      {"the parameters, optimizer state and data position (checkpoint) it starts from", state.h}};
  for (const auto& [what, h] : checks) {
    const std::vector<uint64_t> all = group_->all_gather(h);
    for (size_t k = 1; k < all.size(); ++k)
      if (all[k] != all[0])
        throw GroupError("rank " + std::to_string(k) + " of " + std::to_string(all.size()) +
                         " disagrees with rank 0 on " + what + "; every process must be started alike");
  }
}

}  // namespace attnkit

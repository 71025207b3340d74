// attnkit train / eval / infer.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <type_traits>

#include <fmt/core.h>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/npy.h"
#include "models/tasks.h"
#include "models/trainer.h"
#include "tools/commands.h"
#include "tools/render/render_file.h"
#include "tools/run_folder.h"
#include "ops/gemm_bf16.h"

namespace attnkit::cli {
namespace fs = std::filesystem;

bool TrainArgs::has(const std::string& flag) const {
  return std::find(given.begin(), given.end(), flag) != given.end();
}

namespace {

std::vector<int64_t> parse_steps(const std::string& text) {
  return parse_index_list(text, "--snapshot-steps: '" + text +
                                    "' is not a comma-separated list of steps >= 0 (e.g. 0,10,20)");
}

// One line per epoch, or a progress bar with loss and ETA when stdout is a terminal.
class Progress {
 public:
  Progress(bool bar, bool quiet, int64_t epochs) : bar_(bar && !quiet), quiet_(quiet), epochs_(epochs) {}

  void step(const StepReport& r) {
    if (!bar_) return;
    const auto now = Clock::now();
    if (!started_) start_ = now, start_step_ = r.step - 1, started_ = true;
    if (r.step != r.total_steps && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const int64_t done = r.step - start_step_;
    const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(r.total_steps - r.step) : 0;
    const int width = 30;
    const int filled = r.total_steps ? static_cast<int>(width * r.step / r.total_steps) : width;
    fmt::print("\r\033[Kepoch {}/{} [{}{}] {}/{} loss {:.4f} ETA {:.1f}s", r.epoch + 1, epochs_,
               std::string(static_cast<size_t>(filled), '#'), std::string(static_cast<size_t>(width - filled), '.'),
               r.step, r.total_steps, r.loss, eta);
    std::fflush(stdout);
  }

  // Ends the bar's line before an error message.
  void abort() {
    if (bar_ && started_) fmt::print("\n");
    std::fflush(stdout);
  }

  void epoch(const EpochReport& r) {
    if (quiet_) return;
    if (bar_) fmt::print("\r\033[K");
    fmt::print("epoch {}/{}  loss {:.4f}  val_accuracy {:.4f}  steps/s {:.0f}\n", r.epoch + 1, epochs_, r.mean_loss,
               r.val_accuracy, r.steps_per_second);
    std::fflush(stdout);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool bar_, quiet_;
  int64_t epochs_;
  bool started_ = false;
  int64_t start_step_ = 0;
  Clock::time_point start_, last_draw_;
};

// Set by SIGINT/SIGTERM during training: the trainer stops after the current step.
volatile std::sig_atomic_t g_stop_signal = 0;
static_assert(std::is_same_v<std::sig_atomic_t, int>, "stop_signal_flag() hands out an int");

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

// Installs the graceful-stop handlers for its lifetime. SA_RESETHAND: a second signal ends the
// process at once, for a user who does not want to wait for the save.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// Generated sets are held in memory (tokens and targets, int32 each): sizes beyond the
// machine's memory are refused before anything is allocated. `what` names where n came from.
void check_generated_size(int64_t n, int64_t T, const std::string& what) {
  const double bytes = static_cast<double>(n) * static_cast<double>(T) * 2 * sizeof(int32_t);
  const double memory = static_cast<double>(memory_limit());
  if (bytes > memory)
    throw UsageError(fmt::format("{}: {} sequences of T = {} take {:.1f} GB as tokens and targets, more than the "
                                 "{:.1f} GB of memory this process may have",
                                 what, n, T, bytes / 1e9, memory / 1e9));
}

// Two paths that name one file (or, where either is missing, read alike).
bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return a == b;
  std::error_code ec;
  const bool same = fs::equivalent(a, b, ec);
  return ec ? fs::path(a).lexically_normal() == fs::path(b).lexically_normal() : same;
}

// A flag given on --resume must agree with the checkpoint.
template <typename T>
void same_as_checkpoint(const TrainArgs& a, const char* flag, const T& given, const T& stored) {
  if (!a.has(flag) || given == stored) return;
  std::ostringstream g, s;
  g << given, s << stored;
  throw UsageError(std::string("--") + flag + " " + g.str() + " differs from the checkpoint's " + s.str() +
                   " (the model, data and optimizer settings come from the checkpoint when resuming)");
}

}  // namespace

std::string checkpoint_in(const std::string& path) {
  return fs::is_directory(path) ? (fs::path(path) / "model.safetensors").string() : path;
}

const volatile int* stop_signal_flag() { return &g_stop_signal; }

int run_train(const TrainArgs& a, Collective* group) {
  const int ranks = group ? group->size() : 1;
  const bool lead = !group || group->rank() == 0;  // rank 0 alone prints, draws and writes
  const bool quiet = a.quiet || !lead;
  ModelConfig config;
  TrainerOptions options;
  std::string resume_checkpoint, resume_dir;
  std::vector<int64_t> stored_snapshot_steps;  // the snapshot steps the resumed run asked for
  if (!a.resume.empty()) {
    // The model, data and optimizer settings come from the checkpoint; a flag that repeats the
    // checkpoint's value is accepted, a different one refused. --epochs is the new total.
    resume_checkpoint = checkpoint_in(a.resume);
    resume_dir = fs::is_directory(a.resume) ? a.resume : fs::path(a.resume).parent_path().string();
    if (resume_dir.empty()) resume_dir = ".";
    const auto meta = read_checkpoint_metadata(resume_checkpoint);
    config = model_config_from_metadata(meta, resume_checkpoint);
    require_known_task(config, resume_checkpoint);
    options = trainer_options_from_metadata(meta, resume_checkpoint);
    if (config.task != a.task)
      throw UsageError("TASK '" + a.task + "' differs from the checkpoint's task '" + config.task + "'");
    const TrainingConfig& t = options.training;
    same_as_checkpoint(a, "batch-size", a.batch_size, t.batch_size);
    same_as_checkpoint(a, "lr", a.lr, t.lr);
    same_as_checkpoint(a, "seed", a.seed, options.seed);
    same_as_checkpoint(a, "seq-len", a.seq_len, config.seq_len);
    same_as_checkpoint(a, "vocab", a.vocab, config.vocab);
    same_as_checkpoint(a, "layers", a.layers, config.layers);
    same_as_checkpoint(a, "heads", a.heads, config.heads);
    same_as_checkpoint(a, "d-model", a.d_model, config.d_model);
    same_as_checkpoint(a, "mlp", a.mlp, config.block_mlp);
    same_as_checkpoint(a, "sample", a.sample, options.sample);
    same_as_checkpoint(a, "shards", a.shards >= 2 ? a.shards : 0, options.train_shards);
    same_as_checkpoint(a, "causal", a.causal, config.causal);
    same_as_checkpoint(a, "pre-norm", a.pre_norm, config.pre_norm);
    if (!a.has("data")) {
      same_as_checkpoint(a, "train-size", a.train_size, t.train_size);
      same_as_checkpoint(a, "val-size", a.val_size, t.val_size);
    } else if (a.has("train-size") || a.has("val-size")) {
      throw UsageError("--train-size and --val-size do not apply with --data (the data sets the sizes)");
    }
    stored_snapshot_steps = options.training.snapshot_steps;
    if (a.has("epochs")) options.training.epochs = a.epochs;
    if (a.has("snapshot-steps")) options.training.snapshot_steps = parse_steps(a.snapshot_steps);
    if (a.has("data") && !same_file(a.data, options.data_path)) {
      // Another path is fine for the same arrays (a moved or copied file): the checkpoint's
      // fingerprint of them is checked when resuming. Without one there is nothing to check.
      if (options.data_path.empty())
        throw UsageError("--data " + a.data +
                         " differs from the checkpoint's generated data (the model, data and optimizer settings "
                         "come from the checkpoint when resuming)");
      if (options.data_fingerprint.empty())
        std::fprintf(stderr, "warning: %s has no fingerprint of its data (an older checkpoint): --data %s is "
                     "used unchecked in place of %s\n", resume_checkpoint.c_str(), a.data.c_str(),
                     options.data_path.c_str());
      options.data_path = a.data;
    }
  } else {
    config = lesson_config(a.task);
    if (a.has("seq-len") || a.has("vocab")) {
      if (a.has("data"))
        throw UsageError("--seq-len and --vocab size generated tasks; with --data the model follows the lesson's sizes");
      try {
        config = resize_task(config, a.seq_len, a.vocab);
      } catch (const Error& e) {
        throw UsageError(std::string("--seq-len/--vocab: ") + e.what());
      }
    }
    options.training = lesson_training(a.task);
    TrainingConfig& t = options.training;
    if (a.has("epochs")) t.epochs = a.epochs;
    if (a.has("batch-size")) t.batch_size = a.batch_size;
    if (a.has("lr")) t.lr = a.lr;
    if (a.has("train-size")) t.train_size = a.train_size;
    if (a.has("val-size")) t.val_size = a.val_size;
    if (a.has("snapshot-steps")) t.snapshot_steps = parse_steps(a.snapshot_steps);
    if (a.has("seed")) options.seed = a.seed;
    if (a.has("sample")) options.sample = a.sample;
    if (a.has("layers")) config.layers = a.layers;
    if (a.has("heads")) config.heads = a.heads;
    if (a.has("d-model")) config.d_model = a.d_model;
    if (a.has("mlp")) config.block_mlp = a.mlp;
    if (a.has("causal")) config.causal = a.causal;
    if (a.has("pre-norm")) config.pre_norm = a.pre_norm;
    if (config.d_model % config.heads != 0)
      throw UsageError(fmt::format("--heads {} does not divide --d-model {}", config.heads, config.d_model));
    if (a.has("data")) options.data_path = a.data;
  }
  options.threads = a.threads;
  options.precision = parse_precision(a.precision);
  options.train_chunk_rows = a.train_chunk;
  if (resume_checkpoint.empty()) options.train_shards = a.shards >= 2 ? a.shards : 0;  // (resuming: the checkpoint's)
  options.profile = a.profile;
  options.collective = group;
  if (options.training.batch_size % ranks != 0)
    throw UsageError(fmt::format("--batch-size {} does not divide among {} processes (the global batch is split evenly "
                                 "across the ranks mpirun starts)",
                                 options.training.batch_size, ranks));

  TaskData data;
  if (!resume_checkpoint.empty() && !a.has("data") && !options.data_path.empty() && !fs::exists(options.data_path))
    throw FileError(resume_checkpoint + " trained on --data " + options.data_path + " (the path as given then), " +
                    (fs::path(options.data_path).is_relative() ? "which is not there from this folder"
                                                               : "which is not there any more") +
                    ": give --data PATH to the same arrays" +
                    (options.data_fingerprint.empty() ? " (this older checkpoint has no fingerprint to check them by)"
                                                      : " (their fingerprint is checked)"));
  if (!options.data_path.empty()) {
    data = load_task_data(options.data_path, config,
                          resume_checkpoint.empty() ? "the model" : "the checkpoint " + resume_checkpoint);
    options.training.train_size = data.train.size;
    options.training.val_size = data.val.size;
  } else {
    const TrainingConfig& t = options.training;
    if (t.val_size < 1)  // (a library run may have none; the command line scores every run)
      throw FileError(resume_checkpoint + ": 'config.val_size' = '" + std::to_string(t.val_size) +
                      "': the run had no validation set, and `attnkit train --resume` continues runs that have one "
                      "(resume it from the library, or train anew)");
    check_generated_size(t.train_size + t.val_size, config.seq_len,
                         fmt::format(resume_checkpoint.empty() ? "--train-size {} and --val-size {}"
                                                               : "the checkpoint's train_size {} and val_size {}",
                                     t.train_size, t.val_size));
    data = generate_task_data(config, t.train_size, t.val_size, options.seed);
  }
  if (options.sample >= data.val.size)
    throw UsageError(fmt::format("--sample {} is outside the validation set ({} sequences)", options.sample,
                                 data.val.size));

  // The run folder is locked from here to the end; nothing in it changes before the first save.
  const std::string out = !a.out.empty() ? a.out : !resume_dir.empty() ? resume_dir : "runs/" + config.task;
  std::unique_ptr<RunFolderWriter> writer_of_lead;
  if (lead) writer_of_lead = std::make_unique<RunFolderWriter>(out, "attnkit train " + config.task);

  Trainer trainer(config, options, std::move(data));
  if (options.precision == Precision::kBf16 && lead && !quiet && !bf16_kernel_note().empty())
    fmt::print("precision: {}\n", bf16_kernel_note());
  if (options.precision == Precision::kBf16 && lead && !quiet)
    fmt::print("{}\n", trainer.executor().bf16_products()
                           ? fmt::format("precision: bf16 products on {} (parameters, Adam and the other ops float32)",
                                         bf16_kernel_name(bf16_kernel()))
                           : std::string("precision: this CPU has no bf16 kernel (AMX-BF16 or AVX512-BF16): the "
                                         "products run in float32"));
  EarlierRun earlier;
  if (!resume_checkpoint.empty()) {
    trainer.resume(resume_checkpoint);
    const int64_t done = trainer.step(), nb = trainer.batches_per_epoch();
    if (options.training.epochs * nb < done)
      throw UsageError(fmt::format("--epochs {}: the checkpoint has already trained {} steps ({:.3g} epochs of {} steps)",
                                   options.training.epochs, done, static_cast<double>(done) / static_cast<double>(nb), nb));
    if (lead) {
      earlier = earlier_run(resume_dir, config, done, stored_snapshot_steps);
      for (const std::string& w : earlier.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    }
  }

  if (lead && a.has("snapshot-steps")) {  // steps asked for (not the lesson's defaults past a short
    // run's end) that the run never reaches: said, not dropped without a word
    const int64_t last = options.training.epochs * trainer.batches_per_epoch();
    std::string past;
    int64_t count = 0;
    for (int64_t s : options.training.snapshot_steps)
      if (s > last) past += (past.empty() ? "" : ", ") + std::to_string(s), ++count;
    if (count > 0)
      std::fprintf(stderr, "warning: snapshot step%s %s come%s after the run's last step (%lld): no snapshot of %s\n",
                   count > 1 ? "s" : "", past.c_str(), count > 1 ? "" : "s", static_cast<long long>(last),
                   count > 1 ? "them" : "it");
  }

  const bool tty = isatty(fileno(stdout)) != 0;
  Progress progress(tty, quiet, options.training.epochs);
  const Executor& ex = trainer.executor();

  // One version of the run folder at the trainer's position: every file, then one commit.
  // Returns false when the pictures could not be drawn (everything else is saved).
  std::string pictures_error;
  bool skipped_said = false;  // the pictures left out for the run's T, told once
  auto save_version = [&](const char* state) -> bool {
    RunFolderWriter& writer = *writer_of_lead;
    const std::string& dir = writer.begin();
    TrainRunInfo info;
    info.state = state;
    info.resumed_from = resume_checkpoint;
    info.profile = a.profile;
    Accuracy acc;
    RunContents contents = train_contents(trainer, earlier, info, &acc);
    std::vector<std::string> written = write_run_contents(dir, contents);
    trainer.save(dir + "/model.safetensors");
    written.push_back("model.safetensors");
    const double seconds = trainer.train_seconds();
    const int64_t steps_here = static_cast<int64_t>(trainer.losses().size());
    const auto& losses = contents.losses;
    bool pictures_ok = true;
    pictures_error.clear();
    std::string skipped;
    if (!a.no_pictures) pictures_ok = draw_pictures(contents, dir, &written, &pictures_error, {}, &skipped);
    if (!skipped.empty() && !skipped_said) std::fprintf(stderr, "warning: %s\n", skipped.c_str());
    skipped_said = skipped_said || !skipped.empty();
    pictures_error = writer.in_folder_terms(pictures_error);
    set_pictures_outcome(&contents, !a.no_pictures && pictures_ok, pictures_error);
    write_json(dir + "/metrics.json", contents.metrics);
    written.push_back("metrics.json");
    writer.commit(CarryOver::kUserFiles);
    if (!quiet && std::string(state) != "in progress") {
      fmt::print("{}: validation accuracy {:.4f} ({} of {} positions), final loss {:.4f}\n", config.task, acc.value(),
                 acc.correct, acc.total, losses.empty() ? 0.0f : losses.back());
      const nlohmann::json& majority = contents.metrics["val_majority_accuracy"];
      if (majority.is_number())  // the bar: always answering the most common class
        fmt::print("(always answering {}, the most common target, would score {:.4f})\n",
                   contents.metrics["val_majority_class"].get<int64_t>(), majority.get<double>());
      fmt::print("{} steps in {:.2f} s ({:.0f} steps/s, {}{} thread{}), arena {} bytes (lower bound {}{})\n",
                 steps_here, seconds, seconds > 0 ? static_cast<double>(steps_here) / seconds : 0.0,
                 ranks > 1 ? fmt::format("{} ranks × ", ranks) : "", options.threads, options.threads == 1 ? "" : "s",
                 ex.plan().arena_bytes, ex.plan().lower_bound_bytes,
                 ex.train_shards() > 0   ? fmt::format("; steps in {} shards", ex.train_shards())
                 : ex.chunk_rows() > 0 ? fmt::format("; steps in chunks of {} sequences", ex.chunk_rows())
                                       : "");
      if (ranks > 1)
        fmt::print("summed {} bytes per step across the ranks, {:.3f} s of {:.2f} in the sums (rank 0)\n",
                   steps_here > 0 ? group->bytes_summed() / steps_here : 0,
                   group->seconds_summing(), seconds);
      if (a.profile) fmt::print("profile: {}", ex.profile_report(10));
      std::string names;
      for (const auto& n : written) names += (names.empty() ? "" : ", ") + n;
      fmt::print("wrote {}/: {}\n", out, names);
    }
    return pictures_ok;
  };
  auto save_run = [&](const char* state) -> bool {
    if (!lead) return true;
    RunFolderWriter& writer = *writer_of_lead;
    try {
      return save_version(state);
    } catch (const FileError& e) {
      throw FileError(writer.in_folder_terms(e.what()) +
                      (writer.commits() > 0 ? " (" + out + " holds the previous save)" : " (" + out + " is unchanged)"));
    }
  };

  if (!quiet)
    fmt::print("training {}: {} train / {} val sequences, {} epochs of {} steps, batch {}, lr {}, seed {}, {}{} thread{}\n",
               config.task, trainer.data().train.size, trainer.data().val.size, options.training.epochs,
               trainer.batches_per_epoch(), options.training.batch_size, options.training.lr, options.seed,
               ranks > 1 ? fmt::format("{} ranks × ", ranks) : "", options.threads, options.threads == 1 ? "" : "s");
  std::fflush(stdout);
  bool finished = false, pictures_ok = true;
  {
    // Caught until the last save is written: a signal after the last step (during the final
    // evaluation, pictures or folder write) must not lose the finished run. A second signal
    // acts at once (SA_RESETHAND); the folder then keeps its previous version.
    StopSignals signals;
    g_stop_signal = 0;
    try {
      finished = trainer.train(
          [&](const StepReport& r) {
            progress.step(r);
            if (a.save_every > 0 && r.step % a.save_every == 0 && r.step != r.total_steps && !g_stop_signal)
              save_run("in progress");
          },
          [&](const EpochReport& r) { progress.epoch(r); }, [] { return g_stop_signal != 0; });
    } catch (const NumericError& e) {
      progress.abort();
      const bool saved = writer_of_lead && writer_of_lead->commits() > 0;
      throw NumericError(std::string(e.what()) + (saved ? " (" + out + " holds the last save)"
                                                        : " (files in " + out + " are unchanged)"));
    }
    if (!finished) progress.abort();
    pictures_ok = save_run(finished ? "finished" : "stopped");
  }
  if (finished && g_stop_signal && lead)
    std::fprintf(stderr, "%s arrived during or after the last step: the finished run is saved in %s\n",
                 g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", out.c_str());
  if (!finished) {
    const int sig = g_stop_signal ? static_cast<int>(g_stop_signal) : SIGTERM;  // another rank's signal
    if (!lead) return 128 + sig;
    const char* by = !g_stop_signal ? "a signal to another rank" : sig == SIGINT ? "SIGINT" : "SIGTERM";
    std::fprintf(stderr, "stopped by %s after step %lld: %s holds this step; continue with --resume %s\n", by,
                 static_cast<long long>(trainer.step()), out.c_str(), out.c_str());
    return 128 + sig;
  }
  if (!pictures_ok) {
    std::fprintf(stderr, "error: pictures not drawn: %s (everything else is saved in %s)\n", pictures_error.c_str(),
                 out.c_str());
    return kExitPicturesFailed;
  }
  return 0;
}

namespace {

struct LoadedModel {
  ModelConfig config;
  TrainerOptions options;
  std::unique_ptr<ModelRunner> runner;
  int64_t step = 0;
};

LoadedModel load_model(const std::string& path, int threads, int64_t max_batch, Precision precision) {
  LoadedModel m;
  const auto meta = read_checkpoint_metadata(path);
  m.config = model_config_from_metadata(meta, path);
  m.options = trainer_options_from_metadata(meta, path);
  m.runner = std::make_unique<ModelRunner>(m.config, max_batch, threads, m.options.seed, false, precision);
  m.step = m.runner->load(path).step;
  return m;
}

}  // namespace

int run_eval(const EvalArgs& a) {
  const std::string path = checkpoint_in(a.checkpoint);
  LoadedModel m = load_model(path, a.threads, 64, parse_precision(a.precision));
  require_known_task(m.config, path);  // scored against its rule, on its data
  Dataset d;
  std::string source;
  if (!a.data.empty()) {
    d = load_sequences(a.data, m.config, "the checkpoint " + path);
    const bool has_targets = d.has_targets();
    if (!has_targets) {  // tokens alone: scored against the task's own rule
      d.y.resize(d.x.size());
      for (int64_t i = 0; i < d.size; ++i) task_targets(m.config, d.tokens(i), d.y.data() + i * d.seq_len);
    }
    source = a.data + (has_targets ? "" : " (targets from the task's rule)");
  } else {
    // seed + 1000 kept within the seeds --seed takes, [0, 2^63 − 1] (wrapping past the top),
    // so the seed named below can be given back; the checkpoint's seed is in that range too.
    const uint64_t fresh_seed = (m.options.seed + 1000) % (uint64_t{1} << 63);
    const uint64_t seed = std::find(a.given.begin(), a.given.end(), "seed") != a.given.end() ? a.seed : fresh_seed;
    const bool given_size = std::find(a.given.begin(), a.given.end(), "val-size") != a.given.end();
    const int64_t n = given_size ? a.val_size : m.options.training.val_size;
    if (n < 1)  // a library model trained without a validation set
      throw UsageError(path + " records no validation set size: give --val-size N");
    check_generated_size(n, m.config.seq_len, (given_size ? "--val-size " : "the checkpoint's val_size ") + std::to_string(n));
    Rng rng(seed);
    d = generate_dataset(m.config, n, rng);
    source = fmt::format("{} fresh sequence{} (seed {})", n, n == 1 ? "" : "s", seed);
  }
  const Accuracy acc = m.runner->evaluate(d);
  if (acc.total == 0) {  // (every target -1: nothing to score, not an accuracy of 0)
    fmt::print("{} at step {}: no accuracy: none of the {} positions has a target (all -1) in {}\n", m.config.task,
               m.step, d.size * m.config.seq_len, source);
    return 0;
  }
  fmt::print("{} at step {}: accuracy {:.4f} ({} of {} positions) on {}\n", m.config.task, m.step, acc.value(),
             acc.correct, acc.total, source);
  const MajorityBaseline majority = majority_baseline(d);
  fmt::print("(always answering {}, the most common target, would score {:.4f})\n", majority.cls,
             majority.accuracy.value());
  return 0;
}

int run_infer(const InferArgs& a) {
  if (!a.data.empty() && !a.tokens.empty()) throw UsageError("--tokens and --data: give one of them");
  // infer's --out folder is replaced as a whole (like a run folder): a trained model there would go.
  if (!a.out.empty() && fs::exists(fs::path(a.out) / "model.safetensors"))
    throw UsageError("--out " + a.out + " holds a trained model (model.safetensors): infer replaces its folder as a "
                     "whole, so the model would be lost; give another folder");
  if (!a.data.empty()) return run_infer_data(a);
  if (a.tokens.empty()) throw UsageError("infer needs --tokens \"...\" (one sequence) or --data FILE (many)");
  if (a.logits || a.attention != "all" || a.batch_size != 500)
    throw UsageError("--logits, --attention and --batch-size apply to --data");
  const std::string path = checkpoint_in(a.checkpoint);
  LoadedModel m = load_model(path, a.threads, 1, parse_precision(a.precision));
  const ModelConfig& c = m.config;
  std::vector<int32_t> tokens;
  {
    std::stringstream ss(a.tokens);
    std::string item;
    while (ss >> item) {
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      if (*end != '\0') throw UsageError("--tokens: '" + item + "' is not an integer");
      if (v < 0 || v >= c.vocab)
        throw UsageError(fmt::format("--tokens: token {} is outside the vocabulary [0, {})", item, c.vocab));
      tokens.push_back(static_cast<int32_t>(v));
    }
  }
  if (static_cast<int64_t>(tokens.size()) != c.seq_len)
    throw UsageError(fmt::format("--tokens: the model takes {} tokens, got {}", c.seq_len, tokens.size()));
  std::vector<int32_t> targets(tokens.size());
  task_targets(c, tokens.data(), targets.data());
  const SequenceResult r = m.runner->run_sequence(tokens.data());

  auto row = [](const char* name, const std::vector<int32_t>& v) {
    std::string s;
    for (int32_t x : v) s += fmt::format("{:>4}", x < 0 ? std::string("-") : std::to_string(x));
    fmt::print("{:<12}{}\n", name, s);
  };
  row("tokens", tokens);
  row("predictions", r.predictions);
  row("targets", targets);
  int64_t correct = 0, total = 0;
  for (size_t i = 0; i < targets.size(); ++i)
    if (targets[i] >= 0) ++total, correct += r.predictions[i] == targets[i];
  fmt::print("{} of {} answers correct\n", correct, total);
  const int64_t T = c.seq_len;
  const auto labels = token_labels(tokens);
  for (int64_t l = 0; l < c.layers; ++l)
    for (int64_t h = 0; h < c.heads; ++h) {
      std::string s;
      for (int64_t i = 0; i < T; ++i) {
        const float* w = r.attention.data() + ((l * c.heads + h) * T + i) * T;
        const int64_t j = std::max_element(w, w + T) - w;
        s += fmt::format(" {}→{} ({:.2f})", labels[static_cast<size_t>(i)], labels[static_cast<size_t>(j)], w[j]);
      }
      fmt::print("layer {} head {}, strongest key per query:{}\n", l, h, s);
    }
  if (!a.out.empty()) {
    RunFolderWriter writer(a.out, "attnkit infer");
    const std::string& dir = writer.begin();
    SequenceFiles files;
    files.task = c.task;
    files.seed = m.options.seed;
    files.step = m.step;
    files.tokens = tokens;
    files.targets = targets;
    files.result = r;
    const RunContents contents = sequence_contents(c, files);
    std::vector<std::string> written;
    try {
      written = write_run_contents(dir, contents);
    } catch (const FileError& e) {
      throw FileError(writer.in_folder_terms(e.what()) + " (" + a.out + " is unchanged)");
    }
    std::string error, skipped;
    const bool pictures_ok = a.no_pictures || draw_pictures(contents, dir, &written, &error, {}, &skipped);
    if (!skipped.empty()) std::fprintf(stderr, "warning: %s\n", skipped.c_str());
    error = writer.in_folder_terms(error);
    writer.commit(CarryOver::kUserFiles);
    std::string names;
    for (const auto& n : written) names += (names.empty() ? "" : ", ") + n;
    fmt::print("wrote {}/: {}\n", a.out, names);
    if (!pictures_ok) {
      std::fprintf(stderr, "error: pictures not drawn: %s (everything else is saved in %s)\n", error.c_str(),
                   a.out.c_str());
      return kExitPicturesFailed;
    }
  }
  return 0;
}

}  // namespace attnkit::cli

// attnkit train / eval / infer.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <fmt/core.h>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/npy.h"
#include "models/tasks.h"
#include "models/trainer.h"
#include "tools/commands.h"
#include "tools/render/render_file.h"
#include "tools/run_files.h"

namespace attnkit::cli {
namespace fs = std::filesystem;

bool TrainArgs::has(const std::string& flag) const {
  return std::find(given.begin(), given.end(), flag) != given.end();
}

namespace {

std::vector<int64_t> parse_steps(const std::string& text) {
  std::vector<int64_t> steps;
  if (text.empty() || text == "none") return steps;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0)
      throw UsageError("--snapshot-steps: '" + text + "' is not a comma-separated list of steps >= 0 (e.g. 0,10,20)");
    steps.push_back(v);
  }
  return steps;
}

// "runs/x/model.safetensors" for a folder, the path itself for a file.
std::string checkpoint_in(const std::string& path) {
  return fs::is_directory(path) ? (fs::path(path) / "model.safetensors").string() : path;
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

// Snapshots of a run being resumed (steps before `before` only).
void previous_snapshots(const std::string& dir, const ModelConfig& c, int64_t before, std::vector<int64_t>* steps,
                        std::vector<std::vector<float>>* maps) {
  if (!fs::exists(fs::path(dir) / "snapshots.npy") || !fs::exists(fs::path(dir) / "meta.json")) return;
  const nlohmann::json meta = read_json((fs::path(dir) / "meta.json").string());
  if (!meta.contains("snapshot_steps")) return;
  const auto old_steps = meta["snapshot_steps"].get<std::vector<int64_t>>();
  const NpyArray a = read_npy((fs::path(dir) / "snapshots.npy").string());
  const int64_t per = c.layers * c.heads * c.seq_len * c.seq_len;
  const std::vector<float> data = to_float32(a, dir + "/snapshots.npy");
  if (static_cast<int64_t>(data.size()) != per * static_cast<int64_t>(old_steps.size()))
    throw FileError(dir + "/snapshots.npy: does not match the snapshot steps in meta.json");
  for (size_t i = 0; i < old_steps.size(); ++i) {
    if (old_steps[i] >= before) continue;
    steps->push_back(old_steps[i]);
    maps->emplace_back(data.begin() + static_cast<int64_t>(i) * per, data.begin() + static_cast<int64_t>(i + 1) * per);
  }
}

// The run's pictures and report.html (tools/render/). The run's files are already written, so a
// drawing failure is a warning, not a lost training run.
void add_pictures(const std::string& dir, std::vector<std::string>* written) {
  try {
    const std::vector<std::string> names = render::render_run(dir, dir);
    written->insert(written->end(), names.begin(), names.end());
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: pictures not drawn: %s\n", e.what());
  }
}

}  // namespace

int run_train(const TrainArgs& a) {
  ModelConfig config;
  TrainerOptions options;
  std::string resume_checkpoint, resume_dir;
  if (!a.resume.empty()) {
    // The model, data and optimizer settings come from the checkpoint; --epochs is the new total.
    for (const char* flag : {"batch-size", "lr", "seed", "layers", "heads", "d-model", "mlp", "train-size",
                             "val-size", "causal", "pre-norm", "sample"})
      if (a.has(flag))
        throw UsageError(std::string("--") + flag + " cannot be changed when resuming (it comes from the checkpoint)");
    resume_checkpoint = checkpoint_in(a.resume);
    resume_dir = fs::is_directory(a.resume) ? a.resume : fs::path(a.resume).parent_path().string();
    const auto meta = read_checkpoint_metadata(resume_checkpoint);
    config = model_config_from_metadata(meta, resume_checkpoint);
    options = trainer_options_from_metadata(meta, resume_checkpoint);
    if (config.task != a.task)
      throw UsageError("TASK '" + a.task + "' differs from the checkpoint's task '" + config.task + "'");
    if (a.has("epochs")) options.training.epochs = a.epochs;
    if (a.has("snapshot-steps")) options.training.snapshot_steps = parse_steps(a.snapshot_steps);
    if (a.has("data")) options.data_path = a.data;
  } else {
    config = lesson_config(a.task);
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
  options.profile = a.profile;

  TaskData data;
  if (!options.data_path.empty()) {
    data = load_task_data(options.data_path, config);
    options.training.train_size = data.train.size;
    options.training.val_size = data.val.size;
  } else {
    data = generate_task_data(config, options.training.train_size, options.training.val_size, options.seed);
  }
  if (options.sample >= data.val.size)
    throw UsageError(fmt::format("--sample {} is outside the validation set ({} sequences)", options.sample,
                                 data.val.size));

  const std::string out = !a.out.empty() ? a.out : !resume_dir.empty() ? resume_dir : "runs/" + config.task;
  fs::create_directories(out);

  Trainer trainer(config, options, std::move(data));
  std::vector<float> losses;
  std::vector<int64_t> snap_steps;
  std::vector<std::vector<float>> snaps;
  if (!resume_checkpoint.empty()) {
    trainer.resume(resume_checkpoint);
    const fs::path old_csv = fs::path(resume_dir) / "loss.csv";
    if (fs::exists(old_csv)) {
      losses = read_loss_csv(old_csv.string());
      losses.resize(std::min<size_t>(losses.size(), static_cast<size_t>(trainer.step())));
    }
    previous_snapshots(resume_dir, config, trainer.step(), &snap_steps, &snaps);
  }

  const bool tty = isatty(fileno(stdout)) != 0;
  Progress progress(tty, a.quiet, options.training.epochs);
  if (!a.quiet)
    fmt::print("training {}: {} train / {} val sequences, {} epochs of {} steps, batch {}, lr {}, seed {}, {} thread{}\n",
               config.task, trainer.data().train.size, trainer.data().val.size, options.training.epochs,
               trainer.batches_per_epoch(), options.training.batch_size, options.training.lr, options.seed,
               options.threads, options.threads == 1 ? "" : "s");
  try {
    trainer.train([&](const StepReport& r) { progress.step(r); }, [&](const EpochReport& r) { progress.epoch(r); });
  } catch (const NumericError& e) {
    progress.abort();
    throw NumericError(std::string(e.what()) + " (files in " + out + " are unchanged)");
  }

  losses.insert(losses.end(), trainer.losses().begin(), trainer.losses().end());
  for (size_t i = 0; i < trainer.snapshot_steps().size(); ++i)
    if (std::find(snap_steps.begin(), snap_steps.end(), trainer.snapshot_steps()[i]) == snap_steps.end()) {
      snap_steps.push_back(trainer.snapshot_steps()[i]);
      snaps.push_back(trainer.snapshots()[i]);
    }

  const Dataset& val = trainer.data().val;
  const Accuracy acc = trainer.evaluate(val);
  SequenceFiles files;
  files.task = config.task;
  files.seed = options.seed;
  files.step = trainer.step();
  files.sample = options.sample;
  files.tokens.assign(val.tokens(options.sample), val.tokens(options.sample) + config.seq_len);
  files.targets.assign(val.targets(options.sample), val.targets(options.sample) + config.seq_len);
  files.result = trainer.run_sequence(val.tokens(options.sample));
  files.snapshot_steps = snap_steps;
  files.snapshots = snaps;
  std::vector<std::string> written = write_sequence_files(out, config, files);
  write_loss_csv(out + "/loss.csv", losses);
  trainer.save(out + "/model.safetensors");

  const double seconds = trainer.train_seconds();
  const int64_t steps_here = static_cast<int64_t>(trainer.losses().size());
  const double sps = seconds > 0 ? static_cast<double>(steps_here) / seconds : 0.0;
  const Executor& ex = trainer.executor();
  nlohmann::json metrics = {
      {"task", config.task},
      {"seed", options.seed},
      {"epochs", options.training.epochs},
      {"steps", trainer.step()},
      {"val_accuracy", acc.value()},
      {"val_positions", acc.total},
      {"final_loss", losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(losses.back())},
      {"train_seconds", seconds},
      {"steps_per_second", sps},
      {"steps_this_run", steps_here},
      {"threads", options.threads},
      {"arena_bytes", ex.plan().arena_bytes},
      {"arena_lower_bound_bytes", ex.plan().lower_bound_bytes},
      {"param_count", ex.param_count()},
      {"batch_size", options.training.batch_size},
      {"lr", options.training.lr},
      {"train_size", trainer.data().train.size},
      {"val_size", val.size},
      {"data", options.data_path.empty() ? "generated" : options.data_path},
      {"model", {{"layers", config.layers}, {"heads", config.heads}, {"d_model", config.d_model},
                 {"T", config.seq_len}, {"vocab", config.vocab}, {"classes", config.classes},
                 {"positions", config.positions}, {"causal", config.causal}, {"pre_norm", config.pre_norm},
                 {"block_mlp", config.block_mlp},
                 {"head", config.head == HeadKind::kMlp ? "mlp" : "layernorm-linear"}}},
      {"resumed_from", resume_checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(resume_checkpoint)},
  };
  write_json(out + "/metrics.json", metrics);
  written.insert(written.end(), {"loss.csv", "model.safetensors", "metrics.json"});
  if (a.profile) {
    const std::string report = "per-node times of the training steps (" + config.task + ", batch " +
                               std::to_string(options.training.batch_size) + ", " +
                               std::to_string(options.threads) + " thread(s), " +
                               std::to_string(ex.graph().nodes().size()) + " nodes): " + ex.profile_report(100000);
    write_file_atomic(out + "/profile.txt", report.data(), report.size());
    written.push_back("profile.txt");
  }
  if (!a.no_pictures) add_pictures(out, &written);

  if (!a.quiet) {
    fmt::print("{}: validation accuracy {:.4f} ({} of {} positions), final loss {:.4f}\n", config.task, acc.value(),
               acc.correct, acc.total, losses.empty() ? 0.0f : losses.back());
    fmt::print("{} steps in {:.2f} s ({:.0f} steps/s, {} thread{}), arena {} bytes (lower bound {})\n", steps_here,
               seconds, sps, options.threads, options.threads == 1 ? "" : "s", ex.plan().arena_bytes,
               ex.plan().lower_bound_bytes);
    if (a.profile) fmt::print("profile: {}", ex.profile_report(10));
    std::string names;
    for (const auto& n : written) names += (names.empty() ? "" : ", ") + n;
    fmt::print("wrote {}/: {}\n", out, names);
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

LoadedModel load_model(const std::string& path, int threads, int64_t max_batch) {
  LoadedModel m;
  const auto meta = read_checkpoint_metadata(path);
  m.config = model_config_from_metadata(meta, path);
  m.options = trainer_options_from_metadata(meta, path);
  m.runner = std::make_unique<ModelRunner>(m.config, max_batch, threads, m.options.seed, false);
  m.step = m.runner->load(path).step;
  return m;
}

}  // namespace

int run_eval(const EvalArgs& a) {
  const std::string path = checkpoint_in(a.checkpoint);
  LoadedModel m = load_model(path, a.threads, 64);
  Dataset d;
  std::string source;
  if (!a.data.empty()) {
    d = load_task_data(a.data, m.config).val;
    source = a.data + " (X_val, Y_val)";
  } else {
    const uint64_t seed = std::find(a.given.begin(), a.given.end(), "seed") != a.given.end() ? a.seed : m.options.seed + 1000;
    const int64_t n = std::find(a.given.begin(), a.given.end(), "val-size") != a.given.end() ? a.val_size : m.options.training.val_size;
    Rng rng(seed);
    d = generate_dataset(m.config, n, rng);
    source = fmt::format("{} fresh sequences (seed {})", n, seed);
  }
  const Accuracy acc = m.runner->evaluate(d);
  fmt::print("{} at step {}: accuracy {:.4f} ({} of {} positions) on {}\n", m.config.task, m.step, acc.value(),
             acc.correct, acc.total, source);
  return 0;
}

int run_infer(const InferArgs& a) {
  const std::string path = checkpoint_in(a.checkpoint);
  LoadedModel m = load_model(path, a.threads, 1);
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
        throw UsageError(fmt::format("--tokens: token {} is outside the vocabulary [0, {})", v, c.vocab));
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
    fs::create_directories(a.out);
    SequenceFiles files;
    files.task = c.task;
    files.seed = m.options.seed;
    files.step = m.step;
    files.tokens = tokens;
    files.targets = targets;
    files.result = r;
    auto written = write_sequence_files(a.out, c, files);
    add_pictures(a.out, &written);
    std::string names;
    for (const auto& n : written) names += (names.empty() ? "" : ", ") + n;
    fmt::print("wrote {}/: {}\n", a.out, names);
  }
  return 0;
}

}  // namespace attnkit::cli

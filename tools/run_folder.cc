#include "tools/run_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/npy.h"
#include "models/model_config_json.h"
#include "models/rollout.h"
#include "ops/gemm_bf16.h"

namespace attnkit::cli {
namespace fs = std::filesystem;

namespace {

// A float as the double of its shortest decimal form (0.01f → 0.01, not 0.009999999776482582),
// so that metrics.json shows the number the user gave or the run printed.
double shortest_double(float v) {
  if (!std::isfinite(v)) return static_cast<double>(v);
  char buf[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return std::strtod(buf, nullptr);
}

constexpr char kLockName[] = ".attnkit.lock";
constexpr char kStagingPrefix[] = ".attnkit-staging-";

// The files attnkit writes into a run folder; a new run replaces all of them.
const std::set<std::string>& attnkit_files() {
  static const std::set<std::string> names = {
      "attention.npy", "rollout.npy", "snapshots.npy", "meta.json",   "loss.csv",
      "model.safetensors", "metrics.json", "profile.txt", "attention.png", "links.png",
      "rollout.png", "snapshots.png", "loss.png", "report.html"};
  return names;
}

std::string errno_text() { return std::strerror(errno); }

std::string file_in(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

// `whence` says where the expected shape comes from.
std::vector<float> float_array(const std::string& path, const std::vector<int64_t>& shape,
                               const char* whence = "attention.npy and meta.json") {
  const NpyArray a = read_npy(path);
  if (a.shape != shape)
    throw FileError(path + ": shape " + render::shape_string(a.shape) + ", expected " + render::shape_string(shape) +
                    " (from " + whence + ")");
  return render::finite_weights(a, path);
}

// meta.json's snapshot_steps, which snapshots.npy needs: steps (integers ≥ 0), ascending.
std::vector<int64_t> snapshot_steps_of(const nlohmann::json& meta, const std::string& meta_path) {
  if (!meta.contains("snapshot_steps") || !meta["snapshot_steps"].is_array())
    throw FileError(meta_path + ": no snapshot_steps for snapshots.npy");
  std::vector<int64_t> steps;
  for (const nlohmann::json& v : meta["snapshot_steps"]) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 62)) ||
        v.get<int64_t>() < 0 || (!steps.empty() && v.get<int64_t>() <= steps.back()))
      throw FileError(meta_path + ": snapshot_steps " + meta["snapshot_steps"].dump() +
                      " is not a list of ascending steps (integers from 0)");
    steps.push_back(v.get<int64_t>());
  }
  return steps;
}

std::string steps_text(const std::vector<int64_t>& steps) {
  std::string s;
  for (int64_t x : steps) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

// meta.json's sizes, where present, must be those of attention.npy.
void check_size(const nlohmann::json& meta, const char* key, int64_t actual, const std::string& path) {
  if (!meta.contains("sizes") || !meta["sizes"].is_object() || !meta["sizes"].contains(key)) return;
  const auto& v = meta["sizes"][key];
  if (!v.is_number_integer() || v.get<int64_t>() != actual)
    throw FileError(path + ": sizes." + key + " is " + v.dump() + ", but attention.npy has " + std::to_string(actual));
}

// Takes an exclusive flock on dir/.attnkit.lock. Returns the descriptor, or −1 with the holder's
// description in *holder when another process has it. The file is checked to still be the one at
// that path after locking: a writer replaces the folder (and with it the lock file) on commit.
int lock_folder(const std::string& dir, std::string* holder) {
  const std::string path = file_in(dir, kLockName);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw FileError(path + ": cannot create the run folder's lock file: " + errno_text());
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[512] = {};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      ::close(fd);
      if (err != EWOULDBLOCK) throw FileError(path + ": cannot lock: " + std::strerror(err));
      *holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "another process";
      while (!holder->empty() && (holder->back() == '\n' || holder->back() == ' ')) holder->pop_back();
      return -1;
    }
    struct stat locked {}, current {};
    if (::fstat(fd, &locked) == 0 && ::stat(path.c_str(), &current) == 0 && locked.st_ino == current.st_ino &&
        locked.st_dev == current.st_dev)
      return fd;
    ::close(fd);  // the folder was swapped meanwhile: lock the new one
  }
  throw FileError(path + ": the run folder keeps changing under its lock");
}

void describe_holder(int fd, const std::string& holder) {
  char when[64] = {};
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  const std::string text = "pid " + std::to_string(::getpid()) + ", " + holder + ", since " + when + "\n";
  if (::ftruncate(fd, 0) == 0) {
    const ssize_t ignored = ::pwrite(fd, text.data(), text.size(), 0);
    (void)ignored;  // the description helps people; the lock itself is the flock
  }
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Staging folders of processes that no longer run (killed mid-write) are removed.
void remove_stale_staging(const std::string& parent) {
  DIR* d = ::opendir(parent.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  const std::string prefix = kStagingPrefix;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dash = rest.find('-');
    const std::string digits = rest.substr(0, dash);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  ::closedir(d);
  for (const auto& name : stale) {
    std::error_code ec;
    fs::remove_all(fs::path(parent) / name, ec);
  }
}

// Links (or, where links fail, copies) `from` to `to`, folders recursively.
void carry(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(from))) {
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::create_hard_links, ec);
    if (ec) {
      fs::remove_all(to);
      fs::copy(from, to, fs::copy_options::recursive);
    }
    return;
  }
  if (fs::is_symlink(fs::symlink_status(from))) {
    fs::copy_symlink(from, to);
    return;
  }
  if (::link(from.c_str(), to.c_str()) != 0) fs::copy_file(from, to);
}

}  // namespace

std::vector<std::string> token_labels(const std::vector<int32_t>& tokens) {
  std::vector<std::string> labels;
  for (size_t p = 0; p < tokens.size(); ++p) labels.push_back(std::to_string(tokens[p]) + "\u00b7" + std::to_string(p));
  return labels;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  write_file_atomic(path, text.data(), text.size());
}

nlohmann::json read_json(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path, 1ull << 30);
  try {
    return nlohmann::json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {
    throw FileError(path + ": not valid JSON (" + e.what() + ")");
  }
}

RunContents sequence_contents(const ModelConfig& c, const SequenceFiles& f) {
  RunContents r;
  const int64_t L = c.layers, H = c.heads, T = c.seq_len;
  r.layers = L, r.heads = H, r.T = T;
  r.attention = f.result.attention;
  if (L > 1 && T <= kMaxRolloutT) {  // (longer sequences, from library models only: no rollout.npy)
    r.rollout = attention_rollout(f.result.attention.data(), L, H, T);
  }
  r.snapshot_steps = f.snapshot_steps;
  for (const auto& s : f.snapshots) r.snapshots.insert(r.snapshots.end(), s.begin(), s.end());
  nlohmann::json meta = {
      {"task", f.task},
      {"seed", f.seed},
      {"step", f.step},
      {"tokens", f.tokens},
      {"labels", token_labels(f.tokens)},
      {"predictions", f.result.predictions},
      {"axis_order", {"layer", "head", "query", "key"}},
      {"axes", "attention.npy is [layers, heads, T, T]: rows are queries, columns are keys, each row sums to 1"},
      {"sizes", {{"layers", L}, {"heads", H}, {"T", T}}},
      {"model", model_config_to_json(c)},
  };
  meta["sample"] = f.sample >= 0 ? nlohmann::json(f.sample) : nlohmann::json(nullptr);
  meta["targets"] = f.targets.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.targets);
  if (L > 1) meta["rollout"] = "rollout.npy is [T, T]: R = A_L ... A_1 with A = 0.5*mean_heads + 0.5*I, rows renormalized";
  if (!f.snapshots.empty()) {
    meta["snapshot_steps"] = f.snapshot_steps;
    meta["snapshot_axis_order"] = {"snapshot", "layer", "head", "query", "key"};
  }
  std::vector<std::string> files = {"attention.npy"};
  if (L > 1) files.push_back("rollout.npy");
  if (!f.snapshots.empty()) files.push_back("snapshots.npy");
  files.push_back("meta.json");
  meta["files"] = files;
  r.meta = std::move(meta);
  return r;
}

EarlierRun earlier_run(const std::string& dir, const ModelConfig& config, int64_t step,
                       const std::vector<int64_t>& snapshot_steps) {
  EarlierRun e;
  if (step == 0) return e;
  // loss.csv numbers its lines from step 1: steps whose losses are not there (a bare
  // checkpoint, or a loss.csv cut short) are written as nan, so the new lines keep their numbers.
  const std::string loss_path = file_in(dir, "loss.csv");
  if (fs::exists(loss_path)) e.losses = read_loss_csv(loss_path);
  const size_t known = std::min<size_t>(e.losses.size(), static_cast<size_t>(step));
  if (known < static_cast<size_t>(step))
    e.warnings.push_back(loss_path +
                         (fs::exists(loss_path) ? ": has " + std::to_string(known) + " of the checkpoint's " +
                                                      std::to_string(step) + " steps"
                                                : std::string(": missing")) +
                         ": the losses of steps " + std::to_string(known + 1) + "-" + std::to_string(step) +
                         " are written as nan");
  e.losses.resize(static_cast<size_t>(step), std::numeric_limits<float>::quiet_NaN());

  // Snapshots are labelled by their steps, so missing ones leave a true, shorter record.
  const std::string snapshots_path = file_in(dir, "snapshots.npy"), meta_path = file_in(dir, "meta.json");
  if (fs::exists(snapshots_path)) {
    if (!fs::exists(meta_path)) throw FileError(meta_path + ": missing (it lists the steps of snapshots.npy)");
    const std::vector<int64_t> steps = snapshot_steps_of(read_json(meta_path), meta_path);
    const int64_t per = config.layers * config.heads * config.seq_len * config.seq_len;
    const std::vector<float> maps =
        float_array(snapshots_path, {static_cast<int64_t>(steps.size()), config.layers, config.heads,
                                     config.seq_len, config.seq_len}, "meta.json and the checkpoint");
    for (size_t i = 0; i < steps.size(); ++i)
      if (steps[i] < step) {
        e.snapshot_steps.push_back(steps[i]);
        e.snapshots.emplace_back(maps.begin() + static_cast<int64_t>(i) * per,
                                 maps.begin() + static_cast<int64_t>(i + 1) * per);
      }
  }
  // Without snapshots.npy the earlier snapshots are lost (with it, meta.json lists the steps
  // that were taken: the checkpoint's list holds the steps asked for, some maybe never reached).
  std::vector<int64_t> missing;
  for (int64_t s : snapshot_steps)
    if (s < step) missing.push_back(s);
  if (!fs::exists(snapshots_path) && !missing.empty())
    e.warnings.push_back(snapshots_path + ": missing, so the snapshots of steps " + steps_text(missing) +
                         " (before the checkpoint's step " + std::to_string(step) + ") are not carried over");
  return e;
}

RunContents train_contents(Trainer& trainer, const EarlierRun& earlier, const TrainRunInfo& info, Accuracy* accuracy) {
  const ModelConfig& config = trainer.config();
  const TrainerOptions& options = trainer.options();
  const Executor& ex = trainer.executor();
  const Dataset& val = trainer.data().val;
  SequenceFiles files;
  files.task = config.task;
  files.seed = options.seed;
  files.step = trainer.step();
  files.sample = options.sample;
  files.tokens.assign(val.tokens(options.sample), val.tokens(options.sample) + config.seq_len);
  if (val.has_targets())
    files.targets.assign(val.targets(options.sample), val.targets(options.sample) + config.seq_len);
  else
    files.targets.assign(static_cast<size_t>(config.seq_len), -1);
  files.result = trainer.run_sequence(val.tokens(options.sample));
  files.snapshot_steps = earlier.snapshot_steps;
  files.snapshots = earlier.snapshots;
  for (size_t i = 0; i < trainer.snapshot_steps().size(); ++i)
    if (std::find(files.snapshot_steps.begin(), files.snapshot_steps.end(), trainer.snapshot_steps()[i]) ==
        files.snapshot_steps.end()) {
      files.snapshot_steps.push_back(trainer.snapshot_steps()[i]);
      files.snapshots.push_back(trainer.snapshots()[i]);
    }
  RunContents contents = sequence_contents(config, files);
  contents.losses = earlier.losses;
  contents.losses.insert(contents.losses.end(), trainer.losses().begin(), trainer.losses().end());
  contents.has_losses = true;
  if (info.profile)
    contents.profile = "per-node times of the training steps (" + config.task + ", batch " +
                       std::to_string(options.training.batch_size) + ", " + std::to_string(options.threads) +
                       " thread(s), " + std::to_string(ex.graph().nodes().size()) +
                       " nodes): " + ex.profile_report(100000);

  const Accuracy acc = trainer.evaluate(val);
  if (accuracy) *accuracy = acc;
  const MajorityBaseline baseline = majority_baseline(val);
  const double seconds = trainer.train_seconds();
  const int64_t steps_here = static_cast<int64_t>(trainer.losses().size());
  const auto& losses = contents.losses;
  contents.metrics = {
      {"task", config.task},
      {"state", info.state},
      {"seed", options.seed},
      {"epochs", options.training.epochs},
      {"steps", trainer.step()},
      {"total_steps", options.training.epochs * trainer.batches_per_epoch()},
      {"val_accuracy", acc.value()},
      {"val_positions", acc.total},
      // Always answering the most common class of the validation targets: the bar to clear.
      {"val_majority_class", baseline.cls >= 0 ? nlohmann::json(baseline.cls) : nlohmann::json(nullptr)},
      {"val_majority_accuracy", baseline.cls >= 0 ? nlohmann::json(baseline.accuracy.value()) : nlohmann::json(nullptr)},
      {"final_loss", losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(shortest_double(losses.back()))},
      {"train_seconds", seconds},
      {"steps_per_second", seconds > 0 ? static_cast<double>(steps_here) / seconds : 0.0},
      {"steps_this_run", steps_here},
      {"threads", options.threads},
      {"precision", precision_name(options.precision)},
      // The kernel the bf16 products ran on ("none": float32 products: this CPU has no bf16 kernel,
      // or the SIMD target in use is below AVX3).
      {"bf16_kernel", options.precision == Precision::kBf16
                          ? nlohmann::json(ex.bf16_products() ? bf16_kernel_name(bf16_kernel()) : "none")
                          : nlohmann::json(nullptr)},
      {"ranks", trainer.ranks()},
      {"arena_bytes", ex.plan().arena_bytes},
      {"arena_lower_bound_bytes", ex.plan().lower_bound_bytes},
      // Batch entries per chunk of a training step (ExecutorOptions::train_chunk_rows), 0: whole batches.
      {"train_chunk_rows", ex.train_shards() > 0 ? 0 : ex.chunk_rows()},
      // Data-parallel shards of each step (ExecutorOptions::train_shards), 0: none.
      {"train_shards", ex.train_shards()},
      {"param_count", ex.param_count()},
      {"batch_size", options.training.batch_size},
      {"lr", shortest_double(options.training.lr)},
      {"train_size", trainer.data().train.size},
      {"val_size", val.size},
      {"data", options.data_path.empty() ? "generated" : options.data_path},
      {"model", model_config_to_json(config)},
      {"resumed_from", info.resumed_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(info.resumed_from)},
  };
  if (trainer.ranks() > 1) {
    const Collective& group = *options.collective;
    contents.metrics["communication"] = {
        {"floats_summed_per_step", trainer.floats_summed_per_step()},
        {"bytes_sent_per_step", steps_here > 0 ? group.bytes_summed() / steps_here : 0},
        {"seconds_summing", group.seconds_summing()},  // rank 0's, waiting for the others included
        {"algorithm", "reduce-scatter (MPI_Alltoall, summed in rank order) + MPI_Allgather"},
    };
  }
  return contents;
}

void set_pictures_outcome(RunContents* contents, bool written, const std::string& error) {
  contents->metrics["pictures_written"] = written;
  contents->metrics["pictures_error"] = error.empty() ? nlohmann::json(nullptr) : nlohmann::json(error);
}

std::vector<std::string> write_run_contents(const std::string& dir, const RunContents& r) {
  const int64_t L = r.layers, H = r.heads, T = r.T;
  std::vector<std::string> written;
  write_npy(file_in(dir, "attention.npy"), r.attention.data(), {L, H, T, T});
  written.push_back("attention.npy");
  if (!r.rollout.empty()) {
    write_npy(file_in(dir, "rollout.npy"), r.rollout.data(), {T, T});
    written.push_back("rollout.npy");
  }
  if (!r.snapshot_steps.empty()) {
    write_npy(file_in(dir, "snapshots.npy"), r.snapshots.data(),
              {static_cast<int64_t>(r.snapshot_steps.size()), L, H, T, T});
    written.push_back("snapshots.npy");
  }
  write_json(file_in(dir, "meta.json"), r.meta);
  written.push_back("meta.json");
  if (r.has_losses) {
    write_loss_csv(file_in(dir, "loss.csv"), r.losses);
    written.push_back("loss.csv");
  }
  if (!r.profile.empty()) {
    write_file_atomic(file_in(dir, "profile.txt"), r.profile.data(), r.profile.size());
    written.push_back("profile.txt");
  }
  return written;
}

RunContents read_run_folder(const std::string& dir) {
  RunContents r;
  const std::string attention = file_in(dir, "attention.npy"), meta_path = file_in(dir, "meta.json");
  if (!fs::exists(attention))
    throw FileError(dir + ": no attention.npy (is this a run folder written by `attnkit train` or `infer --out`?)");
  if (!fs::exists(meta_path))
    throw FileError(dir + ": no meta.json beside attention.npy (an `infer --data` folder holds many sequences' maps: "
                    "draw one with `attnkit render " + attention + " --index K --out K.png`)");
  r.meta = read_json(meta_path);
  if (!r.meta.is_object()) throw FileError(meta_path + ": not a JSON object");
  {
    const NpyArray a = read_npy(attention);
    if (a.shape.size() != 4 || a.shape[2] != a.shape[3] || a.shape[0] < 1 || a.shape[1] < 1 || a.shape[2] < 1)
      throw FileError(attention + ": shape " + render::shape_string(a.shape) + ", expected [layers, heads, T, T]");
    r.layers = a.shape[0], r.heads = a.shape[1], r.T = a.shape[2];
    r.attention = render::finite_weights(a, attention);
  }
  const int64_t L = r.layers, H = r.heads, T = r.T;
  check_size(r.meta, "layers", L, meta_path);
  check_size(r.meta, "heads", H, meta_path);
  check_size(r.meta, "T", T, meta_path);
  for (const char* key : {"tokens", "labels", "predictions"})
    if (r.meta.contains(key) && (!r.meta[key].is_array() || static_cast<int64_t>(r.meta[key].size()) != T))
      throw FileError(meta_path + ": " + key + " is not a list of T = " + std::to_string(T) + " entries");
  if (fs::exists(file_in(dir, "rollout.npy"))) r.rollout = float_array(file_in(dir, "rollout.npy"), {T, T});
  if (fs::exists(file_in(dir, "snapshots.npy"))) {
    r.snapshot_steps = snapshot_steps_of(r.meta, meta_path);
    r.snapshots = float_array(file_in(dir, "snapshots.npy"),
                              {static_cast<int64_t>(r.snapshot_steps.size()), L, H, T, T});
  }
  if (fs::exists(file_in(dir, "loss.csv"))) {
    r.losses = read_loss_csv(file_in(dir, "loss.csv"));
    r.has_losses = true;
  }
  if (fs::exists(file_in(dir, "metrics.json"))) {
    r.metrics = read_json(file_in(dir, "metrics.json"));
    if (!r.metrics.is_object()) throw FileError(file_in(dir, "metrics.json") + ": not a JSON object");
  }
  return r;
}

render::RunPictures run_pictures(const RunContents& r, const std::string& fallback_task) {
  render::RunPictures p;
  p.attention.layers = r.layers, p.attention.heads = r.heads, p.attention.rows = r.T, p.attention.cols = r.T;
  p.attention.rank = 4;
  p.attention.weights = r.attention;
  p.rollout = r.rollout;
  p.snapshot_steps = r.snapshot_steps;
  p.snapshots = r.snapshots;
  p.losses = r.losses;
  p.meta = r.meta;
  p.metrics = r.metrics.is_object() ? r.metrics : nlohmann::json::object();
  p.task = fallback_task;
  return p;
}

bool draw_pictures(const RunContents& contents, const std::string& dir, std::vector<std::string>* written,
                   std::string* error, const render::RunRenderOptions& options, std::string* skipped) {
  try {
    const std::vector<std::string> names =
        render::render_run(run_pictures(contents, fs::path(dir).filename().string()), dir, options, skipped);
    written->insert(written->end(), names.begin(), names.end());
    return true;
  } catch (const std::exception& e) {  // Error, or bad_alloc from a picture too large to hold
    *error = e.what();
    for (const char* name : {"attention.png", "links.png", "rollout.png", "snapshots.png", "loss.png", "report.html"})
      std::remove(file_in(dir, name).c_str());
    return false;
  }
}

void write_loss_csv(const std::string& path, const std::vector<float>& losses) {
  std::string text = "step,loss\n";
  char buf[64];
  for (size_t i = 0; i < losses.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%zu,%.9g\n", i + 1, static_cast<double>(losses[i]));
    text += buf;
  }
  write_file_atomic(path, text.data(), text.size());
}

std::string run_file_in(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  for (const char* name : {"model.safetensors", "meta.json", "attention.npy", "metrics.json"})
    if (fs::exists(fs::path(dir) / name, ec)) return name;
  return "";
}

std::vector<float> read_loss_csv(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path, 1ull << 32);
  std::string line;
  std::vector<float> losses;
  size_t pos = 0;
  // Every line attnkit writes ends in '\n': a last line without one was cut short (a copy or a
  // disk that stopped mid-line), and is left out like the lines after it (the caller warns
  // about the missing steps) rather than read as a shorter number.
  auto next_line = [&](std::string* out) {
    if (pos >= bytes.size()) return false;
    size_t end = pos;
    while (end < bytes.size() && bytes[end] != '\n') ++end;
    if (end == bytes.size()) return false;
    out->assign(bytes.begin() + static_cast<std::ptrdiff_t>(pos), bytes.begin() + static_cast<std::ptrdiff_t>(end));
    if (!out->empty() && out->back() == '\r') out->pop_back();  // (a file saved with Windows line ends)
    pos = end + 1;
    return true;
  };
  const std::string header = "step,loss";
  if (bytes.size() == header.size() && std::equal(header.begin(), header.end(), bytes.begin())) return losses;
  if (!next_line(&line) || line != header) throw FileError(path + ": line 1 is not 'step,loss'");
  for (int64_t n = 2; next_line(&line); ++n) {
    const size_t comma = line.find(',');
    char* end = nullptr;
    const long step = comma == std::string::npos ? -1 : std::strtol(line.c_str(), &end, 10);
    const char* value = comma == std::string::npos ? nullptr : line.c_str() + comma + 1;
    const float loss = value == nullptr ? 0.0f : std::strtof(value, &end);
    if (step != static_cast<long>(losses.size()) + 1 || *end != '\0' || end == value)
      throw FileError(path + ": line " + std::to_string(n) + " is not 'step,loss' with step " +
                      std::to_string(losses.size() + 1));
    losses.push_back(loss);
  }
  return losses;
}

RunFolderWriter::RunFolderWriter(const std::string& dir, const std::string& holder) : holder_(holder) {
  if (dir.empty()) throw FileError("the output folder's name is empty");
  dir_ = fs::path(dir).lexically_normal().string();
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (dir_ == "/") throw FileError("/: the filesystem root cannot be an output folder; choose another --out");
  // A new version replaces the whole folder (renamed into its place), so the working folder
  // cannot be it or inside it: the shell would be left in the deleted old version (and ".",
  // "..", with no parent in the name, would have been staged inside themselves).
  std::error_code cwd_ec, dir_ec;
  const fs::path cwd = fs::canonical(fs::current_path(cwd_ec), cwd_ec), target = fs::canonical(dir_, dir_ec);
  if (!cwd_ec && !dir_ec) {
    const auto [cwd_part, target_part] = std::mismatch(cwd.begin(), cwd.end(), target.begin(), target.end());
    if (target_part == target.end())  // every component of target starts cwd
      throw FileError(dir_ + ": is the working folder" + std::string(cwd_part == cwd.end() ? "" : " or holds it") +
                      "; a new version replaces the whole folder, so run from outside it (e.g. cd .. and "
                      "--out " + target.filename().string() + ")");
  }
  // A symbolic link to a folder: the versions replace the folder it points to, the link stays.
  std::error_code link_ec;
  if (fs::is_symlink(fs::symlink_status(dir_, link_ec))) {
    if (dir_ec) throw FileError(dir_ + ": is a symbolic link to a folder that is not there (" +
                                fs::read_symlink(dir_, link_ec).string() + "); create it or choose another --out");
    dir_ = target.string();
  }
  parent_ = fs::path(dir_).parent_path().string();
  if (parent_.empty()) parent_ = ".";
  std::error_code ec;
  const fs::file_status st = fs::status(dir_, ec);
  if (fs::exists(st) && !fs::is_directory(st)) throw FileError(dir_ + ": exists and is not a folder");
  if (!fs::exists(st)) {
    fs::create_directories(parent_, ec);
    if (::mkdir(dir_.c_str(), 0755) == 0) created_ = true;
    else if (errno != EEXIST) throw FileError(dir_ + ": cannot create the folder: " + errno_text());
  }
  std::string other;
  lock_fd_ = lock_folder(dir_, &other);
  if (lock_fd_ < 0)
    throw FileError(dir_ + ": is being written by another process (" + other +
                    "); wait for it to finish, or choose another --out");
  describe_holder(lock_fd_, holder_);
}

RunFolderWriter::~RunFolderWriter() {
  abandon();
  if (created_ && commits_ == 0) {  // leave no empty folder behind a failed first run
    std::remove(file_in(dir_, kLockName).c_str());
    ::rmdir(dir_.c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunFolderWriter::abandon() {
  if (!staging_.empty()) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
    staging_.clear();
  }
  if (staging_lock_fd_ >= 0) ::close(staging_lock_fd_), staging_lock_fd_ = -1;
}

const std::string& RunFolderWriter::begin() {
  abandon();
  remove_stale_staging(parent_);
  staging_ = file_in(parent_, (kStagingPrefix + std::to_string(::getpid()) + "-" + std::to_string(++serial_)).c_str());
  if (::mkdir(staging_.c_str(), 0755) != 0) {
    const std::string why = errno_text();
    staging_.clear();
    throw FileError(dir_ + ": cannot create a staging folder beside it: " + why);
  }
  std::string other;
  staging_lock_fd_ = lock_folder(staging_, &other);
  if (staging_lock_fd_ < 0) throw FileError(staging_ + ": locked by " + other);
  describe_holder(staging_lock_fd_, holder_);
  return staging_;
}

std::string RunFolderWriter::in_folder_terms(const std::string& message) const {
  std::string m = message;
  if (staging_.empty()) return m;
  for (size_t p = m.find(staging_); p != std::string::npos; p = m.find(staging_, p + dir_.size()))
    m.replace(p, staging_.size(), dir_);
  return m;
}

void RunFolderWriter::commit(CarryOver keep) {
  if (staging_.empty()) throw Error("RunFolderWriter::commit without begin()");
  // The previous version's entries this version keeps.
  DIR* d = ::opendir(dir_.c_str());
  if (!d) throw FileError(dir_ + ": cannot read the folder: " + errno_text());
  std::vector<std::string> entries;
  while (const dirent* e = ::readdir(d)) entries.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& name : entries) {
    if (name == "." || name == ".." || name == kLockName || name.find(".tmp.") != std::string::npos) continue;
    if (keep == CarryOver::kUserFiles && attnkit_files().count(name)) continue;
    const fs::path to = fs::path(staging_) / name;
    if (fs::exists(fs::symlink_status(to))) continue;  // written by this version
    try {
      carry(fs::path(dir_) / name, to);
    } catch (const fs::filesystem_error& e) {
      throw FileError(dir_ + "/" + name + ": cannot carry it over into the new version: " + e.what());
    }
  }
  // The new version keeps the folder's permissions (a folder made read-only for others stays so).
  struct stat old_st {};
  if (::stat(dir_.c_str(), &old_st) == 0) ::chmod(staging_.c_str(), old_st.st_mode & 07777);
  sync_dir(staging_);
  // One rename swaps the two folders; where the filesystem cannot exchange, two renames do,
  // with a moment in which the folder is missing.
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) throw FileError(dir_ + ": cannot swap in the new version: " + errno_text());
    const std::string old = staging_ + "-old";
    if (std::rename(dir_.c_str(), old.c_str()) != 0)
      throw FileError(dir_ + ": cannot move the previous version aside: " + errno_text());
    if (std::rename(staging_.c_str(), dir_.c_str()) != 0) {
      const std::string why = errno_text();
      std::rename(old.c_str(), dir_.c_str());
      throw FileError(dir_ + ": cannot move the new version in: " + why);
    }
    std::rename(old.c_str(), staging_.c_str());
  }
  sync_dir(parent_);
  ++commits_;
  // The folder is now the staging folder, whose lock this object holds; the previous version
  // (now at the staging path) goes, with its lock (its permissions, the folder's, may deny
  // its owner writing to it: opened up first so that its entries can go).
  std::error_code ec;
  ::chmod(staging_.c_str(), 0700);
  fs::remove_all(staging_, ec);
  staging_.clear();
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = staging_lock_fd_;
  staging_lock_fd_ = -1;
}

}  // namespace attnkit::cli

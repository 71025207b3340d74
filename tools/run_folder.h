// The run folder: what `attnkit train` and `attnkit infer --out` leave behind, owned by this
// module alone — its files and their schema (README "Files"), the strict reader that `render`
// and `--resume` use, and the writer that changes a folder as one unit.
//
//   attention.npy   [layers, heads, T, T] float32, the sample sequence's attention
//   rollout.npy     [T, T] float32 (models of more than one layer)
//   snapshots.npy   [snapshots, layers, heads, T, T] float32 (with --snapshot-steps)
//   meta.json       what the arrays are: task, step, tokens, labels, predictions, targets, sizes
//   loss.csv        "step,loss", one line per optimizer step (train)
//   model.safetensors  the checkpoint (train)
//   metrics.json    accuracy, loss, speed, settings, model, pictures (train)
//   profile.txt     per-node times (train --profile)
//   *.png, report.html  the pictures (tools/render/)
//
// A writer stages every file of a new version in a hidden folder beside the run folder and then
// swaps the two folders with one rename (renameat2 RENAME_EXCHANGE): a reader, a crash, a full
// disk or a SIGKILL sees the old version or the new one, never a mix. An advisory lock (flock on
// RUN/.attnkit.lock, released by the kernel on any exit) keeps a second writer out.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/lessons.h"
#include "models/trainer.h"
#include "tools/render/render_file.h"

namespace attnkit::cli {

// The attention of one sequence, as a run folder records it.
struct SequenceFiles {
  std::string task;
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t sample = -1;                   // validation index, −1 for --tokens
  std::vector<int32_t> tokens, targets;  // targets may be empty (unknown)
  SequenceResult result;
  std::vector<int64_t> snapshot_steps;   // with snapshots
  std::vector<std::vector<float>> snapshots;
};

// Everything in a run folder but the checkpoint and the pictures, in memory.
struct RunContents {
  int64_t layers = 0, heads = 0, T = 0;
  std::vector<float> attention;          // attention.npy
  std::vector<float> rollout;            // rollout.npy ([T, T]; empty: none)
  std::vector<int64_t> snapshot_steps;   // meta.json snapshot_steps
  std::vector<float> snapshots;          // snapshots.npy
  nlohmann::json meta;                   // meta.json
  std::vector<float> losses;             // loss.csv
  bool has_losses = false;
  nlohmann::json metrics;                // metrics.json (null: none)
  std::string profile;                   // profile.txt ("": none)
};

// The contents that describe one sequence's attention (meta.json, attention, rollout, snapshots).
RunContents sequence_contents(const ModelConfig& config, const SequenceFiles& files);

// What a resumed run keeps of the folder it continues: the losses and snapshots of the steps
// before `step`. Losses loss.csv lacks (a bare checkpoint, a file cut short) are nan, so the
// new lines keep their step numbers; without snapshots.npy the earlier snapshots
// (`snapshot_steps` before `step`) are not carried. `warnings` says what was missing.
struct EarlierRun {
  std::vector<float> losses;
  std::vector<int64_t> snapshot_steps;
  std::vector<std::vector<float>> snapshots;
  std::vector<std::string> warnings;  // lines naming the file and what it lacked
};
EarlierRun earlier_run(const std::string& dir, const ModelConfig& config, int64_t step,
                       const std::vector<int64_t>& snapshot_steps);

// A training run's folder at the trainer's current position, all but the checkpoint and the
// pictures: the sample's maps, the earlier run's losses and snapshots followed by this run's,
// and metrics.json (state: "finished", "stopped" or "in progress"; README "Files"). Evaluates
// the validation set for the accuracy (*accuracy gets it).
struct TrainRunInfo {
  const char* state = "finished";
  std::string resumed_from;  // the checkpoint, "" for a new run
  bool profile = false;      // include profile.txt
};
RunContents train_contents(Trainer& trainer, const EarlierRun& earlier, const TrainRunInfo& info, Accuracy* accuracy);
// Records in metrics.json whether the pictures were drawn and, if not, why ("" = not asked).
void set_pictures_outcome(RunContents* contents, bool written, const std::string& error);

// Writes the contents' files into dir (every write atomic); returns the names written.
std::vector<std::string> write_run_contents(const std::string& dir, const RunContents& contents);

// Reads a run folder: attention.npy and meta.json must be there; loss.csv, metrics.json,
// rollout.npy and snapshots.npy are read when present. Every file is checked against the others
// (shapes against meta.json's sizes, snapshots against snapshot_steps, loss.csv line by line);
// anything wrong is a FileError naming the file.
RunContents read_run_folder(const std::string& dir);

// What the pictures are drawn from (no file is read again).
render::RunPictures run_pictures(const RunContents& contents, const std::string& fallback_task);

// Draws the pictures and report.html into dir. On failure removes the pictures it wrote and
// returns false with the reason in *error (the rest of the folder is kept). *skipped (when
// given) names the pictures left out for maps too large for them (render::render_run).
bool draw_pictures(const RunContents& contents, const std::string& dir, std::vector<std::string>* written,
                   std::string* error, const render::RunRenderOptions& options = {}, std::string* skipped = nullptr);

// The first of attnkit's run files (model.safetensors, meta.json, attention.npy, metrics.json)
// found in dir, or "" (none, or no such folder).
std::string run_file_in(const std::string& dir);

// "step,loss" lines, steps counted from 1, each ending in '\n'.
void write_loss_csv(const std::string& path, const std::vector<float>& losses);
// The losses of a loss.csv, in order; throws FileError naming the line. A last line without its
// '\n' was cut short and is left out (the header alone may lack it: no losses).
std::vector<float> read_loss_csv(const std::string& path);

void write_json(const std::string& path, const nlohmann::json& j);
nlohmann::json read_json(const std::string& path);

// "3·0", "1·1", …: token·position, to tell equal tokens apart.
std::vector<std::string> token_labels(const std::vector<int32_t>& tokens);

// Which entries of the folder's previous version a new version keeps (those it did not write).
enum class CarryOver {
  kUserFiles,  // only files attnkit does not write itself: a new run replaces the whole run
  kAll,        // everything: the new version adds to the folder (render's pictures)
};

// Writes new versions of one folder. Construction takes the folder's lock (creating the folder
// when missing); another process holding it is a FileError naming that process. begin() opens
// a fresh staging folder, the files go there, commit() makes it the folder. Destruction (also
// by an exception) removes an uncommitted staging folder, and the folder itself when this
// object created it and never committed. One writer per folder and process.
class RunFolderWriter {
 public:
  // `holder` describes this process in the lock file, e.g. "attnkit train reversal".
  RunFolderWriter(const std::string& dir, const std::string& holder);
  ~RunFolderWriter();
  RunFolderWriter(const RunFolderWriter&) = delete;
  RunFolderWriter& operator=(const RunFolderWriter&) = delete;

  const std::string& dir() const { return dir_; }
  // A new, empty staging folder (any previous uncommitted one is removed); returns its path.
  const std::string& begin();
  const std::string& staging() const { return staging_; }
  // Swaps the staging folder in; the previous version is removed.
  void commit(CarryOver keep);
  int64_t commits() const { return commits_; }
  // A message about a file being staged, told with the folder's own name ("runs/x/model.safetensors").
  std::string in_folder_terms(const std::string& message) const;

 private:
  void abandon();
  std::string dir_, parent_, holder_, staging_;
  int lock_fd_ = -1, staging_lock_fd_ = -1;
  bool created_ = false;
  int64_t commits_ = 0, serial_ = 0;
};

}  // namespace attnkit::cli

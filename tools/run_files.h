// The files a training run (or an inference) leaves in its output folder: attention.npy,
// meta.json, rollout.npy, snapshots.npy, loss.csv, metrics.json. See README "Files".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/lessons.h"
#include "models/trainer.h"

namespace attnkit::cli {

// What the maps of one sequence are drawn for.
struct SequenceFiles {
  std::string task;
  uint64_t seed = 0;
  int64_t step = 0;
  int64_t sample = -1;               // validation index, −1 for --tokens
  std::vector<int32_t> tokens, targets;  // targets may be empty (unknown)
  SequenceResult result;
  std::vector<int64_t> snapshot_steps;   // with snapshots
  std::vector<std::vector<float>> snapshots;
};

// Writes attention.npy [layers, heads, T, T], rollout.npy [T, T] (layers > 1),
// snapshots.npy [steps, layers, heads, T, T] (if any) and meta.json into dir. Returns the
// names written.
std::vector<std::string> write_sequence_files(const std::string& dir, const ModelConfig& config,
                                              const SequenceFiles& files);

// "step,loss" lines, steps counted from 1.
void write_loss_csv(const std::string& path, const std::vector<float>& losses);
// The losses of a loss.csv, in order (for a resumed run); throws FileError naming the line.
std::vector<float> read_loss_csv(const std::string& path);

void write_json(const std::string& path, const nlohmann::json& j);
nlohmann::json read_json(const std::string& path);

// "3·0", "1·1", …: token·position, to tell equal tokens apart.
std::vector<std::string> token_labels(const std::vector<int32_t>& tokens);

}  // namespace attnkit::cli

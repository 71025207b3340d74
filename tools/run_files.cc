#include "tools/run_files.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/npy.h"
#include "models/rollout.h"

namespace attnkit::cli {

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
  std::ifstream f(path);
  if (!f) throw FileError(path + ": cannot open");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw FileError(path + ": not valid JSON (" + e.what() + ")");
  }
}

std::vector<std::string> write_sequence_files(const std::string& dir, const ModelConfig& c,
                                              const SequenceFiles& f) {
  const int64_t L = c.layers, H = c.heads, T = c.seq_len;
  std::vector<std::string> written;
  write_npy(dir + "/attention.npy", f.result.attention.data(), {L, H, T, T});
  written.push_back("attention.npy");
  if (L > 1) {
    const std::vector<double> r = attention_rollout(f.result.attention.data(), L, H, T);
    const std::vector<float> r32(r.begin(), r.end());
    write_npy(dir + "/rollout.npy", r32.data(), {T, T});
    written.push_back("rollout.npy");
  }
  if (!f.snapshots.empty()) {
    std::vector<float> all;
    for (const auto& s : f.snapshots) all.insert(all.end(), s.begin(), s.end());
    write_npy(dir + "/snapshots.npy", all.data(), {static_cast<int64_t>(f.snapshots.size()), L, H, T, T});
    written.push_back("snapshots.npy");
  }
  nlohmann::json meta = {
      {"task", f.task},
      {"seed", f.seed},
      {"step", f.step},
      {"tokens", f.tokens},
      {"labels", token_labels(f.tokens)},
      {"predictions", f.result.predictions},
      {"axis_order", {"layer", "head", "query", "key"}},
      {"axes", "attention.npy is [layers, heads, T, T]: rows are queries, columns are keys, each row sums to 1"},
      {"sizes", {{"layers", L}, {"heads", H}, {"T", T}, {"vocab", c.vocab}, {"classes", c.classes},
                 {"d_model", c.d_model}}},
      {"causal", c.causal},
  };
  meta["sample"] = f.sample >= 0 ? nlohmann::json(f.sample) : nlohmann::json(nullptr);
  meta["targets"] = f.targets.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.targets);
  if (L > 1) meta["rollout"] = "rollout.npy is [T, T]: R = A_L ... A_1 with A = 0.5*mean_heads + 0.5*I, rows renormalized";
  if (!f.snapshots.empty()) {
    meta["snapshot_steps"] = f.snapshot_steps;
    meta["snapshot_axis_order"] = {"snapshot", "layer", "head", "query", "key"};
  }
  meta["files"] = written;
  meta["files"].push_back("meta.json");
  write_json(dir + "/meta.json", meta);
  written.push_back("meta.json");
  return written;
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

std::vector<float> read_loss_csv(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw FileError(path + ": cannot open");
  std::string line;
  std::vector<float> losses;
  if (!std::getline(f, line) || line != "step,loss") throw FileError(path + ": line 1 is not 'step,loss'");
  for (int64_t n = 2; std::getline(f, line); ++n) {
    const size_t comma = line.find(',');
    char* end = nullptr;
    const long step = comma == std::string::npos ? -1 : std::strtol(line.c_str(), &end, 10);
    const float loss = comma == std::string::npos ? 0.0f : std::strtof(line.c_str() + comma + 1, &end);
    if (step != static_cast<long>(losses.size()) + 1 || *end != '\0')
      throw FileError(path + ": line " + std::to_string(n) + " is not 'step,loss' with step " +
                      std::to_string(losses.size() + 1));
    losses.push_back(loss);
  }
  return losses;
}

}  // namespace attnkit::cli

// attnkit infer --data: a trained model over many sequences. Files: predictions, logits and
// attention maps written in pieces as the batches are answered, so memory stays bounded for
// any number of sequences; the output folder changes as one unit (tools/run_folder.h). Or a
// pipe: --data - reads one sequence per line and answers each line at once.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/core.h>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/npy.h"
#include "models/predictor.h"
#include "models/rollout.h"
#include "models/tasks.h"
#include "tools/commands.h"
#include "tools/run_folder.h"

namespace attnkit::cli {
namespace fs = std::filesystem;
namespace {

// --attention all|none|K,K2,…: the selected sequence indices (sorted), all = every one.
std::vector<int64_t> selected_sequences(const std::string& text, int64_t n, bool* all) {
  *all = text == "all";
  if (*all) return {};
  const std::vector<int64_t> listed = parse_index_list(
      text, "--attention: '" + text + "' is not all, none or a comma-separated list of sequence indices");
  for (int64_t v : listed)
    if (v >= n) throw UsageError(fmt::format("--attention: sequence {} is outside the data ({} sequences)", v, n));
  const std::set<int64_t> picked(listed.begin(), listed.end());
  return {picked.begin(), picked.end()};
}

// One line of space-separated tokens from stdin, checked; false at the end of the input.
bool read_line_tokens(const ModelConfig& c, int64_t line_no, std::vector<int32_t>* tokens) {
  std::string line;
  if (!std::getline(std::cin, line)) return false;
  tokens->clear();
  std::stringstream ss(line);
  std::string item;
  while (ss >> item) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0')
      throw Error(fmt::format("stdin line {}, position {}: '{}' is not an integer token", line_no, tokens->size(), item));
    if (v < 0 || v >= c.vocab)
      throw Error(fmt::format("stdin line {}, position {}: token {} is outside the vocabulary [0, {})", line_no,
                              tokens->size(), item, c.vocab));  // (as written: strtol clamps)
    tokens->push_back(static_cast<int32_t>(v));
  }
  if (static_cast<int64_t>(tokens->size()) != c.seq_len)
    throw Error(fmt::format("stdin line {}: {} tokens, the model takes T = {}", line_no, tokens->size(), c.seq_len));
  return true;
}

int infer_stdin(const InferArgs& a, Predictor& p) {
  if (!a.out.empty() || a.logits || a.attention != "all")
    throw UsageError("--data - answers on stdout; --out, --logits and --attention need a file");
  const ModelConfig& c = p.config();
  std::vector<int32_t> tokens;
  std::string line;
  for (int64_t n = 1; read_line_tokens(c, n, &tokens); ++n) {
    const Prediction& r = p.predict(tokens.data(), 1);
    line.clear();
    for (int64_t i = 0; i < c.seq_len; ++i) line += (i ? " " : "") + std::to_string(r.predictions[i]);
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int run_infer_data(const InferArgs& a) {
  PredictorOptions po;
  po.threads = a.threads;
  po.precision = parse_precision(a.precision);
  if (a.data == "-") {
    po.max_batch = 1;
    Predictor p = Predictor::load(a.checkpoint, po);
    return infer_stdin(a, p);
  }
  if (a.out.empty()) throw UsageError("--data FILE needs --out DIR for predictions.npy and the maps");
  // The data first (checked against the checkpoint's config), then a predictor no larger than
  // it: a few sequences at --batch-size 10000 need no buffers of 10 000.
  const std::string file = checkpoint_in(a.checkpoint);
  const ModelConfig config = model_config_from_metadata(read_checkpoint_metadata(file), file);
  const Dataset d = load_sequences(a.data, config, "the checkpoint " + a.checkpoint);
  const bool has_targets = d.has_targets();
  po.max_batch = std::max<int64_t>(1, std::min<int64_t>(a.batch_size, d.size));
  Predictor p = [&] {
    try {
      return Predictor::load(a.checkpoint, po);
    } catch (const MemoryError& e) {
      throw MemoryError(std::string(e.what()) + "; a smaller --batch-size needs less");
    }
  }();
  const ModelConfig& c = p.config();
  const int64_t T = c.seq_len, L = c.layers, H = c.heads, C = c.classes;

  bool all = false;
  const std::vector<int64_t> chosen = selected_sequences(a.attention, d.size, &all);
  const int64_t maps = all ? d.size : static_cast<int64_t>(chosen.size());

  RunFolderWriter writer(a.out, "attnkit infer " + a.data);
  const std::string& dir = writer.begin();
  std::vector<std::string> written;
  const bool tty = isatty(fileno(stdout)) != 0 && !a.quiet;
  const auto t0 = std::chrono::steady_clock::now();
  Accuracy acc;
  try {
    NpyStreamWriter predictions(dir + "/predictions.npy", "<i4", {d.size, T});
    std::unique_ptr<NpyStreamWriter> logits, attention, rollout;
    if (a.logits) logits = std::make_unique<NpyStreamWriter>(dir + "/logits.npy", "<f4", std::vector<int64_t>{d.size, T, C});
    if (maps > 0) {
      attention = std::make_unique<NpyStreamWriter>(dir + "/attention.npy", "<f4", std::vector<int64_t>{maps, L, H, T, T});
      if (L > 1 && T <= kMaxRolloutT)  // (as the run folder: longer library models get no rollout.npy)
        rollout = std::make_unique<NpyStreamWriter>(dir + "/rollout.npy", "<f4", std::vector<int64_t>{maps, T, T});
    }
    std::vector<float> maps_of_one(static_cast<size_t>(L * H * T * T));
    size_t next_chosen = 0;
    auto last_draw = t0;
    for (int64_t start = 0; start < d.size; start += p.max_batch()) {
      const int64_t n = std::min(p.max_batch(), d.size - start);
      const Prediction& r = p.predict(d.tokens(start), n);
      predictions.append(r.predictions, n * T);
      if (logits) logits->append(r.logits, n * T * C);
      if (has_targets) acc.add(r.predictions, d.y.data() + start * T, n * T);
      if (attention && L == 1) {  // the batch's maps [n, heads, T, T] are in file order: append runs of them
        const int64_t per = H * T * T;
        if (all) attention->append(r.attention[0], n * per);
        while (!all && next_chosen < chosen.size() && chosen[next_chosen] < start + n) {
          const int64_t first = chosen[next_chosen] - start;
          int64_t end = first + 1;
          for (++next_chosen; next_chosen < chosen.size() && chosen[next_chosen] == start + end; ++next_chosen) ++end;
          attention->append(r.attention[0] + first * per, (end - first) * per);
        }
      }
      for (int64_t s = 0; s < n && attention && L > 1; ++s) {  // [layers, heads, T, T] per sequence
        if (!all) {
          if (next_chosen >= chosen.size() || chosen[next_chosen] != start + s) continue;
          ++next_chosen;
        }
        for (int64_t l = 0; l < L; ++l)  // [layers, heads, T, T] of sequence s
          std::copy(r.attention[static_cast<size_t>(l)] + s * H * T * T,
                    r.attention[static_cast<size_t>(l)] + (s + 1) * H * T * T, maps_of_one.begin() + l * H * T * T);
        attention->append(maps_of_one.data(), L * H * T * T);
        if (rollout) {
          const std::vector<float> roll = attention_rollout(maps_of_one.data(), L, H, T);
          rollout->append(roll.data(), T * T);
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (tty && (now - last_draw > std::chrono::milliseconds(100) || start + n == d.size)) {
        last_draw = now;
        const int64_t done = start + n;
        const double el = std::chrono::duration<double>(now - t0).count();
        const int width = 30, filled = static_cast<int>(width * done / d.size);
        fmt::print("\r\033[K[{}{}] {}/{} sequences, {:.0f}/s", std::string(static_cast<size_t>(filled), '#'),
                   std::string(static_cast<size_t>(width - filled), '.'), done, d.size, el > 0 ? done / el : 0.0);
        std::fflush(stdout);
      }
    }
    if (tty) fmt::print("\n");
    predictions.finish();
    written.push_back("predictions.npy");
    if (logits) logits->finish(), written.push_back("logits.npy");
    if (attention) attention->finish(), written.push_back("attention.npy");
    if (rollout) rollout->finish(), written.push_back("rollout.npy");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    nlohmann::json metrics = {
        {"checkpoint", a.checkpoint},
        {"data", a.data},
        {"N", d.size},
        {"T", T},
        {"seconds", seconds},
        {"sequences_per_second", seconds > 0 ? static_cast<double>(d.size) / seconds : 0.0},
        {"threads", a.threads},
        {"precision", a.precision},
        {"batch_size", p.max_batch()},
        {"arena_bytes", p.arena_bytes()},
        {"attention_sequences", all ? nlohmann::json("all") : nlohmann::json(chosen)},
        {"accuracy", has_targets && acc.total > 0 ? nlohmann::json(acc.value()) : nlohmann::json(nullptr)},
        {"positions", has_targets ? nlohmann::json(acc.total) : nlohmann::json(nullptr)},
    };
    write_json(dir + "/metrics.json", metrics);
    written.push_back("metrics.json");
    writer.commit(CarryOver::kUserFiles);
    if (!a.quiet) {
      const char* plural = d.size == 1 ? "" : "s";
      if (has_targets && acc.total > 0)
        fmt::print("{} sequence{} in {:.2f} s ({:.0f}/s): accuracy {:.4f} ({} of {} positions)\n", d.size, plural, seconds,
                   d.size / std::max(seconds, 1e-9), acc.value(), acc.correct, acc.total);
      else if (has_targets)
        fmt::print("{} sequence{} in {:.2f} s ({:.0f}/s): no accuracy: no position has a target (all -1)\n", d.size,
                   plural, seconds, d.size / std::max(seconds, 1e-9));
      else
        fmt::print("{} sequence{} in {:.2f} s ({:.0f}/s)\n", d.size, plural, seconds, d.size / std::max(seconds, 1e-9));
      std::string names;
      for (const auto& x : written) names += (names.empty() ? "" : ", ") + x;
      fmt::print("wrote {}/: {}\n", a.out, names);
    }
  } catch (const FileError& e) {
    throw FileError(writer.in_folder_terms(e.what()) + " (" + a.out + " is unchanged)");
  }
  return 0;
}

}  // namespace attnkit::cli

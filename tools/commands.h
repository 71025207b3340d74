// The attnkit subcommands, each a function of its parsed arguments. tools/cli_parser.cc parses
// the command line (CLI11); tools/attnkit.cc runs the command and maps errors to exit codes:
// UsageError → 2, any other → 1; kExitPicturesFailed and 128 + signal are the commands' own.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace attnkit {
class Collective;
}

namespace attnkit::cli {

// A bad command line found after parsing (e.g. --heads that does not divide --d-model).
// The message names the flag.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The integers >= 0 of a comma-separated list ("0,10,20"; "" and "none": no entries), in
// their order; an entry that is not one throws UsageError(bad_list) (tools/cli_parser.cc).
std::vector<int64_t> parse_index_list(const std::string& text, const std::string& bad_list);

// `train` and `infer --out` saved everything but the pictures, which could not be drawn or
// written (metrics.json says "pictures_written": false and why).
constexpr int kExitPicturesFailed = 3;

// Settings given on the command line; `given` lists the flags the user set explicitly (long
// names without dashes), so defaults can come from the lesson or from a checkpoint.
struct TrainArgs {
  std::string task;
  int64_t epochs = 0, batch_size = 0, train_size = 0, val_size = 0;
  int64_t layers = 0, heads = 0, d_model = 0, mlp = 0, sample = 0, save_every = 0, seq_len = 0, vocab = 0;
  float lr = 0;
  uint64_t seed = 0;
  int threads = 1;
  bool causal = false, pre_norm = false, quiet = false, no_pictures = false, profile = false;
  std::string snapshot_steps, data, out, resume;
  std::string precision = "f32";  // f32 or bf16 (ExecutorOptions::precision)
  int64_t train_chunk = -1;       // ExecutorOptions::train_chunk_rows
  int shards = 0;                 // ExecutorOptions::train_shards
  std::vector<std::string> given;
  bool has(const std::string& flag) const;
};
// group: the data-parallel group of processes (mpirun), nullptr when running alone. Rank 0
// alone prints, draws and writes the run folder.
int run_train(const TrainArgs& args, Collective* group = nullptr);
// The flag SIGINT/SIGTERM set while run_train trains (0 = none): the signal's number.
const volatile int* stop_signal_flag();

struct EvalArgs {
  std::string checkpoint, data;
  int64_t val_size = 0;
  uint64_t seed = 0;
  int threads = 1;
  std::string precision = "f32";
  std::vector<std::string> given;
};
int run_eval(const EvalArgs& args);

struct InferArgs {
  std::string checkpoint, tokens, out, data, attention = "all";
  bool logits = false, quiet = false, no_pictures = false;
  int64_t batch_size = 500;
  int threads = 1;
  std::string precision = "f32";
};
int run_infer(const InferArgs& args);
// infer --data FILE|- (tools/infer_command.cc).
int run_infer_data(const InferArgs& args);

int run_rollout(const std::string& input, const std::string& output);

// attnkit render (tools/render_command.cc): an attention .npy to PNG/SVG/HTML, or a run folder.
struct RenderArgs {
  std::string input, out, tokens, query_tokens, view = "heatmap", title, values = "auto", colormap = "blues";
  int64_t layer = -1, head = -1, index = -1;
  double scale = 2;
};
CLI::App* add_render_subcommand(CLI::App& app, RenderArgs* args);  // tools/cli_parser.cc
int run_render(const RenderArgs& args);

// "runs/x/model.safetensors" for a folder, the path itself for a file (tools/train_command.cc).
std::string checkpoint_in(const std::string& path);

// attnkit demo (tools/demo_command.cc): lesson 000's demonstrations. q, k, v, mask: .npy
// files of the user's own arrays ("" = attnkit's random ones; attention takes all, masks q
// and k); out: the attention or alignment weights as .npy ("" = none).
struct DemoArgs {
  std::string name, out, q, k, v, mask;
  bool causal = false;
};
int run_demo(const DemoArgs& args);
const std::vector<std::string>& demo_names();  // tools/cli_parser.cc

}  // namespace attnkit::cli

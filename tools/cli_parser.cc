#include "tools/cli_parser.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/executor.h"  // ExecutorOptions::kMaxTrainShards
#include <fmt/core.h>

#include "models/task_names.h"

namespace attnkit::cli {

namespace {

namespace fs = std::filesystem;

// Long names of the options the user gave (without dashes).
std::vector<std::string> given_flags(const CLI::App* app) {
  std::vector<std::string> given;
  for (const CLI::Option* o : app->get_options())
    if (o->count() > 0 && !o->get_lnames().empty()) given.push_back(o->get_lnames()[0]);
  return given;
}

// "--epochs: expected an integer >= 0, got 'abc'" (CLI11 prefixes the flag).
CLI::Validator integer_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
          return fmt::format("expected an integer in [{}, {}], got '{}'", lo, hi, text);
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi), "integer_in");
}

// A positive float that stays finite and non-zero in the trainer's float: --lr 1e50 (inf) and
// --lr 1e-50 (0) are usage errors (regression inputs in tests/data/fuzz_cli).
CLI::Validator positive_float() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v))
          return fmt::format("expected a positive number, got '{}'", text);
        if (v > std::numeric_limits<float>::max() || v < std::numeric_limits<float>::min())
          return fmt::format("expected a positive number in [{:g}, {:g}], got '{}'",
                             std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), text);
        return {};
      },
      "POSITIVE", "positive_float");
}

// A number in [lo, hi], NaN refused (CLI::Range lets it through: every comparison with NaN is
// false). The description is CLI::Range's, so the help text reads the same.
CLI::Validator real_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(v >= lo && v <= hi))
          return fmt::format("expected a number in [{:g}, {:g}], got '{}'", lo, hi, text);
        return {};
      },
      fmt::format("FLOAT in [{:g} - {:g}]", lo, hi), "real_in");
}

// A path: "" would quietly mean "generated data" (--data) or "the default folder" (--out).
CLI::Validator path_given() {
  return CLI::Validator([](std::string& text) -> std::string { return text.empty() ? "expected a path, got ''" : ""; },
                        "PATH", "path_given");
}

// An output written as .npy: another extension would name a format the file is not in.
CLI::Validator npy_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty()) return "expected a path, got ''";
        if (fs::path(text).extension() != ".npy")
          return "'" + text + "' does not end in .npy, the format written (draw it with attnkit render)";
        return {};
      },
      "FILE.npy", "npy_path");
}

}  // namespace

const std::vector<std::string>& demo_names() {
  static const std::vector<std::string> names = {"lookup", "scaling", "attention", "masks", "alignment"};
  return names;
}

CLI::App* add_render_subcommand(CLI::App& app, RenderArgs* r) {
  CLI::App* cmd = app.add_subcommand(
      "render", "Draw attention: an .npy of shape [T,T], [Tq,Tk], [H,T,T] or [L,H,T,T] to PNG/SVG/HTML, or a run folder");
  cmd->add_option("input", r->input, "attention .npy, or a run folder (pictures + report.html)")->required()->check(path_given());
  cmd->add_option("--out", r->out, "FILE.png, FILE.svg or FILE.html (a folder for a run folder; default: the run folder)")
      ->check(path_given());
  cmd->add_option("--tokens", r->tokens, "Key (column) labels, space-separated, e.g. \"the black cat\"; also the "
                                         "query labels of a square map");
  cmd->add_option("--query-tokens", r->query_tokens, "Query (row) labels, when they differ from the keys (cross-attention)");
  cmd->add_option("--layer", r->layer, "Only this layer (of [L,H,T,T])")->check(integer_in(0, 1000000));
  cmd->add_option("--head", r->head, "Only this head (of [H,T,T] or [L,H,T,T])")->check(integer_in(0, 1000000));
  cmd->add_option("--index", r->index,
                  "Entry K of an [N,L,H,T,T] .npy (infer --data's attention.npy, snapshots.npy), read alone")
      ->check(integer_in(0, 9223372036854775807LL));
  cmd->add_option("--view", r->view, "heatmap (default) or links (a BertViz-style link diagram)")
      ->check(CLI::IsMember({"heatmap", "links"}));
  cmd->add_option("--title", r->title, "Title above the picture");
  cmd->add_option("--values", r->values, "Weights written in the cells: auto (when they fit), none, 1 or 2 decimals")
      ->check(CLI::IsMember({"auto", "none", "1", "2"}));
  cmd->add_option("--colormap", r->colormap, "blues (default) or viridis")->check(CLI::IsMember({"blues", "viridis"}));
  cmd->add_option("--scale", r->scale, "PNG pixels per point (default 2: sharp on slides)")->check(real_in(0.25, 8.0));
  return cmd;
}

CommandLine::CommandLine()
    : args_(std::make_unique<ParsedArgs>()),
      app_(std::make_unique<CLI::App>(
          "attnkit: train small attention models on the CPU and look at where they attend")) {
  CLI::App& app = *app_;
  ParsedArgs& a = *args_;
  app.require_subcommand(1);

  std::string tasks;
  for (const auto& t : known_tasks()) tasks += (tasks.empty() ? "" : ", ") + t;

  TrainArgs& train = a.train;
  CLI::App* train_cmd = train_ = app.add_subcommand("train", "Train a task model; defaults reproduce the lesson");
  train_cmd->add_option("task", train.task, "Task: " + tasks)->required()->check(CLI::IsMember(known_tasks()));
  train_cmd->add_option("--epochs", train.epochs, "Epochs (total, also when resuming)")->check(integer_in(0, 1000000000));
  train_cmd->add_option("--batch-size", train.batch_size, "Batch size")->check(integer_in(1, 1000000));
  train_cmd->add_option("--lr", train.lr, "Adam learning rate")->check(positive_float());
  train_cmd->add_option("--seed", train.seed, "Seed of data, order and initialization (default 0)")
      ->check(integer_in(0, 9223372036854775807LL));
  train_cmd->add_option("--threads", train.threads, "Threads (default 1)")->check(integer_in(1, 256));
  train_cmd->add_option("--precision", train.precision,
                        "Products in f32 (default) or bf16: bf16 inputs, float32 sums, on AMX or AVX512-BF16; "
                        "parameters, Adam and checkpoints stay float32")
      ->check(CLI::IsMember({"f32", "bf16"}));
  train_cmd->add_option("--train-chunk", train.train_chunk,
                        "Batch entries per chunk of a training step (forward and backward of each chunk, gradients "
                        "summed, one update: gradient accumulation); -1 (default): chunks of >= 1024 rows (256 with "
                        "--precision bf16) when the step's arena would pass 64 MB; 0: whole batches")
      ->check(integer_in(-1, 1000000));
  train_cmd->add_option("--shards", train.shards,
                        "Data-parallel shards of each step's batch, each run alone on a thread, their gradients "
                        "summed in order: the same bits on any --threads (the run depends on --shards instead); "
                        "0 or 1 (default): off")
      ->check(integer_in(0, attnkit::ExecutorOptions::kMaxTrainShards));
  train_cmd->add_option("--seq-len", train.seq_len, "Sequence length T of the generated task (default: the lesson's)")
      ->check(integer_in(2, 4096));
  train_cmd->add_option("--vocab", train.vocab, "Tokens V of the generated task (default: the lesson's)")
      ->check(integer_in(2, 1 << 20));
  train_cmd->add_option("--layers", train.layers, "Attention layers")->check(integer_in(1, 64));
  train_cmd->add_option("--heads", train.heads, "Heads per layer")->check(integer_in(1, 1024));
  train_cmd->add_option("--d-model", train.d_model, "Model width D")->check(integer_in(1, 65536));
  train_cmd->add_option("--mlp", train.mlp, "Hidden width of an MLP after each attention (0 = none)")
      ->check(integer_in(0, 1 << 20));
  train_cmd->add_flag("--causal", train.causal, "Causal attention (no looking at later tokens)");
  train_cmd->add_flag("--pre-norm", train.pre_norm, "Pre-LayerNorm blocks: h + attn(LN(h))");
  train_cmd->add_option("--train-size", train.train_size, "Generated training sequences")->check(integer_in(1, 100000000));
  train_cmd->add_option("--val-size", train.val_size, "Generated validation sequences")->check(integer_in(1, 100000000));
  train_cmd->add_option("--data", train.data, "Train on X_train, Y_train, X_val, Y_val from a numpy .npz")
      ->check(path_given());
  train_cmd->add_option("--out", train.out, "Output folder (default runs/TASK, or the resumed folder)")
      ->check(path_given());
  train_cmd->add_option("--resume", train.resume, "Continue from a run folder (or its model.safetensors)")
      ->check(path_given());
  train_cmd->add_option("--snapshot-steps", train.snapshot_steps,
                        "Steps at which sample K's attention is saved, e.g. 0,10,20 (reversal: 0,10,20,30,60)");
  train_cmd->add_option("--sample", train.sample, "Validation sequence K whose attention is written (default 0)")
      ->check(integer_in(0, 1000000000));
  train_cmd->add_option("--save-every", train.save_every,
                        "Save the run folder (checkpoint and all) every N steps, not only at the end")
      ->check(integer_in(1, 1000000000));
  train_cmd->add_flag("--quiet", train.quiet, "Print nothing but errors");
  train_cmd->add_flag("--no-pictures", train.no_pictures, "Do not draw the PNG pictures and report.html");
  train_cmd->add_flag("--profile", train.profile,
                      "Time every op of the training steps: the slowest are printed, all in OUT/profile.txt");

  EvalArgs& eval = a.eval;
  CLI::App* eval_cmd = eval_ =
      app.add_subcommand("eval", "Accuracy of a checkpoint on a fresh validation set (or --data)");
  eval_cmd->add_option("--checkpoint", eval.checkpoint, "model.safetensors (or its run folder)")
      ->required()
      ->check(path_given());
  eval_cmd->add_option("--data", eval.data, "Evaluate on your sequences: .npz (X_val, Y_val; or X, Y) or .npy int [N, T]")->check(path_given());
  eval_cmd->add_option("--val-size", eval.val_size, "Fresh sequences (default: the training's val size)")
      ->check(integer_in(1, 100000000));
  eval_cmd->add_option("--seed", eval.seed, "Seed of the fresh set (default: training seed + 1000)")
      ->check(integer_in(0, 9223372036854775807LL));
  eval_cmd->add_option("--threads", eval.threads, "Threads (default 1)")->check(integer_in(1, 256));
  eval_cmd->add_option("--precision", eval.precision, "Products in f32 (default) or bf16 (AMX / AVX512-BF16)")
      ->check(CLI::IsMember({"f32", "bf16"}));

  InferArgs& infer = a.infer;
  CLI::App* infer_cmd = infer_ = app.add_subcommand("infer", "Predictions and attention maps of one sequence");
  infer_cmd->add_option("--checkpoint", infer.checkpoint, "model.safetensors (or its run folder)")
      ->required()
      ->check(path_given());
  infer_cmd->add_option("--tokens", infer.tokens, "One sequence, e.g. \"3 1 4 1 5 9 2 6 5 3\"");
  infer_cmd->add_option("--data", infer.data,
                        "Many sequences: .npz (X, optional Y; or X_val, Y_val), .npy int [N, T], or - for stdin "
                        "(a line of tokens in, a line of predictions out)")
      ->check(path_given());
  infer_cmd->add_option("--attention", infer.attention,
                        "With --data: the sequences whose maps attention.npy holds: all (default), none, or K,K2,...");
  infer_cmd->add_flag("--logits", infer.logits, "With --data: also write logits.npy [N, T, classes]");
  infer_cmd->add_option("--batch-size", infer.batch_size, "With --data: sequences per run (default 500)")
      ->check(integer_in(1, 100000));
  infer_cmd->add_flag("--quiet", infer.quiet, "With --data: print nothing but errors");
  infer_cmd->add_flag("--no-pictures", infer.no_pictures,
                      "With --tokens --out: do not draw the PNG pictures and report.html (--data draws none)");
  infer_cmd->add_option("--out", infer.out, "Write attention.npy, meta.json (and rollout.npy) here")
      ->check(path_given());
  infer_cmd->add_option("--threads", infer.threads, "Threads (default 1)")->check(integer_in(1, 256));
  infer_cmd->add_option("--precision", infer.precision, "Products in f32 (default) or bf16 (AMX / AVX512-BF16)")
      ->check(CLI::IsMember({"f32", "bf16"}));

  CLI::App* rollout_cmd = rollout_ = app.add_subcommand("rollout", "Attention rollout of a [layers, heads, T, T] .npy");
  rollout_cmd->add_option("input", a.rollout_in, "attention.npy [layers, heads, T, T]")->required()->check(path_given());
  rollout_cmd->add_option("--out", a.rollout_out, "Output .npy [T, T]")->required()->check(npy_path());

  CLI::App* demo_cmd = demo_ = app.add_subcommand("demo", "Lesson 000's demonstrations");
  demo_cmd->add_option("name", a.demo.name, "lookup, scaling, attention (many queries at once), masks or alignment")
      ->required()
      ->check(CLI::IsMember(demo_names()));
  demo_cmd->add_option("--out", a.demo.out, "attention, alignment: write the weights as .npy [queries, keys]")
      ->check(npy_path());
  demo_cmd->add_option("--q", a.demo.q, "attention, masks: queries .npy [m, d] (e.g. the lesson's numpy arrays)")
      ->check(path_given());
  demo_cmd->add_option("--k", a.demo.k, "attention, masks: keys .npy [n, d]")->check(path_given());
  demo_cmd->add_option("--v", a.demo.v, "attention: values .npy [n, dv]")->check(path_given());
  demo_cmd->add_option("--mask", a.demo.mask, "attention: forbidden positions .npy, bool [m, n] or [n] (true = forbidden)")
      ->check(path_given());
  demo_cmd->add_flag("--causal", a.demo.causal, "attention: forbid keys after the query");

  render_ = add_render_subcommand(app, &a.render);
}

CommandLine::~CommandLine() = default;

void CommandLine::parse(int argc, const char* const* argv) {
  // A missing or misspelt subcommand is named, with the choices, before CLI11's own
  // "A subcommand is required" / "arguments were not expected".
  std::string names;
  bool known = false;
  const std::string first = argc > 1 ? argv[1] : "";
  for (const CLI::App* sub : app_->get_subcommands([](CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known = known || sub->check_name(first);
  }
  if (argc < 2) throw CLI::RequiredError("no subcommand given; choose one of: " + names, CLI::ExitCodes::RequiredError);
  if (!first.empty() && first[0] != '-' && !known) {
    throw CLI::ExtrasError("unknown subcommand '" + first + "'; choose one of: " + names,
                           CLI::ExitCodes::ExtrasError);
  }
  app_->parse(argc, argv);
  ParsedArgs& a = *args_;
  if (train_->parsed()) {
    a.command = Command::kTrain;
    a.train.given = given_flags(train_);
  } else if (eval_->parsed()) {
    a.command = Command::kEval;
    a.eval.given = given_flags(eval_);
  } else if (infer_->parsed()) {
    a.command = Command::kInfer;
  } else if (rollout_->parsed()) {
    a.command = Command::kRollout;
  } else if (demo_->parsed()) {
    a.command = Command::kDemo;
  } else if (render_->parsed()) {
    a.command = Command::kRender;
  }
}

std::vector<int64_t> parse_index_list(const std::string& text, const std::string& bad_list) {
  std::vector<int64_t> out;
  if (text.empty() || text == "none") return out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || errno == ERANGE) throw UsageError(bad_list);
    out.push_back(v);
  }
  if (text.back() == ',') throw UsageError(bad_list);  // getline drops a last empty entry
  return out;
}

}  // namespace attnkit::cli

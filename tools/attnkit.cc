// attnkit: train the lesson models, look at their attention, run lesson 000's demos.
// This file only parses the command line (CLI11) and maps errors to exit codes:
// 0 success, 1 runtime error (one "error: …" line on stderr), 2 usage error.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "engine/error.h"
#include "models/lessons.h"
#include "tools/commands.h"

namespace {

using attnkit::cli::UsageError;

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

CLI::Validator positive_real() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v))
          return fmt::format("expected a positive number, got '{}'", text);
        return {};
      },
      "POSITIVE", "positive_real");
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "usage error: %s\nRun 'attnkit --help' (or 'attnkit SUBCOMMAND --help') for usage.\n",
               message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnkit: train small attention models on the CPU and look at where they attend"};
  app.require_subcommand(1);

  std::string tasks;
  for (const auto& t : attnkit::known_tasks()) tasks += (tasks.empty() ? "" : ", ") + t;

  attnkit::cli::TrainArgs train;
  CLI::App* train_cmd = app.add_subcommand("train", "Train a task model; defaults reproduce the lesson");
  train_cmd->add_option("task", train.task, "Task: " + tasks)->required()->check(CLI::IsMember(attnkit::known_tasks()));
  train_cmd->add_option("--epochs", train.epochs, "Epochs (total, also when resuming)")->check(integer_in(0, 1000000000));
  train_cmd->add_option("--batch-size", train.batch_size, "Batch size")->check(integer_in(1, 1000000));
  train_cmd->add_option("--lr", train.lr, "Adam learning rate")->check(positive_real());
  train_cmd->add_option("--seed", train.seed, "Seed of data, order and initialization (default 0)")
      ->check(integer_in(0, 9223372036854775807LL));
  train_cmd->add_option("--threads", train.threads, "Threads (default 1)")->check(integer_in(1, 256));
  train_cmd->add_option("--layers", train.layers, "Attention layers")->check(integer_in(1, 64));
  train_cmd->add_option("--heads", train.heads, "Heads per layer")->check(integer_in(1, 1024));
  train_cmd->add_option("--d-model", train.d_model, "Model width D")->check(integer_in(1, 65536));
  train_cmd->add_option("--mlp", train.mlp, "Hidden width of an MLP after each attention (0 = none)")
      ->check(integer_in(0, 1 << 20));
  train_cmd->add_flag("--causal", train.causal, "Causal attention (no looking at later tokens)");
  train_cmd->add_flag("--pre-norm", train.pre_norm, "Pre-LayerNorm blocks: h + attn(LN(h))");
  train_cmd->add_option("--train-size", train.train_size, "Generated training sequences")->check(integer_in(1, 100000000));
  train_cmd->add_option("--val-size", train.val_size, "Generated validation sequences")->check(integer_in(1, 100000000));
  train_cmd->add_option("--data", train.data, "Train on X_train, Y_train, X_val, Y_val from a numpy .npz");
  train_cmd->add_option("--out", train.out, "Output folder (default runs/TASK, or the resumed folder)");
  train_cmd->add_option("--resume", train.resume, "Continue from a run folder (or its model.safetensors)");
  train_cmd->add_option("--snapshot-steps", train.snapshot_steps,
                        "Steps at which sample K's attention is saved, e.g. 0,10,20 (reversal: 0,10,20,30,60)");
  train_cmd->add_option("--sample", train.sample, "Validation sequence K whose attention is written (default 0)")
      ->check(integer_in(0, 1000000000));
  train_cmd->add_flag("--quiet", train.quiet, "Print nothing but errors");
  train_cmd->add_flag("--no-pictures", train.no_pictures, "Do not draw the PNG pictures and report.html");

  attnkit::cli::EvalArgs eval;
  CLI::App* eval_cmd = app.add_subcommand("eval", "Accuracy of a checkpoint on a fresh validation set (or --data)");
  eval_cmd->add_option("--checkpoint", eval.checkpoint, "model.safetensors (or its run folder)")->required();
  eval_cmd->add_option("--data", eval.data, "Evaluate on X_val, Y_val of a numpy .npz");
  eval_cmd->add_option("--val-size", eval.val_size, "Fresh sequences (default: the training's val size)")
      ->check(integer_in(1, 100000000));
  eval_cmd->add_option("--seed", eval.seed, "Seed of the fresh set (default: training seed + 1000)")
      ->check(integer_in(0, 9223372036854775807LL));
  eval_cmd->add_option("--threads", eval.threads, "Threads (default 1)")->check(integer_in(1, 256));

  attnkit::cli::InferArgs infer;
  CLI::App* infer_cmd = app.add_subcommand("infer", "Predictions and attention maps of one sequence");
  infer_cmd->add_option("--checkpoint", infer.checkpoint, "model.safetensors (or its run folder)")->required();
  infer_cmd->add_option("--tokens", infer.tokens, "The sequence, e.g. \"3 1 4 1 5 9 2 6 5 3\"")->required();
  infer_cmd->add_option("--out", infer.out, "Write attention.npy, meta.json (and rollout.npy) here");
  infer_cmd->add_option("--threads", infer.threads, "Threads (default 1)")->check(integer_in(1, 256));

  std::string rollout_in, rollout_out;
  CLI::App* rollout_cmd = app.add_subcommand("rollout", "Attention rollout of a [layers, heads, T, T] .npy");
  rollout_cmd->add_option("input", rollout_in, "attention.npy [layers, heads, T, T]")->required();
  rollout_cmd->add_option("--out", rollout_out, "Output .npy [T, T]")->required();

  std::string demo_name, demo_out;
  CLI::App* demo_cmd = app.add_subcommand("demo", "Lesson 000's demonstrations");
  demo_cmd->add_option("name", demo_name, "lookup, scaling, masks or alignment")
      ->required()
      ->check(CLI::IsMember(attnkit::cli::demo_names()));
  demo_cmd->add_option("--out", demo_out, "alignment: write the 5×7 weights as .npy");

  attnkit::cli::RenderArgs render;
  CLI::App* render_cmd = attnkit::cli::add_render_subcommand(app, &render);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  try {
    if (train_cmd->parsed()) {
      train.given = given_flags(train_cmd);
      return attnkit::cli::run_train(train);
    }
    if (eval_cmd->parsed()) {
      eval.given = given_flags(eval_cmd);
      return attnkit::cli::run_eval(eval);
    }
    if (infer_cmd->parsed()) return attnkit::cli::run_infer(infer);
    if (rollout_cmd->parsed()) return attnkit::cli::run_rollout(rollout_in, rollout_out);
    if (demo_cmd->parsed()) return attnkit::cli::run_demo(demo_name, demo_out);
    if (render_cmd->parsed()) return attnkit::cli::run_render(render);
  } catch (const UsageError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return usage_error("no subcommand");
}

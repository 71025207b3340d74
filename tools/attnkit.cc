// attnkit: train the lesson models, look at their attention, run lesson 000's demos.
// This file runs the subcommand the command line names (tools/cli_parser.cc parses it, CLI11)
// and maps errors to exit codes: 0 success, 1 runtime error (one "error: …" line on stderr),
// 2 usage error.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/error.h"
#include "engine/executor.h"
#include "engine/simd_target.h"
#include "ops/gemm.h"
#include "tools/cli_parser.h"
#include "tools/commands.h"
#include "tools/passive_openmp.h"

namespace {

int usage_error(const std::string& message) {
  std::fprintf(stderr, "usage error: %s\nRun 'attnkit --help' (or 'attnkit SUBCOMMAND --help') for usage.\n",
               message.c_str());
  return 2;
}

// `attnkit --version`: the version, the SIMD target the kernels run on and what else there is.
std::string version_text() {
  auto join = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
    return out;
  };
  return std::string("attnkit ") + ATTNKIT_VERSION + "\nSIMD target: " + attnkit::simd_target_name() +
         (std::getenv("ATTNKIT_SIMD_TARGET") ? " (ATTNKIT_SIMD_TARGET)" : "") +
         "\nsupported by this CPU: " + join(attnkit::supported_simd_targets()) +
         "\ncompiled in: " + join(attnkit::compiled_simd_targets());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace attnkit::cli;
  try {
    attnkit::apply_simd_target_env();
  } catch (const attnkit::Error& e) {
    return usage_error(e.what());
  }
  CommandLine command_line;
  command_line.app().set_version_flag("--version", version_text, "Print the version and the SIMD targets, then exit");
  try {
    command_line.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {
    return command_line.app().exit(e);
  } catch (const CLI::CallForHelp& e) {
    return command_line.app().exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return command_line.app().exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  const ParsedArgs& a = command_line.args();
  if (a.command == Command::kTrain) attnkit::prefer_passive_openmp(a.train.threads, argv);
  if (a.command == Command::kEval) attnkit::prefer_passive_openmp(a.eval.threads, argv);
  if (a.command == Command::kInfer) attnkit::prefer_passive_openmp(a.infer.threads, argv);
  try {
    switch (a.command) {
      case Command::kTrain: return run_train(a.train);
      case Command::kEval: return run_eval(a.eval);
      case Command::kInfer: return run_infer(a.infer);
      case Command::kRollout: return run_rollout(a.rollout_in, a.rollout_out);
      case Command::kDemo: return run_demo(a.demo_name, a.demo_out);
      case Command::kRender: return run_render(a.render);
      case Command::kNone: break;
    }
  } catch (const UsageError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return usage_error("no subcommand");
}

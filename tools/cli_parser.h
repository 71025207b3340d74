// The attnkit command line: builds the CLI11 App with every subcommand, option and validator,
// and parses argv into the subcommands' argument structs. Nothing is run here, so the parser
// links without the engine (tests/fuzz/fuzz_cli.cc fuzzes exactly this code).
#pragma once
#include <memory>
#include <string>

#include "tools/commands.h"

namespace CLI {
class App;
}

namespace attnkit::cli {

enum class Command { kNone, kTrain, kEval, kInfer, kRollout, kDemo, kRender };

// Everything the command line can set. CLI11 writes into these fields while parsing.
struct ParsedArgs {
  Command command = Command::kNone;
  TrainArgs train;
  EvalArgs eval;
  InferArgs infer;
  std::string rollout_in, rollout_out;
  DemoArgs demo;
  RenderArgs render;
};

class CommandLine {
 public:
  CommandLine();
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Parses argv (argv[0] is the program name). Throws CLI11's exceptions: CLI::CallForHelp,
  // CLI::CallForAllHelp (help was asked for) and other CLI::ParseError (usage errors, whose
  // message names the flag); hand them to app().exit(e), or print e.what(). On success
  // args().command names the subcommand and TrainArgs::given / EvalArgs::given list the flags
  // the user set. Call once per CommandLine.
  void parse(int argc, const char* const* argv);

  const ParsedArgs& args() const { return *args_; }
  CLI::App& app() { return *app_; }

 private:
  std::unique_ptr<ParsedArgs> args_;
  std::unique_ptr<CLI::App> app_;
  CLI::App *train_ = nullptr, *eval_ = nullptr, *infer_ = nullptr, *rollout_ = nullptr, *demo_ = nullptr,
           *render_ = nullptr;
};

}  // namespace attnkit::cli

// libFuzzer target: the attnkit command-line parser (tools/cli_parser.cc) must answer any argv
// with parsed arguments, a help request or a CLI::ParseError (a usage error naming the flag),
// never a crash, a hang, another exception or undefined behaviour. The input is split on NUL
// bytes into argv[1..]; argv[0] is "attnkit". No command is run. Help output (which main()
// prints) is rendered into a string, so the help formatter is fuzzed too.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"attnkit"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (size > 0) args.push_back(current);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());

  attnkit::cli::CommandLine command_line;
  try {
    command_line.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    std::ostringstream sink;
    command_line.app().exit(e, sink, sink);
  } catch (const CLI::CallForAllHelp& e) {
    std::ostringstream sink;
    command_line.app().exit(e, sink, sink);
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    (void)message;
  }
  return 0;
}

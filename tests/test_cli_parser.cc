// The command-line parser in-process (tools/cli_parser.cc): what it fills in, that usage
// errors name the flag, and that every input in tests/data/fuzz_cli (the fuzz seeds and the
// regression inputs tests/fuzz/fuzz_cli.cc found) parses or fails with a CLI::ParseError only.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli_parser.h"
#include "tools/program_env.h"

namespace {

namespace fs = std::filesystem;
using attnkit::cli::Command;
using attnkit::cli::CommandLine;

// Parses {"attnkit", args...}; returns "" on success, else the CLI11 error's name and message.
std::string parse(CommandLine& cl, const std::vector<std::string>& args) {
  std::vector<const char*> argv{"attnkit"};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    cl.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.get_name() + ": " + e.what();
  }
  return "";
}

// The fuzz target's input format: argv[1..] separated by NUL bytes.
std::vector<std::string> read_args(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  std::string current;
  for (char c : bytes) {
    if (c == '\0') {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  if (!bytes.empty()) args.push_back(current);
  return args;
}

}  // namespace

TEST_CASE("cli parser: train fills TrainArgs and lists the flags given") {
  CommandLine cl;
  REQUIRE(parse(cl, {"train", "neighbor-sum", "--epochs", "3", "--lr=0.003", "--causal", "--seed", "7"}) == "");
  const auto& a = cl.args();
  CHECK(a.command == Command::kTrain);
  CHECK(a.train.task == "neighbor-sum");
  CHECK(a.train.epochs == 3);
  CHECK(a.train.lr == Approx(0.003f));
  CHECK(a.train.causal);
  CHECK(a.train.seed == 7);
  auto given = a.train.given;
  std::sort(given.begin(), given.end());
  CHECK(given == std::vector<std::string>{"causal", "epochs", "lr", "seed"});
}

TEST_CASE("cli parser: each subcommand is reported") {
  const std::vector<std::pair<std::vector<std::string>, Command>> cases = {
      {{"eval", "--checkpoint", "runs/x"}, Command::kEval},
      {{"infer", "--checkpoint", "runs/x", "--tokens", "1 2 3"}, Command::kInfer},
      {{"rollout", "a.npy", "--out", "r.npy"}, Command::kRollout},
      {{"demo", "masks"}, Command::kDemo},
      {{"render", "a.npy", "--out", "a.png", "--scale", "0.25"}, Command::kRender},
  };
  for (const auto& [args, command] : cases) {
    CommandLine cl;
    INFO(args[0]);
    REQUIRE(parse(cl, args) == "");
    CHECK(cl.args().command == command);
  }
}

TEST_CASE("cli parser: usage errors name the flag, help is a CallForHelp") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "subcommand"},
      {{"train", "nope"}, "task"},
      {{"train", "reversal", "--epochs", "-1"}, "--epochs"},
      {{"train", "reversal", "--lr", "0"}, "--lr"},
      {{"train", "reversal", "--lr", "1e50"}, "--lr"},   // inf as a float
      {{"train", "reversal", "--lr", "1e-50"}, "--lr"},  // 0 as a float
      {{"train", "reversal", "--lr", "nan"}, "--lr"},
      {{"train", "reversal", "--threads", "0"}, "--threads"},
      {{"train", "reversal", "--bogus"}, "--bogus"},
      {{"render", "a.npy", "--scale", "nan"}, "--scale"},
      {{"render", "a.npy", "--scale", "9"}, "--scale"},
      {{"demo", "nope"}, "name"},
  };
  for (const auto& [args, flag] : cases) {
    CommandLine cl;
    const std::string error = parse(cl, args);
    INFO(error);
    CHECK(error != "");
    CHECK(error.find(flag) != std::string::npos);
  }
  CommandLine cl;
  const std::vector<const char*> argv{"attnkit", "train", "--help"};
  CHECK_THROWS_AS(cl.parse(3, argv.data()), CLI::CallForHelp);
}

TEST_CASE("cli parser: the fuzz seeds and regression inputs in tests/data/fuzz_cli") {
  int files = 0, regressions = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(ATTNKIT_TEST_DATA) / "fuzz_cli")) {
    if (entry.path().extension() != ".args") continue;
    ++files;
    const std::string name = entry.path().stem().string();
    INFO(name);
    CommandLine cl;
    std::string error;
    // Anything but a CLI::ParseError escapes and fails the test.
    CHECK_NOTHROW(error = parse(cl, read_args(entry.path())));
    if (name.rfind("regression_", 0) == 0) {  // inputs the fuzzer found: now usage errors
      ++regressions;
      CHECK(error.find("ValidationError") != std::string::npos);
    }
    if (error.find("CallForHelp") != std::string::npos) {  // main() prints help: render it
      std::ostringstream sink;
      CHECK(cl.app().exit(CLI::CallForHelp(), sink, sink) == 0);
      CHECK(sink.str().find("attnkit") != std::string::npos);
    }
  }
  CHECK(files >= 10);
  CHECK(regressions >= 3);
}

TEST_CASE("cli parser: comma-separated index lists of --snapshot-steps and --attention") {
  using attnkit::cli::parse_index_list;
  CHECK(parse_index_list("0,10,20", "bad") == std::vector<int64_t>{0, 10, 20});
  CHECK(parse_index_list("7,3,7", "bad") == std::vector<int64_t>{7, 3, 7});  // in the order given
  CHECK(parse_index_list("0, 10", "bad") == std::vector<int64_t>{0, 10});  // a space after a comma
  CHECK(parse_index_list("", "bad").empty());
  CHECK(parse_index_list("none", "bad").empty());
  for (const char* text : {"1,x", "1,,2", "-1", "1,", ",1", "2.5", "99999999999999999999", "1 "}) {
    INFO(text);
    try {
      parse_index_list(text, std::string("bad list ") + text);
      FAIL("accepted");
    } catch (const attnkit::cli::UsageError& e) {
      CHECK(std::string(e.what()) == std::string("bad list ") + text);
    }
  }
}

TEST_CASE("the program's environment: passive OpenMP workers and huge pages, never the user's own settings",
          "[cli]") {
  using attnkit::EnvSetting;
  using attnkit::preferred_environment;
  const EnvSetting passive{"OMP_WAIT_POLICY", "PASSIVE"};
  const EnvSetting huge{"GLIBC_TUNABLES", "glibc.malloc.hugetlb=1"};
  // One thread: no restart, for huge pages neither.
  CHECK(preferred_environment(1, nullptr, nullptr, false).empty());
  CHECK(preferred_environment(1, nullptr, nullptr, true).empty());
  CHECK(preferred_environment(2, nullptr, nullptr, false) == std::vector<EnvSetting>{passive});
  CHECK(preferred_environment(2, nullptr, nullptr, true) == std::vector<EnvSetting>{passive, huge});
  // The user's OMP_WAIT_POLICY, even ACTIVE or empty, stays, and nothing restarts the program.
  CHECK(preferred_environment(2, "ACTIVE", nullptr, true).empty());
  CHECK(preferred_environment(2, "", nullptr, true).empty());
  // Other tunables are kept and the setting appended; a hugetlb of the user's (even 0) stays.
  CHECK(preferred_environment(3, nullptr, "glibc.malloc.arena_max=2", true) ==
        std::vector<EnvSetting>{passive, {"GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"}});
  CHECK(preferred_environment(2, nullptr, "", true) == std::vector<EnvSetting>{passive, huge});
  CHECK(preferred_environment(2, nullptr, "glibc.malloc.hugetlb=0", true) == std::vector<EnvSetting>{passive});
  // After the restart nothing is left to set: the program starts once more at most.
  CHECK(preferred_environment(4, "PASSIVE", "glibc.malloc.hugetlb=1", true).empty());
}

// Generated tasks at other sizes from the command line (--seq-len, --vocab): the model, the
// checkpoint, eval, infer and the files follow the chosen T and V; the tasks' rules hold.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cli_test_util.h"
#include "engine/checkpoint.h"
#include "engine/npy.h"

namespace {

using namespace attnkit::testing;

fs::path scratch(const std::string& name) { return cli_scratch("test_task_sizes_tmp", name); }

std::string config_entry(const fs::path& checkpoint, const std::string& key) {
  const auto meta = attnkit::read_checkpoint_metadata(checkpoint.string());
  const auto it = meta.find("config." + key);
  return it == meta.end() ? "" : it->second;
}

}  // namespace

TEST_CASE("reversal at T = 32 over 16 tokens: learned, and every file, eval and infer follow the sizes") {
  const fs::path dir = scratch("reversal32");
  const fs::path run = dir / "run";
  REQUIRE(run_cli({"train", "reversal", "--seq-len", "32", "--vocab", "16", "--epochs", "3", "--quiet", "--out",
                   run.string()},
                  dir, "train") == 0);
  const auto m = json_file(run / "metrics.json");
  CHECK(m["model"]["seq_len"] == 32);
  CHECK(m["model"]["vocab"] == 16);
  CHECK(m["model"]["classes"] == 16);
  CHECK(m["val_accuracy"].get<double>() > 0.9);
  CHECK(config_entry(run / "model.safetensors", "seq_len") == "32");
  CHECK(config_entry(run / "model.safetensors", "vocab") == "16");
  CHECK(attnkit::read_npy((run / "attention.npy").string()).shape == std::vector<int64_t>{1, 1, 32, 32});
  CHECK(json_file(run / "meta.json")["tokens"].size() == 32);

  Child eval({"eval", "--checkpoint", run.string()}, dir, "eval");
  CHECK(eval.wait() == 0);
  CHECK(slurp(eval.out).find("positions) on 500 fresh sequences") != std::string::npos);
  std::string tokens;
  for (int i = 0; i < 32; ++i) tokens += std::to_string(i % 16) + " ";
  Child infer({"infer", "--checkpoint", run.string(), "--tokens", tokens, "--out", (dir / "infer").string()}, dir,
              "infer");
  CHECK(infer.wait() == 0);
  CHECK(attnkit::read_npy((dir / "infer" / "attention.npy").string()).shape == std::vector<int64_t>{1, 1, 32, 32});
  Child short_infer({"infer", "--checkpoint", run.string(), "--tokens", "1 2 3 4 5 6 7 8"}, dir, "short");
  CHECK(short_infer.wait() == 2);
  CHECK(short_infer.stderr_text().find("the model takes 32 tokens, got 8") != std::string::npos);
  Child big_token({"infer", "--checkpoint", run.string(), "--tokens", "20 " + tokens.substr(2)}, dir, "big");
  CHECK(big_token.wait() == 2);
  CHECK(big_token.stderr_text().find("outside the vocabulary [0, 16)") != std::string::npos);

  // Resuming keeps the sizes: the same values are accepted, others refused.
  CHECK(run_cli({"train", "reversal", "--seq-len", "32", "--epochs", "4", "--quiet", "--no-pictures", "--resume",
                 run.string()},
                dir, "resume") == 0);
  Child other({"train", "reversal", "--seq-len", "16", "--epochs", "5", "--quiet", "--resume", run.string()}, dir,
              "other");
  CHECK(other.wait() == 2);
  CHECK(other.stderr_text().find("--seq-len 16 differs from the checkpoint's 32") != std::string::npos);
}

TEST_CASE("task sizes: classes follow the vocabulary, duplicates keeps two, the rules are usage errors") {
  const fs::path dir = scratch("rules");
  REQUIRE(run_cli({"train", "neighbor-sum", "--vocab", "20", "--epochs", "1", "--quiet", "--no-pictures", "--out",
                   (dir / "ns").string()},
                  dir, "ns") == 0);
  CHECK(json_file(dir / "ns" / "metrics.json")["model"]["classes"] == 20);
  REQUIRE(run_cli({"train", "duplicates", "--seq-len", "24", "--vocab", "40", "--epochs", "1", "--quiet",
                   "--no-pictures", "--out", (dir / "dup").string()},
                  dir, "dup") == 0);
  CHECK(json_file(dir / "dup" / "metrics.json")["model"]["classes"] == 2);
  CHECK(json_file(dir / "dup" / "metrics.json")["model"]["seq_len"] == 24);
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Bad& b : std::vector<Bad>{
           {{"induction", "--seq-len", "40", "--vocab", "20"}, "induction needs V >= T"},
           {{"neighbor-sum", "--seq-len", "2"}, "neighbor-sum needs T >= 3"},
           {{"reversal", "--seq-len", "1"}, "--seq-len"},
           {{"reversal", "--vocab", "1"}, "--vocab"},
           {{"reversal", "--seq-len", "100000"}, "--seq-len"},
       }) {
    std::vector<std::string> args = {"train"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    args.insert(args.end(), {"--out", (dir / "bad").string()});
    Child c(args, dir, "bad");
    INFO(b.message);
    CHECK(c.wait() == 2);
    CHECK(c.stderr_text().find(b.message) != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "bad"));
  }
}

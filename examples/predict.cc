// The inference API against the installed library: trains neighbor-sum briefly with the
// Trainer, saves the checkpoint, loads it into two Predictors (one per batch size, as two
// threads would each hold their own) and checks that they answer alike and that the answers
// are right. Exits non-zero on a wrong result.
#include <attnkit/attnkit.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main() {
  using namespace attnkit;
  const ModelConfig c = lesson_config("neighbor-sum");
  TrainerOptions options;
  options.training = lesson_training("neighbor-sum");
  Trainer trainer(c, options, generate_task_data(c, 3000, 500, 0));
  trainer.train();
  const std::string path = (std::filesystem::temp_directory_path() / "attnkit_example_predict.safetensors").string();
  trainer.save(path);

  Predictor big = Predictor::load(path, {/*threads=*/1, /*max_batch=*/500});
  Predictor one = Predictor::load(path, {1, 1});
  Rng rng(5);
  const Dataset d = generate_dataset(c, 500, rng);
  const Prediction& r = big.predict(d.x.data(), d.size);
  int64_t correct = 0;
  for (int64_t i = 0; i < d.size * c.seq_len; ++i) correct += r.predictions[i] == d.y[static_cast<size_t>(i)];
  const double accuracy = static_cast<double>(correct) / static_cast<double>(d.size * c.seq_len);
  const Prediction& first = one.predict(d.x.data(), 1);
  bool same = true;
  for (int64_t i = 0; i < c.seq_len; ++i) same = same && first.predictions[i] == r.predictions[i];
  std::printf("Predictor: accuracy %.4f on 500 fresh sequences (step %lld), arena %lld bytes; batch-1 answer %s\n",
              accuracy, static_cast<long long>(big.step()), static_cast<long long>(big.arena_bytes()),
              same ? "agrees" : "DIFFERS");
  std::filesystem::remove(path);
  return accuracy > 0.9 && same ? 0 : 1;
}

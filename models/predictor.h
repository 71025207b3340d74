// A trained model loaded for inference: the library's way to call a checkpoint from C++.
//
//   attnkit::Predictor p = attnkit::Predictor::load("runs/neighbor-sum");   // or the .safetensors
//   const attnkit::Prediction& r = p.predict(tokens, n);   // n sequences of T tokens, n ≤ max_batch
//   r.predictions[s * T + i];  r.logits[(s * T + i) * classes + c];  r.attention[l][((s * H + h) * T + i) * T + j]
//
// The graph is forward-only (no saved activations, no gradients: a smaller arena than the
// training graph's) and planned once for max_batch sequences; predict() allocates nothing after
// its first call at a given batch size. Results point into the predictor's memory and stay valid
// until the next predict(). Several predictors may live in one process; one predictor serves one
// thread at a time (its own OpenMP threads inside a call are options.threads).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lessons.h"
#include "trainer.h"

namespace attnkit {

struct PredictorOptions {
  int threads = 1;
  int64_t max_batch = 500;  // sequences per predict() call at most
  Precision precision = Precision::kF32;  // bf16: products on AMX / AVX512-BF16 (ExecutorOptions)
};

struct Prediction {
  int64_t n = 0;                         // sequences in this call
  const float* logits = nullptr;         // [n, T, classes]
  const int32_t* predictions = nullptr;  // [n, T]: argmax over classes
  std::vector<const float*> attention;   // per layer: [n, heads, T, T]
};

class Predictor {
 public:
  // Loads a checkpoint written by attnkit train (a run folder or its model.safetensors).
  // Throws FileError naming the file for anything wrong with it.
  static Predictor load(const std::string& path, const PredictorOptions& options = {});

  const ModelConfig& config() const { return runner_->config(); }
  int64_t step() const { return step_; }            // optimizer steps the checkpoint had trained
  int64_t max_batch() const { return max_batch_; }
  int64_t arena_bytes() const { return runner_->executor().plan().arena_bytes; }

  // Runs n sequences of T tokens each ([n, T], row-major), 1 ≤ n ≤ max_batch. Tokens must be
  // in [0, vocab): an Error names the sequence and the position of the first that is not.
  const Prediction& predict(const int32_t* tokens, int64_t n);

 private:
  Predictor() = default;
  std::unique_ptr<ModelRunner> runner_;
  int64_t step_ = 0, max_batch_ = 0;
  std::vector<int32_t> predictions_;
  Prediction result_;
};

}  // namespace attnkit

#include "models/predictor.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "ops/elementwise.h"  // argmax_rows

namespace attnkit {

Predictor Predictor::load(const std::string& path, const PredictorOptions& options) {
  if (options.max_batch < 1) throw Error("Predictor: max_batch must be >= 1, got " + std::to_string(options.max_batch));
  if (options.threads < 1) throw Error("Predictor: threads must be >= 1, got " + std::to_string(options.threads));
  const std::string file =
      std::filesystem::is_directory(path) ? (std::filesystem::path(path) / "model.safetensors").string() : path;
  const auto meta = read_checkpoint_metadata(file);
  const ModelConfig config = model_config_from_metadata(meta, file);
  const TrainerOptions trained = trainer_options_from_metadata(meta, file);
  Predictor p;
  p.max_batch_ = options.max_batch;
  p.runner_ = std::make_unique<ModelRunner>(config, options.max_batch, options.threads, trained.seed,
                                            /*with_backward=*/false, options.precision);
  p.step_ = p.runner_->load(file).step;
  p.predictions_.resize(static_cast<size_t>(options.max_batch * config.seq_len));
  p.result_.attention.resize(static_cast<size_t>(config.layers));
  return p;
}

const Prediction& Predictor::predict(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = config();
  if (n < 1 || n > max_batch_)
    throw Error("Predictor::predict: " + std::to_string(n) + " sequences, expected 1 to " + std::to_string(max_batch_));
  const int64_t T = c.seq_len;
  Executor& ex = runner_->executor();
  const Model& m = runner_->model();
  ex.set_batch(n);
  std::memcpy(ex.i32(m.ids.id()), tokens, static_cast<size_t>(n * T) * 4);
  // The inference graph has no loss, so nothing reads the targets. The executor checks the
  // tokens (its one check names the sequence and the position of the first bad one).
  ex.forward();
  const float* logits = ex.f32(m.logits.id());
  argmax_rows(logits, n * T, c.classes, predictions_.data());
  result_.n = n;
  result_.logits = logits;
  result_.predictions = predictions_.data();
  for (int64_t l = 0; l < c.layers; ++l)
    result_.attention[static_cast<size_t>(l)] = ex.f32(m.attention[static_cast<size_t>(l)].attn().id());
  return result_;
}

}  // namespace attnkit

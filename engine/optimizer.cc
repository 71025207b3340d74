#include "engine/optimizer.h"

namespace attnkit {

Adam::Adam(int64_t param_count, AdamOptions options)
    : n_(param_count), options_(options), m_(param_count * 4), v_(param_count * 4) {}

void Adam::begin_step() {
  ++steps_;
  AdamStep hyper;
  hyper.lr = options_.lr;
  hyper.beta1 = options_.beta1;
  hyper.beta2 = options_.beta2;
  hyper.eps = options_.eps;
  hyper.weight_decay = options_.weight_decay;
  hyper.decoupled = options_.decoupled;
  step_ = adam_step_for(hyper, steps_);
}

void Adam::update(float* params, const float* grads, Slice s) const {
  adam_update(params, grads, m_.f32(), v_.f32(), n_, step_, s);
}

}  // namespace attnkit

// The list of ops, the single source of OpKind and of the op table: each entry names the op's
// kind and its definition (an OpDef in its own file, engine/op_*.cc). Adding an op is one line
// here plus that file (README "Adding an op").
#pragma once

// X(kind, definition)
#define ATTNKIT_OPS(X)                                  \
  X(kEmbedding, kEmbeddingOp)                           \
  X(kLinear, kLinearOp)                                 \
  X(kAdd, kAddOp)                                       \
  X(kRelu, kReluOp)                                     \
  X(kLayerNorm, kLayerNormOp)                           \
  X(kAttention, kAttentionOp)                           \
  X(kCrossEntropy, kCrossEntropyOp)                     \
  X(kEmbeddingBackward, kEmbeddingBackwardOp)           \
  X(kLinearBackward, kLinearBackwardOp)                 \
  X(kReluBackward, kReluBackwardOp)                     \
  X(kLayerNormBackward, kLayerNormBackwardOp)           \
  X(kAttentionBackward, kAttentionBackwardOp)           \
  X(kCrossEntropyBackward, kCrossEntropyBackwardOp)     \
  X(kAccumulate, kAccumulateOp)                         \
  X(kBiasBackward, kBiasBackwardOp)                     \
  X(kOnes, kOnesOp)

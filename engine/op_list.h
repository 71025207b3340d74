// The list of ops, the single source of OpKind and of the op table: each entry names the op's
// kind and its definition (an OpDef in its own file, engine/op_*.cc). Adding an op is one line
// here plus that file (README "Adding an op").
#pragma once

// X(kind, definition)
#define ATTNKIT_CORE_OPS(X)                             \
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
  X(kAttentionValuesBackward, kAttentionValuesBackwardOp) \
  X(kCrossEntropyBackward, kCrossEntropyBackwardOp)     \
  X(kAccumulate, kAccumulateOp)                         \
  X(kBiasBackward, kBiasBackwardOp)                     \
  X(kOnes, kOnesOp)

// Primitive ops (engine/functional.h), one group per line so groups are added independently.
#define ATTNKIT_SHAPE_OPS(X)                            \
  X(kMatmul, kMatmulOp)                                 \
  X(kMatmulBackward, kMatmulBackwardOp)                 \
  X(kTranspose, kTransposeOp)                           \
  X(kReshape, kReshapeOp)                               \
  X(kConcat, kConcatOp)                                 \
  X(kNarrow, kNarrowOp)                                 \
  X(kNarrowBackward, kNarrowBackwardOp)
#define ATTNKIT_MATH_OPS(X)                             \
  X(kAddBroadcast, kAddBroadcastOp)                     \
  X(kSub, kSubOp)                                       \
  X(kMul, kMulOp)                                       \
  X(kDiv, kDivOp)                                       \
  X(kAddScalar, kAddScalarOp)                           \
  X(kMulScalar, kMulScalarOp)                           \
  X(kRsubScalar, kRsubScalarOp)                         \
  X(kDivScalar, kDivScalarOp)                           \
  X(kRdivScalar, kRdivScalarOp)                         \
  X(kExp, kExpOp)                                       \
  X(kLog, kLogOp)                                       \
  X(kTanh, kTanhOp)                                     \
  X(kSigmoid, kSigmoidOp)                               \
  X(kGelu, kGeluOp)                                     \
  X(kSum, kSumOp)                                       \
  X(kMean, kMeanOp)                                     \
  X(kSumLast, kSumLastOp)                               \
  X(kMeanLast, kMeanLastOp)                             \
  X(kExpBackward, kExpBackwardOp)                       \
  X(kLogBackward, kLogBackwardOp)                       \
  X(kTanhBackward, kTanhBackwardOp)                     \
  X(kSigmoidBackward, kSigmoidBackwardOp)               \
  X(kGeluBackward, kGeluBackwardOp)                     \
  X(kDivBackward, kDivBackwardOp)                       \
  X(kSumTo, kSumToOp)                                   \
  X(kSumBackward, kSumBackwardOp)                       \
  X(kMeanBackward, kMeanBackwardOp)
#define ATTNKIT_SOFTMAX_OPS(X)                          \
  X(kSoftmax, kSoftmaxOp)                               \
  X(kSoftmaxBackward, kSoftmaxBackwardOp)               \
  X(kSoftmaxMaskGrad, kSoftmaxMaskGradOp)               \
  X(kMaskedFill, kMaskedFillOp)                         \
  X(kMaskedFillBackward, kMaskedFillBackwardOp)         \
  X(kDropout, kDropoutOp)                               \
  X(kDropoutBackward, kDropoutBackwardOp)               \
  X(kMseLoss, kMseLossOp)                               \
  X(kMseLossBackward, kMseLossBackwardOp)

#define ATTNKIT_OPS(X) ATTNKIT_CORE_OPS(X) ATTNKIT_SHAPE_OPS(X) ATTNKIT_MATH_OPS(X) ATTNKIT_SOFTMAX_OPS(X)

// The argument validation of the kernels/cuda/ entries. Every entry validates before it touches
// the device, so these run (and must pass) on machines without a GPU: the pointers below are
// never dereferenced and the fake stream is never used.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/encoder.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/reduce.h"

namespace hoist::kernels::cuda {
namespace {

// Never dereferenced: validation fails before any use.
void* const kFake = reinterpret_cast<void*>(uintptr_t{256});
float* const kFakeFloats = static_cast<float*>(kFake);
const int32_t* const kFakeInts = static_cast<const int32_t*>(kFake);
const cudaStream_t kFakeStream = reinterpret_cast<cudaStream_t>(uintptr_t{512});

// kInvalidArgument whose message names the op and each of `words`.
void ExpectInvalid(const Status& status, std::initializer_list<const char*> words) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  for (const char* word : words) {
    EXPECT_NE(status.message().find(word), std::string::npos)
        << "'" << word << "' not in: " << status.message();
  }
}

TEST(CudaKernelArguments, NullPointersAreNamed) {
  ExpectInvalid(GeluForward(nullptr, kFake, 10, DType::kFloat32, kFakeStream),
                {"GeluForward", "out"});
  ExpectInvalid(GeluBackward(kFake, kFake, nullptr, 10, DType::kBFloat16, kFakeStream),
                {"GeluBackward", "dout"});
  ExpectInvalid(ResidualForward(kFake, nullptr, kFake, 10, DType::kFloat16, kFakeStream),
                {"ResidualForward", "a"});
  ExpectInvalid(EncoderForward(kFake, nullptr, kFake, kFake, 2, 3, 4, DType::kFloat32, kFakeStream),
                {"EncoderForward", "tokens"});
  ExpectInvalid(EncoderBackward(kFakeFloats, nullptr, kFake, kFakeInts, 2, 3, 4, DType::kFloat32,
                                kFakeStream),
                {"EncoderBackward", "dwpe"});
  ExpectInvalid(LayerNormForward(kFake, kFakeFloats, nullptr, kFake, kFake, kFake, 2, 8,
                                 DType::kFloat32, kFakeStream),
                {"LayerNormForward", "rstd"});
  ExpectInvalid(LayerNormBackward(kFake, kFakeFloats, kFakeFloats, kFake, kFake, nullptr,
                                  kFakeFloats, kFakeFloats, 2, 8, DType::kFloat32, kFakeStream),
                {"LayerNormBackward", "weight"});
  ExpectInvalid(SoftmaxCrossEntropy(kFakeFloats, kFake, kFake, nullptr, 1.0f, 2, 10, 16, 0.0f,
                                    DType::kFloat32, kFakeStream),
                {"SoftmaxCrossEntropy", "targets"});
  ExpectInvalid(Cast(kFake, DType::kBFloat16, nullptr, DType::kFloat32, 10, kFakeStream),
                {"Cast", "in"});
  ExpectInvalid(UnscaleAndCheck(kFakeFloats, 10, 2.0f, nullptr, kFakeStream),
                {"UnscaleAndCheck", "found_nonfinite"});
}

TEST(CudaKernelArguments, NullStreamIsRefused) {
  ExpectInvalid(GeluForward(kFake, kFake, 10, DType::kFloat32, nullptr), {"GeluForward", "stream"});
  ExpectInvalid(ResidualBackward(kFake, kFake, kFake, 10, DType::kFloat32, nullptr),
                {"ResidualBackward", "stream"});
  ExpectInvalid(EncoderForward(kFake, kFakeInts, kFake, kFake, 2, 3, 4, DType::kFloat32, nullptr),
                {"EncoderForward", "stream"});
  ExpectInvalid(LayerNormForward(kFake, kFakeFloats, kFakeFloats, kFake, kFake, kFake, 2, 8,
                                 DType::kFloat32, nullptr),
                {"LayerNormForward", "stream"});
  ExpectInvalid(SoftmaxCrossEntropy(kFakeFloats, kFake, kFake, kFakeInts, 1.0f, 2, 10, 16, 0.0f,
                                    DType::kFloat32, nullptr),
                {"SoftmaxCrossEntropy", "stream"});
  ExpectInvalid(Cast(kFake, DType::kFloat32, kFake, DType::kFloat32, 10, nullptr),
                {"Cast", "stream"});
  ExpectInvalid(SumOfSquares({}, static_cast<double*>(kFake), kFakeFloats, nullptr),
                {"SumOfSquares", "stream"});
  ExpectInvalid(AdamWMultiTensor({}, DType::kFloat32, DType::kBFloat16, AdamWStepParams{}, nullptr),
                {"AdamWMultiTensor", "stream"});
}

TEST(CudaKernelArguments, NonPositiveSizesAreRefused) {
  ExpectInvalid(GeluBackward(kFake, kFake, kFake, 0, DType::kFloat32, kFakeStream),
                {"GeluBackward", "n"});
  ExpectInvalid(EncoderBackward(kFakeFloats, kFakeFloats, kFake, kFakeInts, 2, 0, 4,
                                DType::kFloat32, kFakeStream),
                {"EncoderBackward", "T"});
  ExpectInvalid(LayerNormBackward(kFake, kFakeFloats, kFakeFloats, kFake, kFake, kFake, kFakeFloats,
                                  kFakeFloats, 2, -8, DType::kFloat32, kFakeStream),
                {"LayerNormBackward", "C"});
  ExpectInvalid(Cast(kFake, DType::kBFloat16, kFake, DType::kFloat32, -1, kFakeStream),
                {"Cast", "n"});
}

TEST(CudaKernelArguments, CrossEntropyNeedsVpAtLeastV) {
  ExpectInvalid(SoftmaxCrossEntropy(kFakeFloats, kFake, kFake, kFakeInts, 1.0f, 2, 17, 16, 0.0f,
                                    DType::kFloat32, kFakeStream),
                {"SoftmaxCrossEntropy", "Vp"});
}

TEST(CudaKernelArguments, UnscaleNeedsPositiveFiniteScale) {
  for (const float scale : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()}) {
    ExpectInvalid(UnscaleAndCheck(kFakeFloats, 10, scale, static_cast<int*>(kFake), kFakeStream),
                  {"UnscaleAndCheck", "scale"});
  }
}

TEST(CudaKernelArguments, SumOfSquaresNamesTheBadSpan) {
  const std::vector<DeviceSpan> spans = {{kFakeFloats, 3}, {nullptr, 0}, {nullptr, 5}};
  ExpectInvalid(SumOfSquares(spans, static_cast<double*>(kFake), kFakeFloats, kFakeStream),
                {"SumOfSquares", "spans[2].data"});
  ExpectInvalid(
      SumOfSquares({{kFakeFloats, -1}}, static_cast<double*>(kFake), kFakeFloats, kFakeStream),
      {"SumOfSquares", "spans[0].n"});
  ExpectInvalid(SumOfSquares(spans, static_cast<double*>(kFake), nullptr, kFakeStream),
                {"SumOfSquares", "workspace"});
}

TEST(CudaKernelArguments, AdamWNamesTheBadTensor) {
  AdamWTensor good;
  good.param = good.m = good.v = kFakeFloats;
  good.grad = kFake;
  good.n = 10;
  AdamWTensor bad = good;
  bad.grad = nullptr;
  ExpectInvalid(AdamWMultiTensor({good, bad}, DType::kFloat32, DType::kBFloat16, AdamWStepParams{},
                                 kFakeStream),
                {"AdamWMultiTensor", "tensors[1].grad"});
  AdamWStepParams step_zero;
  step_zero.step = 0;
  ExpectInvalid(AdamWMultiTensor({good}, DType::kFloat32, DType::kBFloat16, step_zero, kFakeStream),
                {"AdamWMultiTensor", "step"});
}

}  // namespace
}  // namespace hoist::kernels::cuda

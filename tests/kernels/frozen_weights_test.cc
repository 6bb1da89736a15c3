// Backward ops with frozen parameters (a LoRA fine-tune's base weights): a null dweight or dbias
// skips that gradient, and dinp is the same bits as in the call that computes it. Through the CPU
// backend (fp32, bf16, fp16; inline and threaded streams), the layernorm at every SIMD level, and
// oneDNN's bf16 products where this CPU has them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels {
namespace {

using cpu::testing::RandomFloats;
using Mode = HostStream::Mode;

constexpr int N = 24, C = 40, OC = 36;

// n random values of `type` as raw bytes.
std::vector<char> Random(DType type, size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  const std::vector<float> values = RandomFloats(n, seed, lo, hi);
  std::vector<char> bytes(n * DTypeSize(type));
  cpu::FromFloat(values.data(), bytes.data(), type, static_cast<int64_t>(n));
  return bytes;
}

#define EXPECT_OK(expr)                              \
  do {                                               \
    const ::hoist::Status status_ = (expr);          \
    EXPECT_TRUE(status_.ok()) << status_.ToString(); \
  } while (0)

struct Param {
  DType type;
  Mode mode;
};

class FrozenWeights : public ::testing::TestWithParam<Param> {
 protected:
  FrozenWeights()
      : device_(Place::kDevice, &tracker_),
        backend_(&device_, GetParam().mode),
        type_(GetParam().type) {}
  const Stream& s() const { return backend_.compute_stream(); }
  void Sync() { ASSERT_TRUE(s().Synchronize().ok()); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
  DType type_;
};

TEST_P(FrozenWeights, MatmulBackwardWithoutDweightGivesTheSameDinp) {
  const std::vector<char> dout = Random(type_, size_t{N} * OC, 1),
                          inp = Random(type_, size_t{N} * C, 2),
                          weight = Random(type_, size_t{OC} * C, 3);
  const std::vector<char> dinp0 = Random(type_, size_t{N} * C, 4);
  std::vector<char> dinp_full = dinp0, dinp_frozen = dinp0, dinp_frozen_bias = dinp0;
  std::vector<float> dweight(size_t{OC} * C, 0.5f), dbias(OC, 0.25f), dbias_frozen(OC, 0.25f);
  EXPECT_OK(backend_.MatmulBackward(dinp_full.data(), dweight.data(), dbias.data(), dout.data(),
                                    inp.data(), weight.data(), N, C, OC, type_, s()));
  EXPECT_OK(backend_.MatmulBackward(dinp_frozen.data(), nullptr, dbias_frozen.data(), dout.data(),
                                    inp.data(), weight.data(), N, C, OC, type_, s()));
  EXPECT_OK(backend_.MatmulBackward(dinp_frozen_bias.data(), nullptr, nullptr, dout.data(),
                                    inp.data(), weight.data(), N, C, OC, type_, s()));
  Sync();
  EXPECT_EQ(dinp_frozen, dinp_full);
  EXPECT_EQ(dinp_frozen_bias, dinp_full);
  EXPECT_NE(dinp_full, dinp0);
  EXPECT_EQ(dbias_frozen, dbias);  // the bias's gradient does not depend on the weight's
}

TEST_P(FrozenWeights, LayerNormBackwardWithoutParameterGradsGivesTheSameDinp) {
  const std::vector<char> x = Random(type_, size_t{N} * C, 5), w = Random(type_, C, 6, 0.5f, 1.5f),
                          b = Random(type_, C, 7), dout = Random(type_, size_t{N} * C, 8);
  std::vector<char> out(x.size());
  std::vector<float> mean(N), rstd(N);
  EXPECT_OK(backend_.LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                      b.data(), N, C, type_, s()));
  Sync();
  const std::vector<char> dinp0 = Random(type_, size_t{N} * C, 9);
  std::vector<char> full = dinp0;
  std::vector<float> dweight(C, 0.5f), dbias(C, 0.25f);
  EXPECT_OK(backend_.LayerNormBackward(full.data(), dweight.data(), dbias.data(), dout.data(),
                                       x.data(), w.data(), mean.data(), rstd.data(), N, C, type_,
                                       s()));
  Sync();
  EXPECT_NE(full, dinp0);
  // Each parameter frozen on its own, and both: dinp unchanged, the other gradient unchanged.
  for (int frozen = 1; frozen <= 3; ++frozen) {
    std::vector<char> dinp = dinp0;
    std::vector<float> dw(C, 0.5f), db(C, 0.25f);
    float* dw_arg = (frozen & 1) != 0 ? nullptr : dw.data();
    float* db_arg = (frozen & 2) != 0 ? nullptr : db.data();
    EXPECT_OK(backend_.LayerNormBackward(dinp.data(), dw_arg, db_arg, dout.data(), x.data(),
                                         w.data(), mean.data(), rstd.data(), N, C, type_, s()));
    Sync();
    EXPECT_EQ(dinp, full) << "frozen " << frozen;
    if (dw_arg != nullptr) {
      EXPECT_EQ(dw, dweight) << "frozen " << frozen;
    }
    if (db_arg != nullptr) {
      EXPECT_EQ(db, dbias) << "frozen " << frozen;
    }
  }
}

TEST_P(FrozenWeights, RmsNormBackwardWithoutDweightGivesTheSameDinp) {
  const std::vector<char> x = Random(type_, size_t{N} * C, 10),
                          w = Random(type_, C, 11, 0.5f, 1.5f),
                          dout = Random(type_, size_t{N} * C, 12);
  std::vector<char> out(x.size());
  std::vector<float> rstd(N);
  EXPECT_OK(backend_.RmsNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f,
                                    RmsNormStyle::kLlama, type_, s()));
  const std::vector<char> dinp0 = Random(type_, size_t{N} * C, 13);
  std::vector<char> full = dinp0, frozen = dinp0;
  std::vector<float> dweight(C, 0.5f);
  EXPECT_OK(backend_.RmsNormBackward(full.data(), dweight.data(), dout.data(), x.data(), w.data(),
                                     rstd.data(), N, C, RmsNormStyle::kLlama, type_, s()));
  EXPECT_OK(backend_.RmsNormBackward(frozen.data(), nullptr, dout.data(), x.data(), w.data(),
                                     rstd.data(), N, C, RmsNormStyle::kLlama, type_, s()));
  Sync();
  EXPECT_NE(full, dinp0);
  EXPECT_EQ(frozen, full);
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(DTypeName(info.param.type)) +
         (info.param.mode == Mode::kInline ? "_inline" : "_threaded");
}

INSTANTIATE_TEST_SUITE_P(, FrozenWeights,
                         ::testing::Values(Param{DType::kFloat32, Mode::kInline},
                                           Param{DType::kBFloat16, Mode::kInline},
                                           Param{DType::kFloat16, Mode::kInline},
                                           Param{DType::kFloat32, Mode::kThreaded},
                                           Param{DType::kBFloat16, Mode::kThreaded}),
                         Name);

// The layernorm's parameter sums run in the SIMD row kernels: each level with frozen parameters.
class FrozenLayerNormSimd : public cpu::testing::SimdLevelTest {};

TEST_P(FrozenLayerNormSimd, DinpIsTheSameBitsWithAndWithoutParameterGrads) {
  const std::vector<float> x = RandomFloats(size_t{N} * C, 20), w = RandomFloats(C, 21, 0.5f, 1.5f),
                           b = RandomFloats(C, 22), dout = RandomFloats(size_t{N} * C, 23);
  std::vector<float> out(x.size()), mean(N), rstd(N);
  cpu::LayerNormForwardAt(level(), out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                          b.data(), N, C);
  const std::vector<float> dinp0 = RandomFloats(size_t{N} * C, 24);
  std::vector<float> full = dinp0, dweight(C, 0.0f), dbias(C, 0.0f);
  cpu::LayerNormBackwardAt(level(), full.data(), dweight.data(), dbias.data(), dout.data(),
                           x.data(), w.data(), mean.data(), rstd.data(), N, C);
  for (int frozen = 1; frozen <= 3; ++frozen) {
    std::vector<float> dinp = dinp0, dw(C, 0.0f), db(C, 0.0f);
    float* dw_arg = (frozen & 1) != 0 ? nullptr : dw.data();
    float* db_arg = (frozen & 2) != 0 ? nullptr : db.data();
    cpu::LayerNormBackwardAt(level(), dinp.data(), dw_arg, db_arg, dout.data(), x.data(), w.data(),
                             mean.data(), rstd.data(), N, C);
    EXPECT_EQ(0, std::memcmp(dinp.data(), full.data(), full.size() * 4)) << "frozen " << frozen;
    if (dw_arg != nullptr) {
      EXPECT_EQ(dw, dweight) << "frozen " << frozen;
    }
    if (db_arg != nullptr) {
      EXPECT_EQ(db, dbias) << "frozen " << frozen;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllSimdLevels, FrozenLayerNormSimd,
                         ::testing::ValuesIn(cpu::testing::kAllLevels), cpu::testing::LevelName);

// oneDNN's bf16 backward (the backend's path for bf16 where the run chose it) without dweight.
TEST(FrozenWeightsBf16Gemm, MatmulBackwardBf16WithoutDweightGivesTheSameDinp) {
  if (!cpu::Bf16GemmAvailable()) {
    GTEST_SKIP() << "no oneDNN build or no bf16 ISA: " << cpu::DecideGemmPath().reason;
  }
  const auto bits = [](size_t n, uint32_t seed) {
    const std::vector<char> bytes = Random(DType::kBFloat16, n, seed);
    std::vector<uint16_t> out(n);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  };
  const std::vector<uint16_t> dout = bits(size_t{N} * OC, 30), inp = bits(size_t{N} * C, 31),
                              weight = bits(size_t{OC} * C, 32);
  const std::vector<float> dinp0 = RandomFloats(size_t{N} * C, 33);
  std::vector<float> full = dinp0, frozen = dinp0, dweight(size_t{OC} * C, 0.0f), dbias(OC, 0.0f),
                     dbias_frozen(OC, 0.0f);
  cpu::MatmulBackwardBf16(full.data(), false, dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), N, C, OC);
  cpu::MatmulBackwardBf16(frozen.data(), false, nullptr, dbias_frozen.data(), dout.data(),
                          inp.data(), weight.data(), N, C, OC);
  EXPECT_EQ(0, std::memcmp(frozen.data(), full.data(), full.size() * 4));
  EXPECT_EQ(dbias_frozen, dbias);
}

}  // namespace
}  // namespace hoist::kernels

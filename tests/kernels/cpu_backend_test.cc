// The CPU backend's ops against the kernels they wrap, computed another way: casts against the
// per-element conversions, accumulation against fp32 arithmetic done here, the sum of squares in
// double, AdamW against the fused step called directly. Each op runs on inline and on threaded
// streams, which must give the same bits.
#include "kernels/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/adamw_step.h"
#include "kernels/cpu/cast.h"

namespace hoist::kernels {
namespace {

using Mode = HostStream::Mode;

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// One element through the scalar conversions (the reference the SIMD levels are held to).
uint16_t Narrow16(float x, DType type) {
  uint16_t out = 0;
  if (type == DType::kBFloat16) {
    cpu::CastFp32ToBf16At(SimdLevel::kScalar, &out, &x, 1);
  } else {
    cpu::CastFp32ToFp16At(SimdLevel::kScalar, &out, &x, 1);
  }
  return out;
}

float Widen16(uint16_t bits, DType type) {
  float out = 0;
  if (type == DType::kBFloat16) {
    cpu::CastBf16ToFp32At(SimdLevel::kScalar, &out, &bits, 1);
  } else {
    cpu::CastFp16ToFp32At(SimdLevel::kScalar, &out, &bits, 1);
  }
  return out;
}

// The 16-bit bits of `x` rounded to `type`, element by element.
std::vector<uint16_t> Round16(const std::vector<float>& x, DType type) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = Narrow16(x[i], type);
  return out;
}

class CpuBackendTest : public ::testing::TestWithParam<Mode> {
 protected:
  CpuBackendTest() : device_(Place::kDevice, &tracker_), backend_(&device_, GetParam()) {}
  const Stream& stream() const { return backend_.compute_stream(); }
  void Sync() { ASSERT_TRUE(stream().Synchronize().ok()); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
};

TEST_P(CpuBackendTest, CastBetweenEveryPairOfTypesRoundsOnce) {
  const size_t n = 70000;  // past one internal chunk
  const std::vector<float> x = RandomFloats(n, 1);
  for (DType a : {DType::kBFloat16, DType::kFloat16}) {
    const std::vector<uint16_t> xa = Round16(x, a);
    // 16-bit -> fp32 is exact.
    std::vector<float> wide(n);
    ASSERT_TRUE(backend_.Cast(wide.data(), DType::kFloat32, xa.data(), a, n, stream()).ok());
    Sync();
    for (size_t i = 0; i < n; i += 997) ASSERT_EQ(wide[i], Widen16(xa[i], a));
    // fp32 -> 16-bit rounds to nearest even.
    std::vector<uint16_t> narrow(n);
    ASSERT_TRUE(backend_.Cast(narrow.data(), a, x.data(), DType::kFloat32, n, stream()).ok());
    Sync();
    EXPECT_EQ(narrow, xa);
    // One 16-bit type to the other: the widened value rounded once.
    for (DType b : {DType::kBFloat16, DType::kFloat16}) {
      if (a == b) continue;
      std::vector<uint16_t> across(n);
      ASSERT_TRUE(backend_.Cast(across.data(), b, xa.data(), a, n, stream()).ok());
      Sync();
      for (size_t i = 0; i < n; i += 101) {
        const float v = Widen16(xa[i], a);
        ASSERT_EQ(across[i], Narrow16(v, b));
      }
    }
  }
}

TEST_P(CpuBackendTest, AccumulateAddsScaledValuesAndRoundsToTheAccumulatorsType) {
  const size_t n = 1000;
  const std::vector<float> acc0 = RandomFloats(n, 2), add = RandomFloats(n, 3);
  // fp32 accumulator, bf16 addend, scale 0.5.
  std::vector<float> acc = acc0;
  const std::vector<uint16_t> add16 = Round16(add, DType::kBFloat16);
  ASSERT_TRUE(backend_
                  .Accumulate(acc.data(), DType::kFloat32, add16.data(), DType::kBFloat16, 0.5f, n,
                              stream())
                  .ok());
  Sync();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(acc[i], acc0[i] + 0.5f * Widen16(add16[i], DType::kBFloat16)) << i;
  }
  // fp16 accumulator, fp32 addend.
  std::vector<uint16_t> acc16 = Round16(acc0, DType::kFloat16);
  const std::vector<uint16_t> before = acc16;
  ASSERT_TRUE(
      backend_
          .Accumulate(acc16.data(), DType::kFloat16, add.data(), DType::kFloat32, 1.0f, n, stream())
          .ok());
  Sync();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(acc16[i], Narrow16(Widen16(before[i], DType::kFloat16) + add[i], DType::kFloat16))
        << i;
  }
}

TEST_P(CpuBackendTest, SumOfSquaresAddsEachCallInDouble) {
  const std::vector<float> a = RandomFloats(5000, 4), b = RandomFloats(300, 5);
  double want = 0.0;
  for (float x : a) want += double(x * 0.25f) * double(x * 0.25f);
  for (float x : b) want += double(x) * double(x);
  double sum = 1.0;  // added to, not overwritten
  ASSERT_TRUE(
      backend_.SumOfSquares(a.data(), DType::kFloat32, 0.25f, a.size(), &sum, stream()).ok());
  ASSERT_TRUE(
      backend_.SumOfSquares(b.data(), DType::kFloat32, 1.0f, b.size(), &sum, stream()).ok());
  Sync();
  EXPECT_NEAR(sum, 1.0 + want, 1e-9 * want);
}

TEST_P(CpuBackendTest, AdamWIsTheFusedStepPerTensorWithItsOwnDecay) {
  const size_t n = 777;
  std::vector<float> p1 = RandomFloats(n, 6), m1 = RandomFloats(n, 7, -0.1f, 0.1f),
                     v1 = RandomFloats(n, 8, 0.0f, 0.01f);
  const std::vector<float> g = RandomFloats(n, 9);
  const std::vector<uint16_t> g16 = Round16(g, DType::kBFloat16);
  std::vector<float> p2 = p1, m2 = m1, v2 = v1;
  std::vector<uint16_t> copy(n), want_copy(n);

  AdamWStepScalars s;
  s.lr = 0.01f;
  s.grad_scale = 0.5f;
  s.step = 3;
  // Two tensors over halves of the arrays, decayed differently.
  const size_t half = n / 2;
  std::vector<AdamWTensorRef> tensors(2);
  tensors[0] = {p1.data(), m1.data(), v1.data(), g16.data(), copy.data(), int64_t(half), 0.1f};
  tensors[1] = {p1.data() + half,
                m1.data() + half,
                v1.data() + half,
                g16.data() + half,
                copy.data() + half,
                int64_t(n - half),
                0.0f};
  ASSERT_TRUE(backend_.AdamW(tensors, DType::kBFloat16, DType::kBFloat16, s, stream()).ok());
  Sync();

  cpu::AdamWHyperparams h;
  h.lr = s.lr;
  h.grad_scale = s.grad_scale;
  h.step = s.step;
  for (int t = 0; t < 2; ++t) {
    const size_t at = t == 0 ? 0 : half, len = t == 0 ? half : n - half;
    cpu::AdamWShard shard;
    shard.param = p2.data() + at;
    shard.m = m2.data() + at;
    shard.v = v2.data() + at;
    shard.grad = g16.data() + at;
    shard.grad_format = DType::kBFloat16;
    shard.param_copy = want_copy.data() + at;
    shard.copy_format = DType::kBFloat16;
    shard.n = len;
    h.weight_decay = t == 0 ? 0.1f : 0.0f;
    cpu::AdamWFusedStep(shard, h);
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(v1, v2);
  EXPECT_EQ(copy, want_copy);
}

TEST_P(CpuBackendTest, AdamWWritesAnFp32CopyAsTheMastersBits) {
  const size_t n = 64;
  std::vector<float> p = RandomFloats(n, 10), m(n, 0.0f), v(n, 0.0f), copy(n, -1.0f);
  const std::vector<float> g = RandomFloats(n, 11);
  const AdamWTensorRef t{p.data(), m.data(), v.data(), g.data(), copy.data(), int64_t(n), 0.0f};
  ASSERT_TRUE(backend_.AdamW({&t, 1}, DType::kFloat32, DType::kFloat32, {}, stream()).ok());
  Sync();
  EXPECT_EQ(std::memcmp(copy.data(), p.data(), n * sizeof(float)), 0);
}

TEST_P(CpuBackendTest, BadArgumentsAreRefusedNamingTheOp) {
  float x = 0;
  Status s = backend_.Zero(nullptr, 8, stream());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Zero: dst is null"), std::string::npos) << s.ToString();
  s = backend_.Cast(&x, DType::kBFloat16, &x, DType::kFloat32, 1, stream());
  EXPECT_NE(s.message().find("Cast: dst and src are the same array"), std::string::npos);
  s = backend_.Copy(&x, &x, -4, CopyDirection::kHostToHost, stream());
  EXPECT_NE(s.message().find("negative length"), std::string::npos) << s.ToString();
  AdamWStepScalars zero_step;
  zero_step.step = 0;
  s = backend_.AdamW({}, DType::kFloat32, DType::kFloat32, zero_step, stream());
  EXPECT_NE(s.message().find("AdamW: the step count is 1-based"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Streams, CpuBackendTest, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         [](const auto& info) {
                           return info.param == Mode::kInline ? "Inline" : "Threaded";
                         });

}  // namespace
}  // namespace hoist::kernels

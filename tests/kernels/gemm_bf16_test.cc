#include "kernels/cpu/gemm_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/bf16_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::RandomFloats;
using testing::ToBf16;
using testing::Widen;

// The bound, per output element, between the bf16 product and the fp32 one of the same fp32
// operands. Rounding an operand to bf16 (8 significant bits, round to nearest) moves it by at
// most u = 2^-8 of itself, so a product of two rounded operands is off by at most (2u + u^2)|a||b|.
// The bf16 products themselves are exact in fp32 (8 + 8 significant bits), so what remains is
// the fp32 summation of K terms in each path, at most K * 2^-24 * sum |a||b| each. Hence
// |bf16 - fp32| <= k * 2^-8 * sum |a||b| with k = 2 + 2^-8 + 2K * 2^-16.
double Bound(int K, double abs_sum) {
  const double k = 2.0 + std::ldexp(1.0, -8) + 2.0 * K * std::ldexp(1.0, -16);
  return k * std::ldexp(1.0, -8) * abs_sum;
}

// A shape that oneDNN blocks unevenly (none of the sizes a multiple of 16).
constexpr int kN = 37, kC = 70, kOC = 53;

TEST(GemmBf16, ForwardWithinBf16RoundingOfFp32) {
  SKIP_WITHOUT_BF16_GEMM();
  const auto inp = RandomFloats(kN * kC, 1), weight = RandomFloats(kOC * kC, 2),
             bias = RandomFloats(kOC, 3);
  std::vector<float> want(kN * kOC), got(kN * kOC);
  MatmulForward(want.data(), inp.data(), weight.data(), bias.data(), kN, kC, kOC);
  MatmulForwardBf16(got.data(), false, ToBf16(inp).data(), ToBf16(weight).data(),
                    ToBf16(bias).data(), kN, kC, kOC);
  double worst = 0;
  for (int n = 0; n < kN; ++n)
    for (int o = 0; o < kOC; ++o) {
      double abs_sum = 0;
      for (int c = 0; c < kC; ++c) abs_sum += std::fabs(inp[n * kC + c] * weight[o * kC + c]);
      const double err = std::fabs(double(got[n * kOC + o]) - want[n * kOC + o]);
      // The bias is rounded to bf16 too (u |bias|), and added in fp32 by both paths.
      const double bound = Bound(kC, abs_sum) + std::ldexp(std::fabs(bias[o]), -8) +
                           std::ldexp(std::fabs(want[n * kOC + o]), -22);
      EXPECT_LE(err, bound) << "at (" << n << ", " << o << ")";
      worst = std::max(worst, err / abs_sum);
    }
  // The operands were rounded: the bf16 product differs from the fp32 one.
  EXPECT_GT(worst, std::ldexp(1.0, -16));
}

// Accumulation is in fp32, not bf16: against the double product of the same bf16 operands the
// only error is fp32 summation (K * 2^-24 * sum |a||b|), far below a bf16 rounding.
TEST(GemmBf16, ForwardAccumulatesInFp32) {
  SKIP_WITHOUT_BF16_GEMM();
  const int K = 3072;
  const auto a = Widen(ToBf16(RandomFloats(4 * K, 4))), w = Widen(ToBf16(RandomFloats(8 * K, 5)));
  std::vector<float> got(4 * 8);
  MatmulForwardBf16(got.data(), false, ToBf16(a).data(), ToBf16(w).data(), nullptr, 4, K, 8);
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 8; ++o) {
      double exact = 0, abs_sum = 0;
      for (int c = 0; c < K; ++c) {
        exact += double(a[n * K + c]) * w[o * K + c];
        abs_sum += std::fabs(double(a[n * K + c]) * w[o * K + c]);
      }
      EXPECT_LE(std::fabs(got[n * 8 + o] - exact), K * std::ldexp(1.0, -24) * abs_sum);
    }
}

// A bf16 out is the fp32 result rounded once: within half a bf16 unit of it (u = 2^-8 relative).
TEST(GemmBf16, Bf16OutIsTheFp32ResultRoundedOnce) {
  SKIP_WITHOUT_BF16_GEMM();
  const auto inp = ToBf16(RandomFloats(kN * kC, 14)), weight = ToBf16(RandomFloats(kOC * kC, 15)),
             bias = ToBf16(RandomFloats(kOC, 16));
  std::vector<float> wide(kN * kOC);
  std::vector<uint16_t> narrow(kN * kOC);
  MatmulForwardBf16(wide.data(), false, inp.data(), weight.data(), bias.data(), kN, kC, kOC);
  MatmulForwardBf16(narrow.data(), true, inp.data(), weight.data(), bias.data(), kN, kC, kOC);
  const std::vector<float> got = Widen(narrow);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - wide[i]), std::ldexp(std::fabs(wide[i]), -8)) << i;
  }
  EXPECT_NE(got, wide) << "the out must be rounded to bf16";
}

// Both backward products and the bias gradient, added to what the accumulators held.
TEST(GemmBf16, BackwardAddsBothProductsWithinBf16Rounding) {
  SKIP_WITHOUT_BF16_GEMM();
  const auto dout = RandomFloats(kN * kOC, 6), inp = RandomFloats(kN * kC, 7),
             weight = RandomFloats(kOC * kC, 8);
  const auto dinp0 = RandomFloats(kN * kC, 9), dweight0 = RandomFloats(kOC * kC, 10),
             dbias0 = RandomFloats(kOC, 17);
  std::vector<float> dinp = dinp0, dweight = dweight0, dbias = dbias0;
  MatmulBackwardBf16(dinp.data(), false, dweight.data(), dbias.data(), ToBf16(dout).data(),
                     ToBf16(inp).data(), ToBf16(weight).data(), kN, kC, kOC);
  // Against the fp32 path's products from zero, plus the starting values.
  std::vector<float> want_dinp(kN * kC, 0.0f), want_dweight(kOC * kC, 0.0f);
  MatmulBackward(want_dinp.data(), want_dweight.data(), nullptr, dout.data(), inp.data(),
                 weight.data(), kN, kC, kOC);
  for (int n = 0; n < kN; ++n)
    for (int c = 0; c < kC; ++c) {
      double abs_sum = 0;
      for (int o = 0; o < kOC; ++o) abs_sum += std::fabs(dout[n * kOC + o] * weight[o * kC + c]);
      const int i = n * kC + c;
      // One more fp32 rounding: the addition to the starting value.
      const double bound = Bound(kOC, abs_sum) + std::ldexp(std::fabs(dinp[i]), -23);
      EXPECT_LE(std::fabs(double(dinp[i]) - (double(dinp0[i]) + want_dinp[i])), bound)
          << "dinp at (" << n << ", " << c << ")";
    }
  for (int o = 0; o < kOC; ++o)
    for (int c = 0; c < kC; ++c) {
      double abs_sum = 0;
      for (int n = 0; n < kN; ++n) abs_sum += std::fabs(dout[n * kOC + o] * inp[n * kC + c]);
      const int i = o * kC + c;
      const double bound = Bound(kN, abs_sum) + std::ldexp(std::fabs(dweight[i]), -23);
      EXPECT_LE(std::fabs(double(dweight[i]) - (double(dweight0[i]) + want_dweight[i])), bound)
          << "dweight at (" << o << ", " << c << ")";
    }
  // dbias: sums of the rounded dout (u |dout| each) in fp32 (N * 2^-24 of the sum of |dout|).
  for (int o = 0; o < kOC; ++o) {
    double want = dbias0[o], abs_sum = std::fabs(dbias0[o]);
    for (int n = 0; n < kN; ++n) want += dout[n * kOC + o], abs_sum += std::fabs(dout[n * kOC + o]);
    const double bound = std::ldexp(abs_sum, -8) + (kN + 1) * std::ldexp(abs_sum, -24);
    EXPECT_LE(std::fabs(dbias[o] - want), bound) << "dbias at " << o;
  }
}

// A bf16 dinp is widened, the product added in fp32, and rounded once.
TEST(GemmBf16, Bf16DinpIsAddedInFp32AndRoundedOnce) {
  SKIP_WITHOUT_BF16_GEMM();
  const auto dout = ToBf16(RandomFloats(kN * kOC, 18)), inp = ToBf16(RandomFloats(kN * kC, 19)),
             weight = ToBf16(RandomFloats(kOC * kC, 20));
  const auto dinp0 = ToBf16(RandomFloats(kN * kC, 21));
  std::vector<float> wide = Widen(dinp0), dweight(kOC * kC, 0.0f);
  std::vector<uint16_t> narrow = dinp0;
  MatmulBackwardBf16(wide.data(), false, dweight.data(), nullptr, dout.data(), inp.data(),
                     weight.data(), kN, kC, kOC);
  MatmulBackwardBf16(narrow.data(), true, dweight.data(), nullptr, dout.data(), inp.data(),
                     weight.data(), kN, kC, kOC);
  const std::vector<float> got = Widen(narrow);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - wide[i]), std::ldexp(std::fabs(wide[i]), -8)) << i;
  }
}

TEST(GemmBf16, BackwardWithoutDinpStillAddsDweight) {
  SKIP_WITHOUT_BF16_GEMM();
  const auto dout = ToBf16(RandomFloats(kN * kOC, 11)), inp = ToBf16(RandomFloats(kN * kC, 12)),
             weight = ToBf16(RandomFloats(kOC * kC, 13));
  std::vector<float> once(kOC * kC, 0.0f), twice(kOC * kC, 0.0f);
  for (std::vector<float>* dw : {&once, &twice, &twice}) {
    MatmulBackwardBf16(nullptr, false, dw->data(), nullptr, dout.data(), inp.data(), weight.data(),
                       kN, kC, kOC);
  }
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2.0f * once[i]) << i;
}

// Ranks run as threads and ops on host-stream threads: a product may be called from any thread,
// from several at once, with the same shape (one shared oneDNN primitive) and its own operands.
TEST(GemmBf16, ConcurrentCallsFromOtherThreadsGiveTheSingleThreadResults) {
  SKIP_WITHOUT_BF16_GEMM();
  constexpr int N = 128, C = 256, OC = 384, kThreads = 4, kCalls = 30;
  struct Operands {
    std::vector<uint16_t> inp, weight, dout;
    std::vector<float> out, dinp, dweight;
  };
  auto run = [&](const Operands& in, Operands* result) {
    result->out.assign(N * OC, 0.0f);
    result->dinp.assign(N * C, 0.0f);
    result->dweight.assign(OC * C, 0.0f);
    MatmulForwardBf16(result->out.data(), false, in.inp.data(), in.weight.data(), nullptr, N, C,
                      OC);
    MatmulBackwardBf16(result->dinp.data(), false, result->dweight.data(), nullptr, in.dout.data(),
                       in.inp.data(), in.weight.data(), N, C, OC);
  };
  std::vector<Operands> in(kThreads), want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    in[t].inp = ToBf16(RandomFloats(N * C, 30 + t));
    in[t].weight = ToBf16(RandomFloats(OC * C, 40 + t));
    in[t].dout = ToBf16(RandomFloats(N * OC, 50 + t));
    run(in[t], &want[t]);
  }
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Operands got;
      for (int i = 0; i < kCalls; ++i) {
        run(in[t], &got);
        mismatches[t] +=
            got.out != want[t].out || got.dinp != want[t].dinp || got.dweight != want[t].dweight;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

TEST(GemmPathChoice, MaskingBothIsasFallsBackToFp32) {
  ScopedEnv mask("HOIST_CPU_MASK", "amx_bf16,avx512_bf16");
  ScopedEnv mode("HOIST_GEMM", "bf16");
  const GemmChoice choice = DecideGemmPath();
  EXPECT_EQ(choice.path, GemmPath::kFp32Blas);
  EXPECT_EQ(choice.isa, "none");
  EXPECT_FALSE(Bf16GemmAvailable());
  const CpuFeatures& f = GetCpuFeatures();
  const bool built_with_dnnl = choice.reason.find("without oneDNN") == std::string::npos;
  if (built_with_dnnl && (f.amx_bf16 || f.avx512_bf16)) {
    EXPECT_NE(choice.reason.find("HOIST_CPU_MASK"), std::string::npos) << choice.reason;
  }
}

TEST(GemmPathChoice, MaskingAmxLeavesAvx512Bf16) {
  if (!GetCpuFeatures().avx512_bf16) GTEST_SKIP() << "the CPU has no AVX512_BF16";
  ScopedEnv mask("HOIST_CPU_MASK", "amx_bf16");
  ScopedEnv mode("HOIST_GEMM", "fp32");
  EXPECT_EQ(DecideGemmPath().isa, "avx512_bf16");
}

TEST(GemmPathChoice, Fp32ModeKeepsTheSgemmPath) {
  ScopedEnv mode("HOIST_GEMM", "fp32");
  EXPECT_EQ(DecideGemmPath().path, GemmPath::kFp32Blas);
}

TEST(GemmPathChoice, AutoMeasuresBothPathsWhereItCanChoose) {
  SKIP_WITHOUT_BF16_GEMM();
  ScopedEnv mode("HOIST_GEMM", "auto");
  const GemmChoice choice = DecideGemmPath();
  EXPECT_GT(choice.bf16_gflops, 0.0);
  EXPECT_GT(choice.fp32_gflops, 0.0);
  EXPECT_EQ(choice.path == GemmPath::kBf16Dnnl, choice.bf16_gflops > choice.fp32_gflops);
  EXPECT_NE(choice.library.find("oneDNN"), std::string::npos);
}

}  // namespace
}  // namespace hoist::kernels::cpu

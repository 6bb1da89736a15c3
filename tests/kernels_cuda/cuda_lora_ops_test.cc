// The CUDA backend's LoRA ops against the CPU backend's on the same inputs: frozen weights in
// backward (dinp the same bits with and without the parameter gradients), Gemm for every
// (trans_a, trans_b), dtype, C type and scale with strided operands and C a window of a wider
// matrix (within the bound of fp32 accumulation plus C's one rounding; untouched outside), and
// Dropout's mask and outputs bit for bit. Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "tests/kernels_cuda/cuda_kernel_test_util.h"

namespace hoist::kernels {
namespace {

using cuda::testing::DeviceArray;
using cuda::testing::ExpectAllClose;
using cuda::testing::RandomFloats;
using cuda::testing::RoundTo;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// `values` rounded to `type`, as host bytes for the CPU backend.
std::vector<char> HostBytesOf(DType type, const std::vector<float>& values) {
  std::vector<char> out(values.size() * DTypeSize(type));
  cpu::FromFloat(values.data(), out.data(), type, static_cast<int64_t>(values.size()));
  return out;
}
std::vector<float> WidenOf(DType type, const std::vector<char>& bytes) {
  std::vector<float> out(bytes.size() / DTypeSize(type));
  cpu::ToFloat(bytes.data(), type, out.data(), static_cast<int64_t>(out.size()));
  return out;
}

class CudaLoraOps : public ::testing::Test {
 protected:
  void SetUp() override {
    HOIST_SKIP_WITHOUT_GPU();
    auto backend = CudaBackend::Create(0, &tracker_);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    gpu_ = std::move(backend).value();
  }
  const Stream& cs() const { return cpu_.compute_stream(); }
  const Stream& gs() const { return gpu_->compute_stream(); }
  void Finish() {
    ASSERT_TRUE(cs().Synchronize().ok());
    ASSERT_TRUE(gs().Synchronize().ok());
  }
  MemoryTracker tracker_;
  CpuDevice host_device_{Place::kHost, &tracker_};
  CpuBackend cpu_{&host_device_};
  std::unique_ptr<CudaBackend> gpu_;
};

// ---- Frozen weights ----

TEST_F(CudaLoraOps, BackwardWithFrozenParametersGivesTheSameDinp) {
  constexpr int N = 64, C = 96, OC = 80;
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(t));
    DeviceArray dout(t, RandomFloats(size_t{N} * OC, 1)), inp(t, RandomFloats(size_t{N} * C, 2)),
        weight(t, RandomFloats(size_t{OC} * C, 3)), dy(t, RandomFloats(size_t{N} * C, 4)),
        lnw(t, RandomFloats(C, 5, 0.5f, 1.5f)), lnb(t, RandomFloats(C, 6));
    const std::vector<float> dinp0 = RandomFloats(size_t{N} * C, 7);
    // Matmul: with dweight and dbias, without dweight, without both.
    DeviceArray full(t, dinp0), frozen(t, dinp0), frozen_all(t, dinp0);
    DeviceArray dweight(DType::kFloat32, std::vector<float>(size_t{OC} * C, 0.0f)),
        dbias(DType::kFloat32, std::vector<float>(OC, 0.0f)),
        dbias2(DType::kFloat32, std::vector<float>(OC, 0.0f));
    HOIST_ASSERT_OK(gpu_->MatmulBackward(full.data(), dweight.as<float>(), dbias.as<float>(),
                                         dout.data(), inp.data(), weight.data(), N, C, OC, t,
                                         gs()));
    HOIST_ASSERT_OK(gpu_->MatmulBackward(frozen.data(), nullptr, dbias2.as<float>(), dout.data(),
                                         inp.data(), weight.data(), N, C, OC, t, gs()));
    HOIST_ASSERT_OK(gpu_->MatmulBackward(frozen_all.data(), nullptr, nullptr, dout.data(),
                                         inp.data(), weight.data(), N, C, OC, t, gs()));
    Finish();
    EXPECT_EQ(frozen.Download(), full.Download()) << "matmul";
    EXPECT_EQ(frozen_all.Download(), full.Download()) << "matmul";

    // LayerNorm: each parameter frozen, and both.
    DeviceArray out(t, size_t{N} * C), mean(DType::kFloat32, N), rstd(DType::kFloat32, N);
    HOIST_ASSERT_OK(gpu_->LayerNormForward(out.data(), mean.as<float>(), rstd.as<float>(),
                                           inp.data(), lnw.data(), lnb.data(), N, C, t, gs()));
    DeviceArray ln_full(t, dinp0), dw(DType::kFloat32, std::vector<float>(C, 0.0f)),
        db(DType::kFloat32, std::vector<float>(C, 0.0f));
    HOIST_ASSERT_OK(gpu_->LayerNormBackward(ln_full.data(), dw.as<float>(), db.as<float>(),
                                            dy.data(), inp.data(), lnw.data(), mean.as<float>(),
                                            rstd.as<float>(), N, C, t, gs()));
    for (int f = 1; f <= 3; ++f) {
      DeviceArray ln(t, dinp0), dw2(DType::kFloat32, std::vector<float>(C, 0.0f)),
          db2(DType::kFloat32, std::vector<float>(C, 0.0f));
      HOIST_ASSERT_OK(gpu_->LayerNormBackward(ln.data(), (f & 1) != 0 ? nullptr : dw2.as<float>(),
                                              (f & 2) != 0 ? nullptr : db2.as<float>(), dy.data(),
                                              inp.data(), lnw.data(), mean.as<float>(),
                                              rstd.as<float>(), N, C, t, gs()));
      Finish();
      EXPECT_EQ(ln.Download(), ln_full.Download()) << "layernorm, frozen " << f;
      if ((f & 1) == 0) ExpectAllClose(dw2.Download(), dw.Download(), 1e-5, 1e-4, "dweight");
      if ((f & 2) == 0) ExpectAllClose(db2.Download(), db.Download(), 1e-5, 1e-4, "dbias");
    }

    // RMSNorm without dweight.
    DeviceArray rms_out(t, size_t{N} * C), rms_rstd(DType::kFloat32, N);
    HOIST_ASSERT_OK(gpu_->RmsNormForward(rms_out.data(), rms_rstd.as<float>(), inp.data(),
                                         lnw.data(), N, C, 1e-6f, RmsNormStyle::kLlama, t, gs()));
    DeviceArray rms_full(t, dinp0), rms_frozen(t, dinp0),
        rdw(DType::kFloat32, std::vector<float>(C, 0.0f));
    HOIST_ASSERT_OK(gpu_->RmsNormBackward(rms_full.data(), rdw.as<float>(), dy.data(), inp.data(),
                                          lnw.data(), rms_rstd.as<float>(), N, C,
                                          RmsNormStyle::kLlama, t, gs()));
    HOIST_ASSERT_OK(gpu_->RmsNormBackward(rms_frozen.data(), nullptr, dy.data(), inp.data(),
                                          lnw.data(), rms_rstd.as<float>(), N, C,
                                          RmsNormStyle::kLlama, t, gs()));
    Finish();
    EXPECT_EQ(rms_frozen.Download(), rms_full.Download()) << "rmsnorm";
  }
}

// ---- Gemm ----

double UnitRoundoff(DType type) {
  switch (type) {
    case DType::kFloat32: return std::ldexp(1.0, -24);
    case DType::kBFloat16: return std::ldexp(1.0, -8);
    case DType::kFloat16: return std::ldexp(1.0, -11);
  }
  return 0;
}

// A row-major (rows, cols) matrix stored ld apart, its padding `pad`, rounded to `type`.
std::vector<float> Stored(DType type, int64_t rows, int64_t cols, int64_t ld, uint32_t seed,
                          float pad) {
  std::vector<float> all(static_cast<size_t>(std::max<int64_t>(rows * ld, 1)), pad);
  const std::vector<float> v = RandomFloats(static_cast<size_t>(rows * cols), seed);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) all[r * ld + c] = v[r * cols + c];
  }
  return RoundTo(type, all);
}

struct GemmCase {
  DType type, c_type;
  bool trans_a, trans_b;
  float alpha, beta;
  int M, N, K;
};

void CheckAgainstCpu(CpuBackend& cpu, CudaBackend& gpu, const GemmCase& g) {
  SCOPED_TRACE(std::string(DTypeName(g.type)) + "->" + DTypeName(g.c_type) +
               (g.trans_a ? " At" : " A") + (g.trans_b ? " Bt" : " B") + " alpha " +
               std::to_string(g.alpha) + " beta " + std::to_string(g.beta) + " M,N,K " +
               std::to_string(g.M) + "," + std::to_string(g.N) + "," + std::to_string(g.K));
  const int M = g.M, N = g.N, K = g.K;
  const int64_t a_rows = g.trans_a ? K : M, a_cols = g.trans_a ? M : K, lda = a_cols + 3;
  const int64_t b_rows = g.trans_b ? N : K, b_cols = g.trans_b ? K : N, ldb = b_cols + 5;
  const std::vector<float> a = Stored(g.type, a_rows, a_cols, lda, 1, kNaN),
                           b = Stored(g.type, b_rows, b_cols, ldb, 2, kNaN);
  // C: the (M, N) window at (1, 3) of a (M + 2, N + 7) matrix of 7 (NaN inside where beta is 0).
  const int64_t ldc = N + 7, offset = 1 * ldc + 3;
  std::vector<float> c(static_cast<size_t>((M + 2) * ldc), 7.0f);
  const std::vector<float> window = RandomFloats(static_cast<size_t>(M) * N, 3);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j)
      c[offset + i * ldc + j] = g.beta == 0 ? kNaN : window[i * N + j];
  }
  c = RoundTo(g.c_type, c);

  std::vector<char> ha = HostBytesOf(g.type, a), hb = HostBytesOf(g.type, b),
                    hc = HostBytesOf(g.c_type, c);
  DeviceArray da(g.type, a), db(g.type, b), dc(g.c_type, c);
  const size_t e = DTypeSize(g.c_type);
  HOIST_ASSERT_OK(cpu.Gemm(g.trans_a, g.trans_b, M, N, K, g.alpha, ha.data(), lda, hb.data(), ldb,
                           g.beta, hc.data() + offset * e, ldc, g.type, g.c_type,
                           cpu.compute_stream()));
  HOIST_ASSERT_OK(gpu.Gemm(g.trans_a, g.trans_b, M, N, K, g.alpha, da.data(), lda, db.data(), ldb,
                           g.beta, static_cast<char*>(dc.data()) + offset * e, ldc, g.type,
                           g.c_type, gpu.compute_stream()));
  ASSERT_TRUE(cpu.compute_stream().Synchronize().ok());
  ASSERT_TRUE(gpu.compute_stream().Synchronize().ok());
  const std::vector<float> want = WidenOf(g.c_type, hc), got = dc.Download();

  const double u32 = UnitRoundoff(DType::kFloat32);
  const double u_c = g.c_type == DType::kFloat32 ? 0.0 : 2.0 * UnitRoundoff(g.c_type);
  int bad = 0;
  for (int64_t i = 0; i < M + 2; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t at = i * ldc + j;
      const int64_t r = i - 1, col = j - 3;
      if (r < 0 || r >= M || col < 0 || col >= N) {
        if (got[at] != c[at] && bad++ < 5)
          ADD_FAILURE() << "C written at (" << i << ", " << j << ")";
        continue;
      }
      double magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double x = g.trans_a ? a[k * lda + r] : a[r * lda + k];
        const double y = g.trans_b ? b[col * ldb + k] : b[k * ldb + col];
        magnitude += std::fabs(x * y);
      }
      magnitude *= std::fabs(g.alpha);
      if (g.beta != 0) magnitude += std::fabs(g.beta * c[at]);
      // Both sides accumulate in fp32 (orders differ) and round C once: each may be an ulp away.
      const double bound = 4.0 * (K + 2) * u32 * magnitude + 2.0 * u_c * std::fabs(want[at]) +
                           (g.c_type == DType::kFloat16 ? std::ldexp(1.0, -23) : 0.0);
      if (!(std::fabs(static_cast<double>(got[at]) - want[at]) <= bound) && bad++ < 5) {
        ADD_FAILURE() << "C(" << r << ", " << col << ") = " << got[at] << ", CPU " << want[at]
                      << ", bound " << bound;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(CudaLoraOps, GemmAgreesWithTheCpuForEveryLayoutTypeAndScale) {
  for (DType type : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (DType c_type : {DType::kFloat32, type}) {
      for (int t = 0; t < 4; ++t) {
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.75f, 1.25f}, {-2.0f, -0.5f}}) {
          CheckAgainstCpu(cpu_, *gpu_,
                          {type, c_type, (t & 1) != 0, (t & 2) != 0, alpha, beta, 13, 11, 17});
          CheckAgainstCpu(cpu_, *gpu_,
                          {type, c_type, (t & 1) != 0, (t & 2) != 0, alpha, beta, 64, 48, 640});
        }
      }
      if (type == DType::kFloat32) break;
    }
    CheckAgainstCpu(cpu_, *gpu_, {type, type, false, false, 1.0f, 0.5f, 5, 6, 0});
    CheckAgainstCpu(cpu_, *gpu_, {type, DType::kFloat32, true, false, 1.0f, 0.0f, 5, 6, 0});
  }
}

TEST_F(CudaLoraOps, GemmRefusesWhatTheCpuRefuses) {
  DeviceArray x(DType::kFloat32, 64);
  const DType f = DType::kFloat32;
  const Status lda =
      gpu_->Gemm(false, false, 4, 4, 4, 1, x.data(), 3, x.data(), 4, 0, x.data(), 4, f, f, gs());
  EXPECT_EQ(lda.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lda.message().find("lda"), std::string::npos) << lda.message();
  const Status type = gpu_->Gemm(false, false, 4, 4, 4, 1, x.data(), 4, x.data(), 4, 0, x.data(), 4,
                                 DType::kBFloat16, DType::kFloat16, gs());
  EXPECT_EQ(type.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(type.message().find("c_type"), std::string::npos) << type.message();
}

// ---- Dropout ----

TEST_F(CudaLoraOps, DropoutIsTheCpusBitForBit) {
  constexpr int64_t n = 1000003;
  const std::vector<float> values = RandomFloats(n, 11, -2.0f, 2.0f);
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + " p " + std::to_string(p));
      const std::vector<char> in = HostBytesOf(t, values);
      std::vector<char> out(in.size());
      DeviceArray d_in(t, values), d_out(t, n), d_inplace(t, values);
      d_out.Poison();
      HOIST_ASSERT_OK(cpu_.Dropout(out.data(), in.data(), n, p, 2024, t, cs()));
      HOIST_ASSERT_OK(gpu_->Dropout(d_out.data(), d_in.data(), n, p, 2024, t, gs()));
      HOIST_ASSERT_OK(gpu_->Dropout(d_inplace.data(), d_inplace.data(), n, p, 2024, t, gs()));
      Finish();
      const std::vector<float> want = WidenOf(t, out), got = d_out.Download();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "GPU != CPU";
      EXPECT_EQ(d_inplace.Download(), got) << "in place != out of place";
    }
  }
}

}  // namespace
}  // namespace hoist::kernels

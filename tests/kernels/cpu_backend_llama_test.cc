// The CPU backend's Llama ops against kernels/cpu/ops.h called directly: in fp32 the same bits;
// in bf16 and fp16 the contract (inputs widened exactly, the fp32 kernel, outputs rounded once,
// gradients added in fp32 before that rounding; RMSNorm's normalised row rounded to the type
// before the weight). Inline and threaded streams; bad arguments name the op and the array.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "kernels/rope.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels {
namespace {

using Mode = HostStream::Mode;
using cpu::testing::RandomFloats;

constexpr int B = 2, T = 9, NH = 4, NKV = 2, hd = 8, C = 24, I = 12, N = B * T;
constexpr int W = (NH + 2 * NKV) * hd;
constexpr float kEps = 1e-6f;

std::vector<uint16_t> Narrow(const std::vector<float>& x, DType type) {
  std::vector<uint16_t> out(x.size());
  cpu::FromFloat(x.data(), out.data(), type, static_cast<int64_t>(x.size()));
  return out;
}
std::vector<float> Widen(const std::vector<uint16_t>& x, DType type) {
  std::vector<float> out(x.size());
  cpu::ToFloat(x.data(), type, out.data(), static_cast<int64_t>(x.size()));
  return out;
}
template <typename E>
bool SameBits(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0;
}

#define EXPECT_OK(expr)                              \
  do {                                               \
    const ::hoist::Status status_ = (expr);          \
    EXPECT_TRUE(status_.ok()) << status_.ToString(); \
  } while (0)

class CpuBackendLlama : public ::testing::TestWithParam<Mode> {
 protected:
  CpuBackendLlama() : device_(Place::kDevice, &tracker_), backend_(&device_, GetParam()) {}
  const Stream& s() const { return backend_.compute_stream(); }
  void Sync() { ASSERT_TRUE(s().Synchronize().ok()); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
  const RopeTable table_ = MakeRopeTable(RopeInvFreq(hd, 10000.0).value(), T);
};

TEST_P(CpuBackendLlama, Fp32OpsAreTheCpuKernelsBitForBit) {
  const DType f = DType::kFloat32;
  const std::vector<float> x = RandomFloats(size_t{N} * C, 1), w = RandomFloats(C, 2),
                           dout = RandomFloats(size_t{N} * C, 3), dx0 = RandomFloats(x.size(), 4);
  std::vector<float> y(x.size()), rstd(N), dx = dx0, dw(C, 0.5f);
  EXPECT_OK(backend_.RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps,
                                    RmsNormStyle::kLlama, f, s()));
  EXPECT_OK(backend_.RmsNormBackward(dx.data(), dw.data(), dout.data(), x.data(), w.data(),
                                     rstd.data(), N, C, RmsNormStyle::kLlama, f, s()));
  const std::vector<float> qkv = RandomFloats(size_t{N} * W, 5),
                           gu = RandomFloats(size_t{N} * 2 * I, 6),
                           sdout = RandomFloats(size_t{N} * I, 7),
                           dgu0 = RandomFloats(gu.size(), 8);
  std::vector<float> roped = qkv, droped = qkv;
  EXPECT_OK(backend_.RopeForward(roped.data(), table_.cos.data(), table_.sin.data(), B, T, NH, NKV,
                                 hd, f, s()));
  EXPECT_OK(backend_.RopeBackward(droped.data(), table_.cos.data(), table_.sin.data(), B, T, NH,
                                  NKV, hd, f, s()));
  std::vector<float> sw(size_t{N} * I), dgu = dgu0;
  EXPECT_OK(backend_.GluForward(sw.data(), gu.data(), N, I, GluActivation::kSilu, f, s()));
  EXPECT_OK(backend_.GluBackward(dgu.data(), gu.data(), sdout.data(), N, I, GluActivation::kSilu, f,
                                 s()));
  const std::vector<float> adout = RandomFloats(size_t{N} * NH * hd, 9),
                           dq0 = RandomFloats(qkv.size(), 10);
  std::vector<float> out(adout.size()), att(size_t{B} * NH * T * T), tout(out.size()),
      lse(size_t{B} * NH * T), dq = dq0, tdq = dq0;
  EXPECT_OK(backend_.GqaAttentionForward(out.data(), att.data(), qkv.data(), nullptr, B, T, NH, NKV,
                                         hd, {}, f, s()));
  EXPECT_OK(backend_.GqaAttentionBackward(dq.data(), adout.data(), qkv.data(), att.data(), nullptr,
                                          B, T, NH, NKV, hd, {}, f, s()));
  EXPECT_OK(backend_.GqaAttentionForwardTiled(tout.data(), lse.data(), qkv.data(), B, T, NH, NKV,
                                              hd, {}, f, s()));
  EXPECT_OK(backend_.GqaAttentionBackwardTiled(tdq.data(), adout.data(), qkv.data(), tout.data(),
                                               lse.data(), nullptr, B, T, NH, NKV, hd, {}, f, s()));
  Sync();

  std::vector<float> y_ref(x.size()), rstd_ref(N), dx_ref = dx0, dw_ref(C, 0.5f);
  cpu::RmsNormForward(y_ref.data(), rstd_ref.data(), x.data(), w.data(), N, C, kEps);
  cpu::RmsNormBackward(dx_ref.data(), dw_ref.data(), dout.data(), x.data(), w.data(),
                       rstd_ref.data(), N, C);
  std::vector<float> roped_ref = qkv, droped_ref = qkv;
  cpu::RopeForward(roped_ref.data(), table_.cos.data(), table_.sin.data(), B, T, NH, NKV, hd);
  cpu::RopeBackward(droped_ref.data(), table_.cos.data(), table_.sin.data(), B, T, NH, NKV, hd);
  std::vector<float> sw_ref(sw.size()), dgu_ref = dgu0;
  cpu::GluForward(sw_ref.data(), gu.data(), N, I, GluActivation::kSilu);
  cpu::GluBackward(dgu_ref.data(), gu.data(), sdout.data(), N, I, GluActivation::kSilu);
  std::vector<float> out_ref(out.size()), att_ref(att.size()), tout_ref(out.size()),
      lse_ref(lse.size()), dq_ref = dq0, tdq_ref = dq0;
  cpu::AttentionForwardGqa(out_ref.data(), att_ref.data(), qkv.data(), B, T, NH, NKV, hd);
  cpu::AttentionBackwardGqa(dq_ref.data(), adout.data(), qkv.data(), att_ref.data(), B, T, NH, NKV,
                            hd);
  cpu::AttentionForwardTiledGqa(tout_ref.data(), lse_ref.data(), qkv.data(), B, T, NH, NKV, hd);
  cpu::AttentionBackwardTiledGqa(tdq_ref.data(), adout.data(), qkv.data(), tout_ref.data(),
                                 lse_ref.data(), B, T, NH, NKV, hd);

  EXPECT_TRUE(SameBits(y, y_ref));
  EXPECT_TRUE(SameBits(rstd, rstd_ref));
  EXPECT_TRUE(SameBits(dx, dx_ref));
  EXPECT_TRUE(SameBits(dw, dw_ref));
  EXPECT_TRUE(SameBits(roped, roped_ref));
  EXPECT_TRUE(SameBits(droped, droped_ref));
  EXPECT_TRUE(SameBits(sw, sw_ref));
  EXPECT_TRUE(SameBits(dgu, dgu_ref));
  EXPECT_TRUE(SameBits(out, out_ref));
  EXPECT_TRUE(SameBits(att, att_ref));
  EXPECT_TRUE(SameBits(dq, dq_ref));
  EXPECT_TRUE(SameBits(tout, tout_ref));
  EXPECT_TRUE(SameBits(lse, lse_ref));
  EXPECT_TRUE(SameBits(tdq, tdq_ref));
}

TEST_P(CpuBackendLlama, SixteenBitOpsWidenComputeInFp32AndRoundOnce) {
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(h));
    const std::vector<uint16_t> x = Narrow(RandomFloats(size_t{N} * C, 20, -2.0f, 2.0f), h),
                                w = Narrow(RandomFloats(C, 21, 0.5f, 1.5f), h);
    std::vector<uint16_t> y(x.size());
    std::vector<float> rstd(N);
    EXPECT_OK(backend_.RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps,
                                      RmsNormStyle::kLlama, h, s()));
    const std::vector<uint16_t> qkv = Narrow(RandomFloats(size_t{N} * W, 22), h),
                                gu = Narrow(RandomFloats(size_t{N} * 2 * I, 23, -3.0f, 3.0f), h),
                                sdout = Narrow(RandomFloats(size_t{N} * I, 24), h),
                                dgu0 = Narrow(RandomFloats(gu.size(), 25), h);
    std::vector<uint16_t> roped = qkv, sw(size_t{N} * I), dgu = dgu0;
    EXPECT_OK(backend_.RopeForward(roped.data(), table_.cos.data(), table_.sin.data(), B, T, NH,
                                   NKV, hd, h, s()));
    EXPECT_OK(backend_.GluForward(sw.data(), gu.data(), N, I, GluActivation::kSilu, h, s()));
    EXPECT_OK(backend_.GluBackward(dgu.data(), gu.data(), sdout.data(), N, I, GluActivation::kSilu,
                                   h, s()));
    Sync();

    std::vector<float> y_ref(x.size()), rstd_ref(N);
    cpu::RmsNormForward(y_ref.data(), rstd_ref.data(), Widen(x, h).data(), Widen(w, h).data(), N, C,
                        kEps, h);
    EXPECT_TRUE(SameBits(y, Narrow(y_ref, h)));
    EXPECT_TRUE(SameBits(rstd, rstd_ref));
    std::vector<float> roped_ref = Widen(qkv, h);
    cpu::RopeForward(roped_ref.data(), table_.cos.data(), table_.sin.data(), B, T, NH, NKV, hd);
    EXPECT_TRUE(SameBits(roped, Narrow(roped_ref, h)));
    std::vector<float> sw_ref(sw.size()), dgu_ref = Widen(dgu0, h);
    cpu::GluForward(sw_ref.data(), Widen(gu, h).data(), N, I, GluActivation::kSilu);
    cpu::GluBackward(dgu_ref.data(), Widen(gu, h).data(), Widen(sdout, h).data(), N, I,
                     GluActivation::kSilu);
    EXPECT_TRUE(SameBits(sw, Narrow(sw_ref, h)));
    EXPECT_TRUE(SameBits(dgu, Narrow(dgu_ref, h))) << "added in fp32, then rounded once";
  }
}

// The 16-bit row ops work a block of rows at a time (cpu_backend_args.h RowBlocks): over several
// blocks and a tail (and, for the rotation, blocks that restart in every sequence), still bit for
// bit the fp32 kernel on widened arrays, gradients added in fp32 and rounded once, dweight summed
// in the same row order.
TEST_P(CpuBackendLlama, SixteenBitRowOpsOverManyBlocksAreTheWidenedKernels) {
  constexpr int bN = 2100, bC = 96, bI = 200;  // 4 blocks of RMSNorm rows, 7 of SwiGLU's
  constexpr int bB = 3, bT = 700, bNH = 4, bNKV = 2, bhd = 16;  // 2 blocks a sequence
  constexpr int bW = (bNH + 2 * bNKV) * bhd;
  const RopeTable table = MakeRopeTable(RopeInvFreq(bhd, 10000.0).value(), bT);
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(h));
    const std::vector<uint16_t> x = Narrow(RandomFloats(size_t{bN} * bC, 40, -2.0f, 2.0f), h),
                                w = Narrow(RandomFloats(bC, 41, 0.5f, 1.5f), h),
                                dy = Narrow(RandomFloats(x.size(), 42), h),
                                dx0 = Narrow(RandomFloats(x.size(), 43), h),
                                gu = Narrow(RandomFloats(size_t{bN} * 2 * bI, 44, -3.0f, 3.0f), h),
                                sdout = Narrow(RandomFloats(size_t{bN} * bI, 45), h),
                                dgu0 = Narrow(RandomFloats(gu.size(), 46), h),
                                qkv = Narrow(RandomFloats(size_t{bB} * bT * bW, 47), h);
    std::vector<uint16_t> y(x.size()), dx = dx0, sw(sdout.size()), dgu = dgu0, roped = qkv,
                                       unroped = qkv;
    std::vector<float> rstd(bN), dw(bC, 0.125f);
    EXPECT_OK(backend_.RmsNormForward(y.data(), rstd.data(), x.data(), w.data(), bN, bC, kEps,
                                      RmsNormStyle::kLlama, h, s()));
    EXPECT_OK(backend_.RmsNormBackward(dx.data(), dw.data(), dy.data(), x.data(), w.data(),
                                       rstd.data(), bN, bC, RmsNormStyle::kLlama, h, s()));
    EXPECT_OK(backend_.GluForward(sw.data(), gu.data(), bN, bI, GluActivation::kSilu, h, s()));
    EXPECT_OK(backend_.GluBackward(dgu.data(), gu.data(), sdout.data(), bN, bI,
                                   GluActivation::kSilu, h, s()));
    EXPECT_OK(backend_.RopeForward(roped.data(), table.cos.data(), table.sin.data(), bB, bT, bNH,
                                   bNKV, bhd, h, s()));
    EXPECT_OK(backend_.RopeBackward(unroped.data(), table.cos.data(), table.sin.data(), bB, bT, bNH,
                                    bNKV, bhd, h, s()));
    Sync();

    std::vector<float> y_ref(x.size()), rstd_ref(bN), dx_ref = Widen(dx0, h), dw_ref(bC, 0.125f);
    cpu::RmsNormForward(y_ref.data(), rstd_ref.data(), Widen(x, h).data(), Widen(w, h).data(), bN,
                        bC, kEps, h);
    cpu::RmsNormBackward(dx_ref.data(), dw_ref.data(), Widen(dy, h).data(), Widen(x, h).data(),
                         Widen(w, h).data(), rstd_ref.data(), bN, bC);
    EXPECT_TRUE(SameBits(y, Narrow(y_ref, h)));
    EXPECT_TRUE(SameBits(rstd, rstd_ref));
    EXPECT_TRUE(SameBits(dx, Narrow(dx_ref, h)));
    EXPECT_TRUE(SameBits(dw, dw_ref)) << "dweight in the same row order";
    std::vector<float> sw_ref(sw.size()), dgu_ref = Widen(dgu0, h);
    cpu::GluForward(sw_ref.data(), Widen(gu, h).data(), bN, bI, GluActivation::kSilu);
    cpu::GluBackward(dgu_ref.data(), Widen(gu, h).data(), Widen(sdout, h).data(), bN, bI,
                     GluActivation::kSilu);
    EXPECT_TRUE(SameBits(sw, Narrow(sw_ref, h)));
    EXPECT_TRUE(SameBits(dgu, Narrow(dgu_ref, h)));
    std::vector<float> roped_ref = Widen(qkv, h), unroped_ref = Widen(qkv, h);
    cpu::RopeForward(roped_ref.data(), table.cos.data(), table.sin.data(), bB, bT, bNH, bNKV, bhd);
    cpu::RopeBackward(unroped_ref.data(), table.cos.data(), table.sin.data(), bB, bT, bNH, bNKV,
                      bhd);
    EXPECT_TRUE(SameBits(roped, Narrow(roped_ref, h))) << "each position's own angles";
    EXPECT_TRUE(SameBits(unroped, Narrow(unroped_ref, h)));
  }
}

// 16-bit accuracy against float64 references of the formulas on the (exact) widened inputs. u is
// the type's unit roundoff (2^-8 bf16, 2^-11 fp16). Each output is rounded once (u |ref|),
// RMSNorm's twice (the normalised value, then the output: 2u |ref|); the fp32 arithmetic before the
// rounding adds a few 2^-24 relative, covered by 1e-6 |ref| (1e-6 of the largest value where a
// difference can cancel, as in the rotation) and an atol for fp16's subnormals.
TEST_P(CpuBackendLlama, SixteenBitOpsAreWithinTheirRoundingsOfFloat64) {
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(h));
    const double u = h == DType::kBFloat16 ? 1.0 / 256 : 1.0 / 2048;
    const auto expect_within = [](const std::vector<float>& got, const std::vector<double>& ref,
                                  double rel, double scale_rel, const char* what) {
      double scale = 0.0;
      for (double r : ref) scale = std::max(scale, std::fabs(r));
      int reported = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const double bound = rel * std::fabs(ref[i]) + scale_rel * scale + 1e-7;
        if (!(std::fabs(got[i] - ref[i]) <= bound) && reported++ < 5) {
          ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << ref[i];
        }
      }
    };
    // RMSNorm.
    const std::vector<float> x = Widen(Narrow(RandomFloats(size_t{N} * C, 40, -2.0f, 2.0f), h), h),
                             w = Widen(Narrow(RandomFloats(C, 41, 0.5f, 1.5f), h), h);
    const std::vector<uint16_t> xb = Narrow(x, h), wb = Narrow(w, h);
    std::vector<uint16_t> y(x.size());
    std::vector<float> rstd(N);
    EXPECT_OK(backend_.RmsNormForward(y.data(), rstd.data(), xb.data(), wb.data(), N, C, kEps,
                                      RmsNormStyle::kLlama, h, s()));
    // SwiGLU, forward and backward (from a zero gradient: dinp rounds once).
    const std::vector<float> gu = Widen(Narrow(RandomFloats(size_t{N} * 2 * I, 42, -4.0f, 4.0f), h),
                                        h),
                             dy = Widen(Narrow(RandomFloats(size_t{N} * I, 43), h), h);
    const std::vector<uint16_t> gub = Narrow(gu, h), dyb = Narrow(dy, h);
    std::vector<uint16_t> act(size_t{N} * I), dgu(gu.size(), 0);
    EXPECT_OK(backend_.GluForward(act.data(), gub.data(), N, I, GluActivation::kSilu, h, s()));
    EXPECT_OK(backend_.GluBackward(dgu.data(), gub.data(), dyb.data(), N, I, GluActivation::kSilu,
                                   h, s()));
    // The rotation.
    const std::vector<float> qkv = Widen(Narrow(RandomFloats(size_t{N} * W, 44), h), h);
    std::vector<uint16_t> roped = Narrow(qkv, h);
    EXPECT_OK(backend_.RopeForward(roped.data(), table_.cos.data(), table_.sin.data(), B, T, NH,
                                   NKV, hd, h, s()));
    Sync();

    std::vector<double> y_ref(x.size()), act_ref(act.size()), dgu_ref(dgu.size()),
        rope_ref(qkv.begin(), qkv.end());
    for (int i = 0; i < N; ++i) {
      double ss = 0.0;
      for (int c = 0; c < C; ++c) ss += double{x[i * C + c]} * x[i * C + c];
      const double r = 1.0 / std::sqrt(ss / C + kEps);
      for (int c = 0; c < C; ++c) y_ref[i * C + c] = x[i * C + c] * r * w[c];
    }
    for (int i = 0; i < N; ++i) {
      for (int j = 0; j < I; ++j) {
        const double g = gu[i * 2 * I + j], up = gu[i * 2 * I + I + j], d = dy[i * I + j];
        const double sig = 1.0 / (1.0 + std::exp(-g));
        act_ref[i * I + j] = g * sig * up;
        dgu_ref[i * 2 * I + j] = d * up * sig * (1.0 + g * (1.0 - sig));
        dgu_ref[i * 2 * I + I + j] = d * g * sig;
      }
    }
    const int half = hd / 2;
    for (int bt = 0; bt < N; ++bt) {
      const int t = bt % T;
      for (int head = 0; head < NH + NKV; ++head) {
        const size_t at = size_t{1} * bt * W + head * hd;
        for (int i = 0; i < half; ++i) {
          const double c = table_.cos[t * half + i], sn = table_.sin[t * half + i];
          rope_ref[at + i] = qkv[at + i] * c - qkv[at + i + half] * sn;
          rope_ref[at + i + half] = qkv[at + i + half] * c + qkv[at + i] * sn;
        }
      }
    }
    expect_within(Widen(y, h), y_ref, 2 * u * (1 + u) + 1e-6, 0.0, "rmsnorm out");
    expect_within(Widen(act, h), act_ref, u + 1e-6, 0.0, "swiglu out");
    expect_within(Widen(dgu, h), dgu_ref, u + 1e-6, 0.0, "swiglu dinp");
    expect_within(Widen(roped, h), rope_ref, u, 1e-6, "rope");
  }
}

TEST_P(CpuBackendLlama, BadArgumentsNameTheOpAndTheArray) {
  std::vector<float> a(4096), b(4096);
  const DType f = DType::kFloat32;
  const auto expect = [](const Status& status, const std::string& op, const std::string& what) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(op), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(what), std::string::npos) << status.ToString();
  };
  expect(backend_.GqaAttentionForward(a.data(), a.data(), b.data(), nullptr, 1, 2, 6, 4, 8, {}, f,
                                      s()),
         "GqaAttentionForward", "not a multiple of NKV");
  expect(backend_.RmsNormForward(a.data(), a.data(), nullptr, a.data(), 4, 4, kEps,
                                 RmsNormStyle::kLlama, f, s()),
         "RmsNormForward", "inp is null");
  expect(backend_.RopeForward(a.data(), a.data(), b.data(), 1, 2, 2, 1, 7, f, s()), "RopeForward",
         "must be even");
  expect(backend_.GluBackward(a.data(), b.data(), a.data(), 4, 0, GluActivation::kSilu, f, s()),
         "GluBackward", "I must be positive");
}

INSTANTIATE_TEST_SUITE_P(Streams, CpuBackendLlama,
                         ::testing::Values(Mode::kInline, Mode::kThreaded),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param == Mode::kInline ? "Inline" : "Threaded");
                         });

}  // namespace
}  // namespace hoist::kernels

// The attention options (kernels/attention_options.h) on the CPU's 16-bit attention: the bf16
// kernels (attention_bf16.h, flash_attention_bf16.h), direct and tiled, and the CPU backend's bf16
// and fp16 ops, against the float64 reference on the same 16-bit inputs over the options' grid;
// windows of T or more give the plain kernels' bits; the tiled kernel never touches key tiles
// outside every window.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention_options.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/flash_attention_bf16.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels/attention_options_test_util.h"
#include "tests/kernels/bf16_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using kernels::testing::AttentionOptionGrid;
using kernels::testing::ComputeReferenceAttention;
using kernels::testing::Describe;
using kernels::testing::ExpectWithin;
using kernels::testing::OnePlusAbs;
using kernels::testing::Plus;
using kernels::testing::ReferenceAttention;
using testing::kU;
using testing::RandomFloats;
using testing::SameBits;
using testing::ToBf16;
using testing::Widen;

// T = 70: inside the default tile (128) and across the small ones below; groups of 3.
constexpr int B = 2, T = 70, NH = 6, NKV = 2, hd = 16;
constexpr int C = NH * hd, W = (NH + 2 * NKV) * hd;
constexpr size_t kQkv = size_t(B) * T * W, kOut = size_t(B) * T * C;
constexpr size_t kAtt = size_t(B) * NH * T * T, kLse = size_t(B) * NH * T;

// fp32's part of the error, as in attention_options_test.cc.
constexpr double kRel32 = 4e-6;

// The 16-bit inputs and their exact fp32 widening, which the reference reads.
struct Inputs {
  std::vector<uint16_t> qkv = ToBf16(RandomFloats(kQkv, 31, -2.0f, 2.0f));
  std::vector<uint16_t> dout = ToBf16(RandomFloats(kOut, 32));
  std::vector<uint16_t> dqkv0 = ToBf16(RandomFloats(kQkv, 33));
  std::vector<float> qkv32 = Widen(qkv), dout32 = Widen(dout), dqkv032 = Widen(dqkv0);
};

std::vector<double> Abs(const std::vector<double>& x) {
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = std::fabs(x[i]);
  return out;
}

// The bf16 paths round P before P V and dS before the products that take it (u = 2^-8 each,
// relative to the terms' magnitude), the tiled backward's delta reads the rounded out (u more of
// the terms), and each output is rounded once (u of itself); fp32 adds its 4e-6 of the terms.
// out within (2u + 4e-6) of its terms, so 3u; dqkv within 3u of its terms plus u of itself.
void ExpectWithinBf16Rounding(const ReferenceAttention& ref, const std::vector<float>& dqkv0,
                              const std::vector<float>& out, const std::vector<float>& dqkv,
                              double u, const std::string& what) {
  ExpectWithin(out, ref.out, ref.out_mag, 3 * u, 1e-6, what + " out");
  const std::vector<double> want = Plus(dqkv0, ref.dqkv), size = Abs(want);
  std::vector<double> mag(want.size());
  for (size_t i = 0; i < mag.size(); ++i) mag[i] = 3 * ref.dqkv_mag[i] + size[i];
  ExpectWithin(dqkv, want, mag, u, 1e-6, what + " dqkv");
}

TEST(AttentionOptionsBf16, DirectMatchesFloat64Reference) {
  SKIP_WITHOUT_BF16_GEMM();
  const Inputs in;
  for (const AttentionOptions& options : AttentionOptionGrid(T)) {
    SCOPED_TRACE(Describe(options));
    const ReferenceAttention ref =
        ComputeReferenceAttention(in.qkv32, in.dout32, B, T, NH, NKV, hd, options);
    std::vector<uint16_t> out(kOut), dqkv = in.dqkv0;
    std::vector<float> att(kAtt);
    AttentionForwardGqaBf16(out.data(), att.data(), in.qkv.data(), B, T, NH, NKV, hd, options);
    AttentionBackwardGqaBf16(dqkv.data(), in.dout.data(), in.qkv.data(), att.data(), B, T, NH, NKV,
                             hd, options);
    ExpectWithinBf16Rounding(ref, in.dqkv032, Widen(out), Widen(dqkv), kU, "direct");
    ExpectWithin(att, ref.att, ref.att, kRel32, 0.0, "att");  // fp32; exactly 0 outside
  }
}

TEST(AttentionOptionsBf16, TiledMatchesFloat64Reference) {
  SKIP_WITHOUT_BF16_GEMM();
  const Inputs in;
  for (const auto& [q_rows, k_cols] : {std::pair{128, 128}, std::pair{32, 24}, std::pair{7, 5}}) {
    TiledAttentionOptions tiles = DefaultTiledAttentionBf16Options(T);
    tiles.q_rows = q_rows, tiles.k_cols = k_cols;
    for (const AttentionOptions& options : AttentionOptionGrid(T)) {
      SCOPED_TRACE(Describe(options) + ", tiles " + std::to_string(q_rows) + "x" +
                   std::to_string(k_cols));
      const ReferenceAttention ref =
          ComputeReferenceAttention(in.qkv32, in.dout32, B, T, NH, NKV, hd, options);
      std::vector<uint16_t> out(kOut), dqkv = in.dqkv0;
      std::vector<float> lse(kLse);
      AttentionForwardTiledGqaBf16With(tiles, out.data(), lse.data(), in.qkv.data(), B, T, NH, NKV,
                                       hd, options);
      AttentionBackwardTiledGqaBf16With(tiles, dqkv.data(), in.dout.data(), in.qkv.data(),
                                        out.data(), lse.data(), B, T, NH, NKV, hd, options);
      ExpectWithinBf16Rounding(ref, in.dqkv032, Widen(out), Widen(dqkv), kU, "tiled");
      ExpectWithin(lse, ref.lse, OnePlusAbs(ref.lse), kRel32, 0.0, "lse");  // fp32
    }
  }
}

TEST(AttentionOptionsBf16, WindowOfAtLeastTIsTheFullCausalResultBitForBit) {
  SKIP_WITHOUT_BF16_GEMM();
  const Inputs in;
  const TiledAttentionOptions tiles[] = {DefaultTiledAttentionBf16Options(T),
                                         {32, 24, DefaultTiledAttentionBf16Options(T).level}};
  for (const int window : {T, T + 5, INT_MAX}) {
    for (const float softcap : {0.0f, 0.7f}) {
      const AttentionOptions plain{0.0f, 0, softcap}, windowed{0.0f, window, softcap};
      SCOPED_TRACE(Describe(windowed));
      std::vector<uint16_t> out_a(kOut), out_b(kOut), d_a = in.dqkv0, d_b = in.dqkv0;
      std::vector<float> att_a(kAtt), att_b(kAtt);
      AttentionForwardGqaBf16(out_a.data(), att_a.data(), in.qkv.data(), B, T, NH, NKV, hd, plain);
      AttentionForwardGqaBf16(out_b.data(), att_b.data(), in.qkv.data(), B, T, NH, NKV, hd,
                              windowed);
      AttentionBackwardGqaBf16(d_a.data(), in.dout.data(), in.qkv.data(), att_a.data(), B, T, NH,
                               NKV, hd, plain);
      AttentionBackwardGqaBf16(d_b.data(), in.dout.data(), in.qkv.data(), att_b.data(), B, T, NH,
                               NKV, hd, windowed);
      EXPECT_TRUE(SameBits(out_a, out_b));
      EXPECT_TRUE(SameBits(att_a, att_b));
      EXPECT_TRUE(SameBits(d_a, d_b));
      for (const TiledAttentionOptions& t : tiles) {
        std::vector<float> lse_a(kLse), lse_b(kLse);
        d_a = in.dqkv0, d_b = in.dqkv0;
        AttentionForwardTiledGqaBf16With(t, out_a.data(), lse_a.data(), in.qkv.data(), B, T, NH,
                                         NKV, hd, plain);
        AttentionForwardTiledGqaBf16With(t, out_b.data(), lse_b.data(), in.qkv.data(), B, T, NH,
                                         NKV, hd, windowed);
        AttentionBackwardTiledGqaBf16With(t, d_a.data(), in.dout.data(), in.qkv.data(),
                                          out_a.data(), lse_a.data(), B, T, NH, NKV, hd, plain);
        AttentionBackwardTiledGqaBf16With(t, d_b.data(), in.dout.data(), in.qkv.data(),
                                          out_b.data(), lse_b.data(), B, T, NH, NKV, hd, windowed);
        EXPECT_TRUE(SameBits(out_a, out_b)) << t.q_rows << "x" << t.k_cols;
        EXPECT_TRUE(SameBits(lse_a, lse_b)) << t.q_rows << "x" << t.k_cols;
        EXPECT_TRUE(SameBits(d_a, d_b)) << t.q_rows << "x" << t.k_cols;
      }
    }
  }
}

// As attention_options_test.cc's TiledSkipsTilesOutsideEveryWindow, on the bf16 kernel: values
// of +inf before key 16 leave the rows from 32 on as on clean inputs (window 10, 8 x 8 tiles), and
// dout of +inf from row 48 on leaves dk and dv of keys [0, 32) so.
TEST(AttentionOptionsBf16, TiledSkipsTilesOutsideEveryWindow) {
  SKIP_WITHOUT_BF16_GEMM();
  constexpr int t = 64, nh = 2, nkv = 1, d = 16, w = (nh + 2 * nkv) * d, c = nh * d;
  constexpr uint16_t kInf = 0x7f80;
  const AttentionOptions options{0.0f, 10, 0.0f};
  TiledAttentionOptions tiles = DefaultTiledAttentionBf16Options(t);
  tiles.q_rows = 8, tiles.k_cols = 8;
  const std::vector<uint16_t> qkv = ToBf16(RandomFloats(size_t(t) * w, 41)),
                              dout = ToBf16(RandomFloats(t * c, 42));
  std::vector<uint16_t> poisoned = qkv, poisoned_dout = dout;
  for (int j = 0; j < 16; ++j) {
    for (int i = 0; i < nkv * d; ++i) poisoned[size_t(j) * w + c + nkv * d + i] = kInf;  // v
  }
  for (size_t i = size_t(48) * c; i < dout.size(); ++i) poisoned_dout[i] = kInf;

  std::vector<uint16_t> out(t * c), out_p(t * c);
  std::vector<float> lse(nh * t), lse_p(nh * t);
  AttentionForwardTiledGqaBf16With(tiles, out.data(), lse.data(), qkv.data(), 1, t, nh, nkv, d,
                                   options);
  AttentionForwardTiledGqaBf16With(tiles, out_p.data(), lse_p.data(), poisoned.data(), 1, t, nh,
                                   nkv, d, options);
  EXPECT_TRUE(std::equal(out.begin() + 32 * c, out.end(), out_p.begin() + 32 * c));

  std::vector<uint16_t> dqkv(qkv.size(), 0), dqkv_p(qkv.size(), 0);
  AttentionBackwardTiledGqaBf16With(tiles, dqkv.data(), dout.data(), qkv.data(), out.data(),
                                    lse.data(), 1, t, nh, nkv, d, options);
  AttentionBackwardTiledGqaBf16With(tiles, dqkv_p.data(), poisoned_dout.data(), qkv.data(),
                                    out.data(), lse.data(), 1, t, nh, nkv, d, options);
  for (int j = 0; j < 32; ++j) {
    const size_t at = size_t(j) * w + c;
    EXPECT_TRUE(std::equal(dqkv.begin() + at, dqkv.begin() + at + 2 * nkv * d, dqkv_p.begin() + at))
        << "key " << j;
  }
}

// The CPU backend's bf16 and fp16 ops with options: bf16 on the bf16 kernels or on the widened
// fp32 ones (the run's choice), fp16 always widened, each output rounded once: within the bf16
// bounds above at the type's unit roundoff.
TEST(AttentionOptions16Bit, BackendMatchesFloat64Reference) {
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  CpuBackend backend(&device, HostStream::Mode::kInline);
  const Stream& stream = backend.compute_stream();
  const std::vector<float> qkv_in = RandomFloats(kQkv, 51, -2.0f, 2.0f),
                           dout_in = RandomFloats(kOut, 52), dqkv0_in = RandomFloats(kQkv, 53);
  for (const DType type : {DType::kBFloat16, DType::kFloat16}) {
    const double u = type == DType::kBFloat16 ? kU : std::ldexp(1.0, -11);
    const auto narrow = [type](const std::vector<float>& x) {
      std::vector<uint16_t> out(x.size());
      FromFloat(x.data(), out.data(), type, static_cast<int64_t>(x.size()));
      return out;
    };
    const auto widen = [type](const std::vector<uint16_t>& x) {
      std::vector<float> out(x.size());
      ToFloat(x.data(), type, out.data(), static_cast<int64_t>(x.size()));
      return out;
    };
    const std::vector<uint16_t> qkv = narrow(qkv_in), dout = narrow(dout_in),
                                dqkv0 = narrow(dqkv0_in);
    const std::vector<float> qkv32 = widen(qkv), dout32 = widen(dout), dqkv032 = widen(dqkv0);
    for (const AttentionOptions& options :
         {AttentionOptions{0.3f, 3, 0.7f}, AttentionOptions{0.0f, T - 1, 5.0f},
          AttentionOptions{0.0f, 1, 0.0f}}) {
      SCOPED_TRACE(std::string(DTypeName(type)) + ", " + Describe(options));
      const ReferenceAttention ref =
          ComputeReferenceAttention(qkv32, dout32, B, T, NH, NKV, hd, options);
      std::vector<uint16_t> out(kOut), dqkv = dqkv0, tout(kOut), tdqkv = dqkv0;
      std::vector<float> att(kAtt), lse(kLse);
      ASSERT_TRUE(backend
                      .GqaAttentionForward(out.data(), att.data(), qkv.data(), nullptr, B, T, NH,
                                           NKV, hd, options, type, stream)
                      .ok());
      ASSERT_TRUE(backend
                      .GqaAttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(),
                                            nullptr, B, T, NH, NKV, hd, options, type, stream)
                      .ok());
      ASSERT_TRUE(backend
                      .GqaAttentionForwardTiled(tout.data(), lse.data(), qkv.data(), B, T, NH, NKV,
                                                hd, options, type, stream)
                      .ok());
      ASSERT_TRUE(backend
                      .GqaAttentionBackwardTiled(tdqkv.data(), dout.data(), qkv.data(), tout.data(),
                                                 lse.data(), nullptr, B, T, NH, NKV, hd, options,
                                                 type, stream)
                      .ok());
      ASSERT_TRUE(stream.Synchronize().ok());
      ExpectWithinBf16Rounding(ref, dqkv032, widen(out), widen(dqkv), u, "direct");
      ExpectWithinBf16Rounding(ref, dqkv032, widen(tout), widen(tdqkv), u, "tiled");
      ExpectWithin(att, ref.att, ref.att, kRel32, 0.0, "att");
      ExpectWithin(lse, ref.lse, OnePlusAbs(ref.lse), kRel32, 0.0, "lse");
    }
  }
}

}  // namespace
}  // namespace hoist::kernels::cpu

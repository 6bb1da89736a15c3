// The attention options (kernels/attention_options.h) on the fp32 grouped-query kernels
// (kernels/cpu/ops.h, flash_attention.h) and the CPU backend: direct and tiled against a float64
// reference over a grid of windows (1, 3, T-1, T, T+5), softcaps and scales, at a length that is
// no multiple of any row block or tile and with groups of query heads; the backward against finite
// differences of the forward; windows of T or more and the explicit default scale give the plain
// kernels' bits; key tiles outside every window are never touched; bad options are refused.
#include "kernels/attention_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels/attention_options_test_util.h"
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
using testing::RandomFloats;
using testing::SimdLevelTest;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// B = 2, T = 70 (no multiple of the row blocks of 32, the default tiles of 64 or the small ones
// below), 6 query heads in groups of 3.
constexpr int B = 2, T = 70, NH = 6, NKV = 2, hd = 8;
constexpr int C = NH * hd, W = (NH + 2 * NKV) * hd;
constexpr size_t kQkv = size_t(B) * T * W, kOut = size_t(B) * T * C;
constexpr size_t kAtt = size_t(B) * NH * T * T, kLse = size_t(B) * NH * T;

// The inputs of every comparison: qkv in [-2, 2], dout and the gradient's prior value in [-1, 1].
struct Inputs {
  std::vector<float> qkv = RandomFloats(kQkv, 1, -2.0f, 2.0f);
  std::vector<float> dout = RandomFloats(kOut, 2);
  std::vector<float> dqkv0 = RandomFloats(kQkv, 3);
};

// fp32's errors here are its roundings (2^-24 a step) over sums of up to T terms, ExpApprox's
// 2e-7 and TanhApprox's 1e-7 absolute (times the softcap), on scores whose spread is some tens:
// each output lands within about 1e-6 of its terms' magnitude (7e-7 the most seen). 4e-6 of it.
constexpr double kRel = 4e-6;

void ExpectMatchesReference(const Inputs& in, const ReferenceAttention& ref,
                            const std::vector<float>& out, const std::vector<float>& dqkv,
                            const std::string& what) {
  ExpectWithin(out, ref.out, ref.out_mag, kRel, 1e-7, what + " out");
  ExpectWithin(dqkv, Plus(in.dqkv0, ref.dqkv), ref.dqkv_mag, kRel, 1e-6, what + " dqkv");
}

TEST(AttentionOptions, DirectMatchesFloat64Reference) {
  const Inputs in;
  for (const AttentionOptions& options : AttentionOptionGrid(T)) {
    SCOPED_TRACE(Describe(options));
    const ReferenceAttention ref =
        ComputeReferenceAttention(in.qkv, in.dout, B, T, NH, NKV, hd, options);
    std::vector<float> out(kOut), att(kAtt), dqkv = in.dqkv0;
    AttentionForwardGqa(out.data(), att.data(), in.qkv.data(), B, T, NH, NKV, hd, options);
    AttentionBackwardGqa(dqkv.data(), in.dout.data(), in.qkv.data(), att.data(), B, T, NH, NKV, hd,
                         options);
    ExpectMatchesReference(in, ref, out, dqkv, "direct");
    ExpectWithin(att, ref.att, ref.att, kRel, 0.0, "att");  // exactly 0 outside the window
  }
}

// The tiled kernels at every SIMD level, at the default tiles and at small uneven ones (windows
// that start inside a tile at every offset, rows whose window misses a whole tile).
class AttentionOptionsTiled : public SimdLevelTest {};

TEST_P(AttentionOptionsTiled, MatchesFloat64Reference) {
  const Inputs in;
  for (const auto& [q_rows, k_cols] : {std::pair{64, 64}, std::pair{16, 8}, std::pair{7, 5}}) {
    TiledAttentionOptions tiles = DefaultTiledAttentionOptions(T);
    tiles.q_rows = q_rows, tiles.k_cols = k_cols, tiles.level = level();
    for (const AttentionOptions& options : AttentionOptionGrid(T)) {
      SCOPED_TRACE(Describe(options) + ", tiles " + std::to_string(q_rows) + "x" +
                   std::to_string(k_cols));
      const ReferenceAttention ref =
          ComputeReferenceAttention(in.qkv, in.dout, B, T, NH, NKV, hd, options);
      std::vector<float> out(kOut), lse(kLse), dqkv = in.dqkv0;
      AttentionForwardTiledGqaWith(tiles, out.data(), lse.data(), in.qkv.data(), B, T, NH, NKV, hd,
                                   options);
      AttentionBackwardTiledGqaWith(tiles, dqkv.data(), in.dout.data(), in.qkv.data(), out.data(),
                                    lse.data(), B, T, NH, NKV, hd, options);
      ExpectMatchesReference(in, ref, out, dqkv, "tiled");
      ExpectWithin(lse, ref.lse, OnePlusAbs(ref.lse), kRel, 0.0, "lse");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, AttentionOptionsTiled, ::testing::ValuesIn(testing::kAllLevels),
                         testing::LevelName);

// The backward is the gradient of the forward, softcap's slope and the window included: central
// differences of sum(out * dout) through the fp32 forward, on a shape small enough to perturb
// every input. h = 1e-2 keeps fp32's noise in the loss (~1e-7) at ~1e-5 of the quotients (of size
// 1 here) and their truncation, h^2 times the third derivatives, at the same order: 2e-5 apart
// at most, against 2e-4 + 2e-3 |d| allowed.
TEST(AttentionOptions, BackwardIsTheGradientOfTheForwardWithWindowAndSoftcap) {
  constexpr int b = 1, t = 7, nh = 2, nkv = 1, d = 4, w = (nh + 2 * nkv) * d;
  const AttentionOptions options{0.3f, 3, 0.7f};
  const std::vector<float> qkv = RandomFloats(size_t(b) * t * w, 11, -2.0f, 2.0f),
                           dout = RandomFloats(size_t(b) * t * nh * d, 12);
  TiledAttentionOptions tiles = DefaultTiledAttentionOptions(t);
  tiles.q_rows = 3, tiles.k_cols = 2;  // windows across tile edges
  for (const bool tiled : {false, true}) {
    SCOPED_TRACE(tiled ? "tiled" : "direct");
    std::vector<float> out(size_t(b) * t * nh * d), att(size_t(b) * nh * t * t), lse(b * nh * t);
    const auto forward = [&](const float* x) {
      if (tiled) {
        AttentionForwardTiledGqaWith(tiles, out.data(), lse.data(), x, b, t, nh, nkv, d, options);
      } else {
        AttentionForwardGqa(out.data(), att.data(), x, b, t, nh, nkv, d, options);
      }
    };
    const auto loss = [&](const std::vector<double>& x) {
      const std::vector<float> x32(x.begin(), x.end());
      forward(x32.data());
      return testing::WeightedSum(testing::ToDouble(out), dout);
    };
    const std::vector<double> fd =
        testing::FiniteDifferenceGrad(testing::ToDouble(qkv), loss, 1e-2);
    forward(qkv.data());
    std::vector<float> grad(qkv.size(), 0.0f);
    if (tiled) {
      AttentionBackwardTiledGqaWith(tiles, grad.data(), dout.data(), qkv.data(), out.data(),
                                    lse.data(), b, t, nh, nkv, d, options);
    } else {
      AttentionBackwardGqa(grad.data(), dout.data(), qkv.data(), att.data(), b, t, nh, nkv, d,
                           options);
    }
    testing::ExpectAllClose(grad, fd, 2e-4, 2e-3, "dqkv");
  }
}

// The plain kernels' results and those of `options` on the same inputs, bit for bit: direct out,
// att and dqkv; tiled out, lse and dqkv at the default tiles and at small ones.
void ExpectSameBits(const Inputs& in, const AttentionOptions& a, const AttentionOptions& b) {
  std::vector<float> out_a(kOut), out_b(kOut), att_a(kAtt), att_b(kAtt);
  std::vector<float> d_a = in.dqkv0, d_b = in.dqkv0;
  AttentionForwardGqa(out_a.data(), att_a.data(), in.qkv.data(), B, T, NH, NKV, hd, a);
  AttentionForwardGqa(out_b.data(), att_b.data(), in.qkv.data(), B, T, NH, NKV, hd, b);
  AttentionBackwardGqa(d_a.data(), in.dout.data(), in.qkv.data(), att_a.data(), B, T, NH, NKV, hd,
                       a);
  AttentionBackwardGqa(d_b.data(), in.dout.data(), in.qkv.data(), att_b.data(), B, T, NH, NKV, hd,
                       b);
  EXPECT_TRUE(SameBits(out_a, out_b));
  EXPECT_TRUE(SameBits(att_a, att_b));
  EXPECT_TRUE(SameBits(d_a, d_b));
  for (const auto& [q_rows, k_cols] : {std::pair{64, 64}, std::pair{16, 8}}) {
    TiledAttentionOptions tiles = DefaultTiledAttentionOptions(T);
    tiles.q_rows = q_rows, tiles.k_cols = k_cols;
    std::vector<float> lse_a(kLse), lse_b(kLse);
    d_a = in.dqkv0, d_b = in.dqkv0;
    AttentionForwardTiledGqaWith(tiles, out_a.data(), lse_a.data(), in.qkv.data(), B, T, NH, NKV,
                                 hd, a);
    AttentionForwardTiledGqaWith(tiles, out_b.data(), lse_b.data(), in.qkv.data(), B, T, NH, NKV,
                                 hd, b);
    AttentionBackwardTiledGqaWith(tiles, d_a.data(), in.dout.data(), in.qkv.data(), out_a.data(),
                                  lse_a.data(), B, T, NH, NKV, hd, a);
    AttentionBackwardTiledGqaWith(tiles, d_b.data(), in.dout.data(), in.qkv.data(), out_b.data(),
                                  lse_b.data(), B, T, NH, NKV, hd, b);
    EXPECT_TRUE(SameBits(out_a, out_b)) << q_rows << "x" << k_cols;
    EXPECT_TRUE(SameBits(lse_a, lse_b)) << q_rows << "x" << k_cols;
    EXPECT_TRUE(SameBits(d_a, d_b)) << q_rows << "x" << k_cols;
  }
}

TEST(AttentionOptions, WindowOfAtLeastTIsTheFullCausalResultBitForBit) {
  const Inputs in;
  for (const int window : {T, T + 5, INT_MAX}) {
    SCOPED_TRACE("window " + std::to_string(window));
    ExpectSameBits(in, {}, {0.0f, window, 0.0f});
    ExpectSameBits(in, {0.3f, 0, 0.7f}, {0.3f, window, 0.7f});
  }
}

TEST(AttentionOptions, ExplicitDefaultScaleIsTheDefaultBitForBit) {
  const Inputs in;
  ExpectSameBits(in, {}, {1.0f / std::sqrt(static_cast<float>(hd)), 0, 0.0f});
}

// Keys outside every window of a query tile are never read: values of +inf there would turn the
// masked zeros of P V (0 * inf) into NaN. With window 10 and 8 x 8 tiles, query tiles from row 32
// on start their windows at key 23 or later, so the key tiles before 16 are outside; those rows'
// results are the bits of a run on clean inputs. The backward, likewise: dout of +inf from row 48
// on, which no query tile that sees keys [0, 32) reaches (key tile s0's last query tile starts
// at s0 + 16 or before).
TEST(AttentionOptions, TiledSkipsTilesOutsideEveryWindow) {
  constexpr int t = 64, nh = 2, nkv = 1, d = 8, w = (nh + 2 * nkv) * d, c = nh * d;
  const AttentionOptions options{0.0f, 10, 0.0f};
  TiledAttentionOptions tiles = DefaultTiledAttentionOptions(t);
  tiles.q_rows = 8, tiles.k_cols = 8;
  const std::vector<float> qkv = RandomFloats(size_t(t) * w, 21), dout = RandomFloats(t * c, 22);
  std::vector<float> poisoned = qkv, poisoned_dout = dout;
  const float inf = std::numeric_limits<float>::infinity();
  for (int j = 0; j < 16; ++j) {
    for (int i = 0; i < nkv * d; ++i) poisoned[size_t(j) * w + c + nkv * d + i] = inf;  // v
  }
  for (size_t i = size_t(48) * c; i < dout.size(); ++i) poisoned_dout[i] = inf;

  std::vector<float> out(t * c), lse(nh * t), out_p(t * c), lse_p(nh * t);
  AttentionForwardTiledGqaWith(tiles, out.data(), lse.data(), qkv.data(), 1, t, nh, nkv, d,
                               options);
  AttentionForwardTiledGqaWith(tiles, out_p.data(), lse_p.data(), poisoned.data(), 1, t, nh, nkv, d,
                               options);
  EXPECT_TRUE(std::equal(out.begin() + 32 * c, out.end(), out_p.begin() + 32 * c));

  std::vector<float> dqkv(qkv.size(), 0.0f), dqkv_p(qkv.size(), 0.0f);
  AttentionBackwardTiledGqaWith(tiles, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                1, t, nh, nkv, d, options);
  AttentionBackwardTiledGqaWith(tiles, dqkv_p.data(), poisoned_dout.data(), qkv.data(), out.data(),
                                lse.data(), 1, t, nh, nkv, d, options);
  for (int j = 0; j < 32; ++j) {  // dk and dv of keys [0, 32)
    const size_t at = size_t(j) * w + c;
    EXPECT_TRUE(std::equal(dqkv.begin() + at, dqkv.begin() + at + 2 * nkv * d, dqkv_p.begin() + at))
        << "key " << j;
  }
}

// The direct kernel's row blocks (32 rows at this length) take only the keys of their windows:
// with window 10, the block of rows [32, 64) starts at key 23, so values of +inf before key 16
// leave its rows' results the clean bits.
TEST(AttentionOptions, DirectSkipsKeysOutsideEveryWindowOfABlock) {
  constexpr int t = 64, nh = 2, nkv = 1, d = 8, w = (nh + 2 * nkv) * d, c = nh * d;
  const AttentionOptions options{0.0f, 10, 0.0f};
  const std::vector<float> qkv = RandomFloats(size_t(t) * w, 23);
  std::vector<float> poisoned = qkv;
  for (int j = 0; j < 16; ++j) {
    for (int i = 0; i < nkv * d; ++i) {
      poisoned[size_t(j) * w + c + nkv * d + i] = std::numeric_limits<float>::infinity();
    }
  }
  std::vector<float> out(t * c), att(size_t(nh) * t * t), out_p(t * c), att_p(att.size());
  AttentionForwardGqa(out.data(), att.data(), qkv.data(), 1, t, nh, nkv, d, options);
  AttentionForwardGqa(out_p.data(), att_p.data(), poisoned.data(), 1, t, nh, nkv, d, options);
  EXPECT_TRUE(std::equal(out.begin() + 32 * c, out.end(), out_p.begin() + 32 * c));
  EXPECT_TRUE(SameBits(att, att_p));  // the values do not reach the probabilities
}

class CpuBackendAttentionOptions : public ::testing::TestWithParam<HostStream::Mode> {
 protected:
  CpuBackendAttentionOptions()
      : device_(Place::kDevice, &tracker_), backend_(&device_, GetParam()) {}
  const Stream& s() const { return backend_.compute_stream(); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
};

// The backend hands the options to the kernels, also where its stream runs the op later (the
// options are a temporary, gone by then).
TEST_P(CpuBackendAttentionOptions, RunsTheKernelsWithTheOptions) {
  const Inputs in;
  const DType f = DType::kFloat32;
  std::vector<float> out(kOut), att(kAtt), dqkv = in.dqkv0, tout(kOut), lse(kLse), tdqkv = in.dqkv0;
  ASSERT_TRUE(backend_
                  .GqaAttentionForward(out.data(), att.data(), in.qkv.data(), nullptr, B, T, NH,
                                       NKV, hd, AttentionOptions{0.3f, 3, 0.7f}, f, s())
                  .ok());
  ASSERT_TRUE(backend_
                  .GqaAttentionBackward(dqkv.data(), in.dout.data(), in.qkv.data(), att.data(),
                                        nullptr, B, T, NH, NKV, hd, AttentionOptions{0.3f, 3, 0.7f},
                                        f, s())
                  .ok());
  ASSERT_TRUE(backend_
                  .GqaAttentionForwardTiled(tout.data(), lse.data(), in.qkv.data(), B, T, NH, NKV,
                                            hd, AttentionOptions{0.3f, 3, 0.7f}, f, s())
                  .ok());
  ASSERT_TRUE(backend_
                  .GqaAttentionBackwardTiled(tdqkv.data(), in.dout.data(), in.qkv.data(),
                                             tout.data(), lse.data(), nullptr, B, T, NH, NKV, hd,
                                             AttentionOptions{0.3f, 3, 0.7f}, f, s())
                  .ok());
  ASSERT_TRUE(s().Synchronize().ok());

  const AttentionOptions options{0.3f, 3, 0.7f};
  std::vector<float> want_out(kOut), want_att(kAtt), want_dqkv = in.dqkv0, want_tout(kOut),
                                                     want_lse(kLse), want_tdqkv = in.dqkv0;
  AttentionForwardGqa(want_out.data(), want_att.data(), in.qkv.data(), B, T, NH, NKV, hd, options);
  AttentionBackwardGqa(want_dqkv.data(), in.dout.data(), in.qkv.data(), want_att.data(), B, T, NH,
                       NKV, hd, options);
  AttentionForwardTiledGqa(want_tout.data(), want_lse.data(), in.qkv.data(), B, T, NH, NKV, hd,
                           options);
  AttentionBackwardTiledGqa(want_tdqkv.data(), in.dout.data(), in.qkv.data(), want_tout.data(),
                            want_lse.data(), B, T, NH, NKV, hd, options);
  EXPECT_TRUE(SameBits(out, want_out));
  EXPECT_TRUE(SameBits(att, want_att));
  EXPECT_TRUE(SameBits(dqkv, want_dqkv));
  EXPECT_TRUE(SameBits(tout, want_tout));
  EXPECT_TRUE(SameBits(lse, want_lse));
  EXPECT_TRUE(SameBits(tdqkv, want_tdqkv));
}

// A negative window, or a scale or softcap that is negative, NaN or infinite: kInvalidArgument
// naming the op and the option, from each of the four ops, before anything runs.
TEST_P(CpuBackendAttentionOptions, RefusesBadOptionsNamingTheOpAndTheOption) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const struct {
    AttentionOptions options;
    const char* name;
  } bad[] = {{{0.0f, -1, 0.0f}, "window"},  {{-0.5f, 0, 0.0f}, "scale"},
             {{nan, 0, 0.0f}, "scale"},     {{inf, 0, 0.0f}, "scale"},
             {{0.0f, 0, -1.0f}, "softcap"}, {{0.0f, 0, nan}, "softcap"},
             {{0.0f, 0, inf}, "softcap"}};
  const DType f = DType::kFloat32;
  std::vector<float> a(4096), b(4096);
  const auto expect = [](const Status& status, const std::string& op, const std::string& name) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(op + ": attention option " + name), std::string::npos)
        << status.ToString();
  };
  for (const auto& [options, name] : bad) {
    expect(backend_.GqaAttentionForward(a.data(), a.data(), b.data(), nullptr, 1, 4, 2, 1, 4,
                                        options, f, s()),
           "GqaAttentionForward", name);
    expect(backend_.GqaAttentionBackward(a.data(), a.data(), b.data(), a.data(), nullptr, 1, 4, 2,
                                         1, 4, options, f, s()),
           "GqaAttentionBackward", name);
    expect(backend_.GqaAttentionForwardTiled(a.data(), a.data(), b.data(), 1, 4, 2, 1, 4, options,
                                             f, s()),
           "GqaAttentionForwardTiled", name);
    expect(backend_.GqaAttentionBackwardTiled(a.data(), a.data(), b.data(), a.data(), a.data(),
                                              nullptr, 1, 4, 2, 1, 4, options, f, s()),
           "GqaAttentionBackwardTiled", name);
  }
  EXPECT_TRUE(s().Synchronize().ok());
}

INSTANTIATE_TEST_SUITE_P(Streams, CpuBackendAttentionOptions,
                         ::testing::Values(HostStream::Mode::kInline, HostStream::Mode::kThreaded),
                         [](const ::testing::TestParamInfo<HostStream::Mode>& info) {
                           return std::string(info.param == HostStream::Mode::kInline ? "Inline"
                                                                                      : "Threaded");
                         });

}  // namespace
}  // namespace hoist::kernels::cpu

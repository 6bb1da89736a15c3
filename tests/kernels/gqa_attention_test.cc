// Grouped-query attention (kernels/cpu/ops.h's *Gqa ops): with NKV == NH it is the multi-head
// attention GPT-2 uses, bit for bit; with NKV < NH it equals multi-head attention over the key and
// value heads repeated NH/NKV times (Hugging Face's repeat_kv), the gradients of a shared head
// being the sum over its group. Direct and tiled forms, at lengths that span several row blocks
// and tiles.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels::cpu {
namespace {

using testing::ExpectAllClose;
using testing::RandomFloats;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(GqaAttention, EqualHeadCountsAreMultiHeadAttentionBitForBit) {
  constexpr int B = 2, T = 70, NH = 4, hd = 8, C = NH * hd;
  const std::vector<float> qkv = RandomFloats(size_t(B) * T * 3 * C, 1),
                           dout = RandomFloats(size_t(B) * T * C, 2),
                           d0 = RandomFloats(qkv.size(), 3);
  std::vector<float> out(dout.size()), att(size_t(B) * NH * T * T), out_g(out.size()),
      att_g(att.size());
  AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  AttentionForwardGqa(out_g.data(), att_g.data(), qkv.data(), B, T, NH, NH, hd);
  EXPECT_TRUE(SameBits(out, out_g));
  EXPECT_TRUE(SameBits(att, att_g));
  std::vector<float> d = d0, d_g = d0;
  AttentionBackward(d.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  AttentionBackwardGqa(d_g.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NH, hd);
  EXPECT_TRUE(SameBits(d, d_g));

  std::vector<float> lse(size_t(B) * NH * T), lse_g(lse.size());
  AttentionForwardTiled(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  AttentionForwardTiledGqa(out_g.data(), lse_g.data(), qkv.data(), B, T, NH, NH, hd);
  EXPECT_TRUE(SameBits(out, out_g));
  EXPECT_TRUE(SameBits(lse, lse_g));
  d = d0, d_g = d0;
  AttentionBackwardTiled(d.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  AttentionBackwardTiledGqa(d_g.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH,
                            NH, hd);
  EXPECT_TRUE(SameBits(d, d_g));
}

// qkv (B,T,(NH+2*NKV)*hd) -> (B,T,3*NH*hd) with each key/value head repeated for its group.
std::vector<float> RepeatKv(const std::vector<float>& qkv, int BT, int NH, int NKV, int hd) {
  const int group = NH / NKV, w = (NH + 2 * NKV) * hd, C = NH * hd;
  std::vector<float> out(size_t(BT) * 3 * C);
  for (int r = 0; r < BT; ++r) {
    const float* src = qkv.data() + size_t(r) * w;
    float* dst = out.data() + size_t(r) * 3 * C;
    std::memcpy(dst, src, sizeof(float) * C);
    for (int h = 0; h < NH; ++h) {
      const int kvh = h / group;
      std::memcpy(dst + C + h * hd, src + C + kvh * hd, sizeof(float) * hd);
      std::memcpy(dst + 2 * C + h * hd, src + C + NKV * hd + kvh * hd, sizeof(float) * hd);
    }
  }
  return out;
}

// The multi-head gradient (B,T,3*NH*hd) folded back onto the grouped layout: q as is, each
// shared key/value head the sum over its group, in head order.
std::vector<double> FoldKv(const std::vector<float>& d, const std::vector<float>& d0, int BT,
                           int NH, int NKV, int hd) {
  const int group = NH / NKV, w = (NH + 2 * NKV) * hd, C = NH * hd;
  std::vector<double> out(d0.begin(), d0.end());
  for (int r = 0; r < BT; ++r) {
    const float* src = d.data() + size_t(r) * 3 * C;
    double* dst = out.data() + size_t(r) * w;
    for (int c = 0; c < C; ++c) dst[c] += src[c];
    for (int h = 0; h < NH; ++h) {
      const int kvh = h / group;
      for (int i = 0; i < hd; ++i) {
        dst[C + kvh * hd + i] += src[C + h * hd + i];
        dst[C + NKV * hd + kvh * hd + i] += src[2 * C + h * hd + i];
      }
    }
  }
  return out;
}

struct GqaShape {
  int B, T, NH, NKV, hd;
};

class GqaVersusRepeatedKv : public ::testing::TestWithParam<GqaShape> {};

TEST_P(GqaVersusRepeatedKv, DirectAndTiledMatchMultiHeadOverRepeatedHeads) {
  const auto [B, T, NH, NKV, hd] = GetParam();
  const int C = NH * hd, BT = B * T, W = (NH + 2 * NKV) * hd;
  const std::vector<float> qkv = RandomFloats(size_t(BT) * W, 4),
                           dout = RandomFloats(size_t(BT) * C, 5), d0 = RandomFloats(qkv.size(), 6);
  const std::vector<float> mha_qkv = RepeatKv(qkv, BT, NH, NKV, hd);
  std::vector<float> zero(mha_qkv.size(), 0.0f);

  // Direct.
  std::vector<float> out(size_t(BT) * C), att(size_t(B) * NH * T * T), ref(out.size()),
      ref_att(att.size());
  AttentionForwardGqa(out.data(), att.data(), qkv.data(), B, T, NH, NKV, hd);
  AttentionForward(ref.data(), ref_att.data(), mha_qkv.data(), B, T, C, NH);
  ExpectAllClose(out, ref, 1e-6, 1e-6, "direct out");
  ExpectAllClose(att, ref_att, 1e-7, 1e-6, "att");
  std::vector<float> d = d0, ref_d = zero;
  AttentionBackwardGqa(d.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NKV, hd);
  AttentionBackward(ref_d.data(), dout.data(), mha_qkv.data(), ref_att.data(), B, T, C, NH);
  ExpectAllClose(d, FoldKv(ref_d, d0, BT, NH, NKV, hd), 1e-5, 1e-5, "direct dqkv");

  // Tiled, default tiles and small ones (several tiles per head at this T).
  for (const bool small : {false, true}) {
    TiledAttentionOptions options = DefaultTiledAttentionOptions(T);
    if (small) options.q_rows = 16, options.k_cols = 8;
    std::vector<float> tout(out.size()), lse(size_t(B) * NH * T), tref(out.size()),
        ref_lse(lse.size());
    AttentionForwardTiledGqaWith(options, tout.data(), lse.data(), qkv.data(), B, T, NH, NKV, hd);
    AttentionForwardTiledWith(options, tref.data(), ref_lse.data(), mha_qkv.data(), B, T, C, NH);
    ExpectAllClose(tout, tref, 1e-6, 1e-6, "tiled out");
    ExpectAllClose(lse, ref_lse, 1e-6, 1e-6, "lse");
    ExpectAllClose(tout, ref, 1e-5, 1e-5, "tiled out vs direct");
    std::vector<float> td = d0, tref_d = zero;
    AttentionBackwardTiledGqaWith(options, td.data(), dout.data(), qkv.data(), tout.data(),
                                  lse.data(), B, T, NH, NKV, hd);
    AttentionBackwardTiledWith(options, tref_d.data(), dout.data(), mha_qkv.data(), tref.data(),
                               ref_lse.data(), B, T, C, NH);
    ExpectAllClose(td, FoldKv(tref_d, d0, BT, NH, NKV, hd), 1e-5, 1e-5, "tiled dqkv");
  }
}

INSTANTIATE_TEST_SUITE_P(GqaShapes, GqaVersusRepeatedKv,
                         ::testing::Values(GqaShape{2, 70, 6, 2, 8},   // groups of 3
                                           GqaShape{1, 33, 4, 1, 16},  // one shared head (MQA)
                                           GqaShape{2, 9, 8, 4, 4}));  // groups of 2

}  // namespace
}  // namespace hoist::kernels::cpu

// The CPU backend's model ops against the kernels of kernels/cpu/ops.h called directly: in fp32
// the same bits; in bf16 and fp16 what the contract says (inputs widened exactly, the fp32
// kernel, outputs rounded once, gradients added in fp32 before that rounding), checked against
// values computed here element by element. Inline and threaded streams alike; bad arguments name
// the op and the array.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace hoist::kernels {
namespace {

using Mode = HostStream::Mode;

constexpr int B = 2, T = 8, C = 16, NH = 4, OC = 24, V = 37, Vp = 40, N = B * T;

using cpu::testing::RandomFloats;

std::vector<int32_t> RandomInts(size_t n, int32_t bound, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, bound - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

// The bits of x rounded to a 16-bit type, and back.
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

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

class CpuBackendModel : public ::testing::TestWithParam<Mode> {
 protected:
  CpuBackendModel() : device_(Place::kDevice, &tracker_), backend_(&device_, GetParam()) {}
  const Stream& s() const { return backend_.compute_stream(); }
  void Sync() { ASSERT_TRUE(s().Synchronize().ok()); }

  MemoryTracker tracker_;
  CpuDevice device_;
  CpuBackend backend_;
};

#define EXPECT_OK(expr)                              \
  do {                                               \
    const ::hoist::Status status_ = (expr);          \
    EXPECT_TRUE(status_.ok()) << status_.ToString(); \
  } while (0)

TEST_P(CpuBackendModel, Fp32OpsAreTheCpuKernelsBitForBit) {
  const DType f = DType::kFloat32;
  const std::vector<int32_t> tokens = RandomInts(N, V, 1);
  const std::vector<float> wte = RandomFloats(size_t{Vp} * C, 2),
                           wpe = RandomFloats(size_t{T} * C, 3);
  const std::vector<float> x = RandomFloats(size_t{N} * C, 4), w = RandomFloats(C, 5, 0.5f, 1.5f),
                           bias = RandomFloats(C, 6), dout = RandomFloats(size_t{N} * C, 7);
  const std::vector<float> mw = RandomFloats(size_t{OC} * C, 8), mb = RandomFloats(OC, 9),
                           mdout = RandomFloats(size_t{N} * OC, 10);
  const std::vector<float> qkv = RandomFloats(size_t{N} * 3 * C, 11),
                           logits = RandomFloats(size_t{N} * Vp, 12);
  const std::vector<int32_t> targets = RandomInts(N, V, 13);

  // Encoder.
  std::vector<float> enc(size_t{N} * C), enc_ref(enc.size());
  EXPECT_OK(
      backend_.EncoderForward(enc.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, f, s()));
  std::vector<float> dwte = RandomFloats(wte.size(), 14), dwpe = RandomFloats(wpe.size(), 15);
  std::vector<float> dwte_ref = dwte, dwpe_ref = dwpe;
  EXPECT_OK(backend_.EncoderBackward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C,
                                     f, s()));
  // Layernorm.
  std::vector<float> ln(x.size()), mean(N), rstd(N), ln_ref(x.size()), mean_ref(N), rstd_ref(N);
  EXPECT_OK(backend_.LayerNormForward(ln.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                      bias.data(), N, C, f, s()));
  std::vector<float> dx = RandomFloats(x.size(), 16), dw = RandomFloats(C, 17),
                     db = RandomFloats(C, 18);
  std::vector<float> dx_ref = dx, dw_ref = dw, db_ref = db;
  EXPECT_OK(backend_.LayerNormBackward(dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                                       w.data(), mean.data(), rstd.data(), N, C, f, s()));
  // Matmul with its GELU.
  std::vector<float> mm(size_t{N} * OC), gelu(mm.size()), mm_ref(mm.size()), gelu_ref(mm.size());
  EXPECT_OK(backend_.MatmulForward(mm.data(), x.data(), mw.data(), mb.data(), N, C, OC, f,
                                   gelu.data(), s()));
  std::vector<float> mdx = RandomFloats(x.size(), 19), mdw = RandomFloats(mw.size(), 20),
                     mdb = RandomFloats(OC, 21);
  std::vector<float> mdx_ref = mdx, mdw_ref = mdw, mdb_ref = mdb;
  EXPECT_OK(backend_.MatmulBackward(mdx.data(), mdw.data(), mdb.data(), mdout.data(), x.data(),
                                    mw.data(), N, C, OC, f, s()));
  // Attention, both forms.
  std::vector<float> att_out(size_t{N} * C), att(size_t{B} * NH * T * T), lse(size_t{B} * NH * T),
      tiled_out(att_out.size());
  std::vector<float> att_out_ref(att_out.size()), att_ref(att.size()), lse_ref(lse.size()),
      tiled_out_ref(att_out.size());
  EXPECT_OK(backend_.AttentionForward(att_out.data(), att.data(), qkv.data(), nullptr, B, T, C, NH,
                                      f, s()));
  EXPECT_OK(backend_.AttentionForwardTiled(tiled_out.data(), lse.data(), qkv.data(), B, T, C, NH, f,
                                           s()));
  std::vector<float> dqkv = RandomFloats(qkv.size(), 22), tdqkv = RandomFloats(qkv.size(), 23);
  std::vector<float> dqkv_ref = dqkv, tdqkv_ref = tdqkv;
  EXPECT_OK(backend_.AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), nullptr, B,
                                       T, C, NH, f, s()));
  EXPECT_OK(backend_.AttentionBackwardTiled(tdqkv.data(), dout.data(), qkv.data(), tiled_out.data(),
                                            lse.data(), nullptr, B, T, C, NH, f, s()));
  // Cross-entropy.
  std::vector<float> losses(N), dlogits(logits.size()), losses_ref(N), dlogits_ref(logits.size());
  EXPECT_OK(backend_.SoftmaxCrossEntropy(losses.data(), dlogits.data(), logits.data(),
                                         targets.data(), 0.5f, N, V, Vp, 0.0f, f, s()));
  Sync();

  cpu::EncoderForward(enc_ref.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  cpu::EncoderBackward(dwte_ref.data(), dwpe_ref.data(), dout.data(), tokens.data(), B, T, C);
  cpu::LayerNormForward(ln_ref.data(), mean_ref.data(), rstd_ref.data(), x.data(), w.data(),
                        bias.data(), N, C);
  cpu::LayerNormBackward(dx_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), x.data(),
                         w.data(), mean_ref.data(), rstd_ref.data(), N, C);
  cpu::MatmulForward(mm_ref.data(), x.data(), mw.data(), mb.data(), N, C, OC);
  cpu::GeluForward(gelu_ref.data(), mm_ref.data(), mm_ref.size());
  cpu::MatmulBackward(mdx_ref.data(), mdw_ref.data(), mdb_ref.data(), mdout.data(), x.data(),
                      mw.data(), N, C, OC);
  cpu::AttentionForward(att_out_ref.data(), att_ref.data(), qkv.data(), B, T, C, NH);
  cpu::AttentionForwardTiled(tiled_out_ref.data(), lse_ref.data(), qkv.data(), B, T, C, NH);
  cpu::AttentionBackward(dqkv_ref.data(), dout.data(), qkv.data(), att_ref.data(), B, T, C, NH);
  cpu::AttentionBackwardTiled(tdqkv_ref.data(), dout.data(), qkv.data(), tiled_out_ref.data(),
                              lse_ref.data(), B, T, C, NH);
  cpu::SoftmaxCrossEntropy(losses_ref.data(), dlogits_ref.data(), logits.data(), targets.data(),
                           0.5f, N, V, Vp);

  EXPECT_TRUE(SameBits(enc, enc_ref));
  EXPECT_TRUE(SameBits(dwte, dwte_ref));
  EXPECT_TRUE(SameBits(dwpe, dwpe_ref));
  EXPECT_TRUE(SameBits(ln, ln_ref));
  EXPECT_TRUE(SameBits(mean, mean_ref));
  EXPECT_TRUE(SameBits(rstd, rstd_ref));
  EXPECT_TRUE(SameBits(dx, dx_ref));
  EXPECT_TRUE(SameBits(dw, dw_ref));
  EXPECT_TRUE(SameBits(db, db_ref));
  EXPECT_TRUE(SameBits(mm, mm_ref));
  EXPECT_TRUE(SameBits(gelu, gelu_ref));
  EXPECT_TRUE(SameBits(mdx, mdx_ref));
  EXPECT_TRUE(SameBits(mdw, mdw_ref));
  EXPECT_TRUE(SameBits(mdb, mdb_ref));
  EXPECT_TRUE(SameBits(att_out, att_out_ref));
  EXPECT_TRUE(SameBits(att, att_ref));
  EXPECT_TRUE(SameBits(tiled_out, tiled_out_ref));
  EXPECT_TRUE(SameBits(lse, lse_ref));
  EXPECT_TRUE(SameBits(dqkv, dqkv_ref));
  EXPECT_TRUE(SameBits(tdqkv, tdqkv_ref));
  EXPECT_TRUE(SameBits(losses, losses_ref));
  EXPECT_TRUE(SameBits(dlogits, dlogits_ref));
}

// 16-bit: a gradient is the old value widened, plus the fp32 kernel's contribution, rounded once;
// an output is the fp32 kernel's result on widened inputs, rounded once; a product's GELU comes
// from the fp32 product before its rounding.
TEST_P(CpuBackendModel, SixteenBitOpsWidenComputeInFp32AndRoundOnce) {
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(h));
    const std::vector<uint16_t> x = Narrow(RandomFloats(size_t{N} * C, 30), h);
    const std::vector<uint16_t> w = Narrow(RandomFloats(C, 31, 0.5f, 1.5f), h);
    const std::vector<uint16_t> dout = Narrow(RandomFloats(size_t{N} * C, 32), h);
    const std::vector<uint16_t> dx0 = Narrow(RandomFloats(size_t{N} * C, 33), h);
    const std::vector<float> mean = RandomFloats(N, 34), rstd = RandomFloats(N, 35, 0.5f, 2.0f);

    std::vector<uint16_t> dx = dx0;
    std::vector<float> dw(C, 0.25f), db(C, -0.5f);
    EXPECT_OK(backend_.LayerNormBackward(dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                                         w.data(), mean.data(), rstd.data(), N, C, h, s()));
    std::vector<uint16_t> gelu(x.size());
    EXPECT_OK(backend_.GeluForward(gelu.data(), x.data(), static_cast<int64_t>(x.size()), h, s()));
    const std::vector<uint16_t> mw = Narrow(RandomFloats(size_t{OC} * C, 36), h);
    std::vector<uint16_t> mm(size_t{N} * OC), mm_gelu(mm.size());
    EXPECT_OK(backend_.MatmulForward(mm.data(), x.data(), mw.data(), nullptr, N, C, OC, h,
                                     mm_gelu.data(), s()));
    Sync();

    std::vector<float> dx_ref = Widen(dx0, h), dw_ref(C, 0.25f), db_ref(C, -0.5f);
    cpu::LayerNormBackward(dx_ref.data(), dw_ref.data(), db_ref.data(), Widen(dout, h).data(),
                           Widen(x, h).data(), Widen(w, h).data(), mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(SameBits(dx, Narrow(dx_ref, h))) << "dinp: added in fp32, then rounded once";
    EXPECT_TRUE(SameBits(dw, dw_ref));
    EXPECT_TRUE(SameBits(db, db_ref));

    std::vector<float> gelu_ref(x.size());
    cpu::GeluForward(gelu_ref.data(), Widen(x, h).data(), x.size());
    EXPECT_TRUE(SameBits(gelu, Narrow(gelu_ref, h)));

    std::vector<float> mm_ref(mm.size()), mm_gelu_ref(mm.size());
    cpu::MatmulForward(mm_ref.data(), Widen(x, h).data(), Widen(mw, h).data(), nullptr, N, C, OC);
    cpu::GeluForward(mm_gelu_ref.data(), mm_ref.data(), mm_ref.size());
    EXPECT_TRUE(SameBits(mm, Narrow(mm_ref, h)));
    EXPECT_TRUE(SameBits(mm_gelu, Narrow(mm_gelu_ref, h))) << "GELU of the unrounded product";
  }
}

// LayerNorm and the encoder over several blocks of rows and a tail (cpu_backend_args.h
// RowBlocks; the encoder's blocks restart in every sequence and read each token's row of the
// table as it goes): bit for bit the fp32 kernels on widened arrays, rounded once, the parameter
// gradients summed in the same row order.
TEST_P(CpuBackendModel, SixteenBitRowOpsOverManyBlocksAreTheWidenedKernels) {
  constexpr int bB = 2, bT = 1500, bC = 96, bV = 300, bN = bB * bT;
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(h));
    const std::vector<uint16_t> x = Narrow(RandomFloats(size_t{bN} * bC, 50), h),
                                w = Narrow(RandomFloats(bC, 51, 0.5f, 1.5f), h),
                                b = Narrow(RandomFloats(bC, 52), h),
                                dy = Narrow(RandomFloats(x.size(), 53), h),
                                dx0 = Narrow(RandomFloats(x.size(), 54), h),
                                wte = Narrow(RandomFloats(size_t{bV} * bC, 55), h),
                                wpe = Narrow(RandomFloats(size_t{bT} * bC, 56), h);
    const std::vector<int32_t> tokens = RandomInts(bN, bV, 57);
    std::vector<uint16_t> y(x.size()), dx = dx0, enc(x.size());
    std::vector<float> mean(bN), rstd(bN), dw(bC, 0.25f), db(bC, -0.5f);
    std::vector<float> dwte(size_t{bV} * bC, 0.5f), dwpe(size_t{bT} * bC, -0.25f);
    EXPECT_OK(backend_.LayerNormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                        b.data(), bN, bC, h, s()));
    EXPECT_OK(backend_.LayerNormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                                         w.data(), mean.data(), rstd.data(), bN, bC, h, s()));
    EXPECT_OK(backend_.EncoderForward(enc.data(), tokens.data(), wte.data(), wpe.data(), bB, bT, bC,
                                      h, s()));
    EXPECT_OK(backend_.EncoderBackward(dwte.data(), dwpe.data(), dy.data(), tokens.data(), bB, bT,
                                       bC, h, s()));
    Sync();

    std::vector<float> y_ref(x.size()), mean_ref(bN), rstd_ref(bN), dx_ref = Widen(dx0, h);
    std::vector<float> dw_ref(bC, 0.25f), db_ref(bC, -0.5f);
    cpu::LayerNormForward(y_ref.data(), mean_ref.data(), rstd_ref.data(), Widen(x, h).data(),
                          Widen(w, h).data(), Widen(b, h).data(), bN, bC);
    cpu::LayerNormBackward(dx_ref.data(), dw_ref.data(), db_ref.data(), Widen(dy, h).data(),
                           Widen(x, h).data(), Widen(w, h).data(), mean_ref.data(), rstd_ref.data(),
                           bN, bC);
    EXPECT_TRUE(SameBits(y, Narrow(y_ref, h)));
    EXPECT_TRUE(SameBits(mean, mean_ref));
    EXPECT_TRUE(SameBits(rstd, rstd_ref));
    EXPECT_TRUE(SameBits(dx, Narrow(dx_ref, h)));
    EXPECT_TRUE(SameBits(dw, dw_ref));
    EXPECT_TRUE(SameBits(db, db_ref));
    std::vector<float> enc_ref(x.size()), dwte_ref(dwte.size(), 0.5f),
        dwpe_ref(dwpe.size(), -0.25f);
    cpu::EncoderForward(enc_ref.data(), tokens.data(), Widen(wte, h).data(), Widen(wpe, h).data(),
                        bB, bT, bC);
    cpu::EncoderBackward(dwte_ref.data(), dwpe_ref.data(), Widen(dy, h).data(), tokens.data(), bB,
                         bT, bC);
    EXPECT_TRUE(SameBits(enc, Narrow(enc_ref, h)));
    EXPECT_TRUE(SameBits(dwte, dwte_ref)) << "repeated tokens summed in the batch's order";
    EXPECT_TRUE(SameBits(dwpe, dwpe_ref));
  }
}

// Where this process chose oneDNN's bf16 products, the backend's bf16 matmuls are those products:
// bf16 operands as they are, bias added in fp32 and the out rounded once; with a GELU, both from
// the fp32 product; dinp added to in fp32 and rounded once, dweight and dbias fp32 accumulators.
TEST_P(CpuBackendModel, Bf16MatmulsTakeTheChosenOneDnnPath) {
  if (cpu::ActiveGemmPath().path != cpu::GemmPath::kBf16Dnnl) {
    GTEST_SKIP() << "bf16 products take the fp32 path here: " << cpu::ActiveGemmPath().reason;
  }
  const DType h = DType::kBFloat16;
  const std::vector<uint16_t> x = Narrow(RandomFloats(size_t{N} * C, 80), h),
                              w = Narrow(RandomFloats(size_t{OC} * C, 81), h),
                              b = Narrow(RandomFloats(OC, 82), h),
                              dout = Narrow(RandomFloats(size_t{N} * OC, 83), h),
                              dx0 = Narrow(RandomFloats(size_t{N} * C, 84), h);
  std::vector<uint16_t> out(size_t{N} * OC), fc(out.size()), fc_gelu(out.size()), dx = dx0;
  std::vector<float> dw(size_t{OC} * C, 0.5f), db(OC, -0.25f);
  EXPECT_OK(
      backend_.MatmulForward(out.data(), x.data(), w.data(), b.data(), N, C, OC, h, nullptr, s()));
  EXPECT_OK(backend_.MatmulForward(fc.data(), x.data(), w.data(), b.data(), N, C, OC, h,
                                   fc_gelu.data(), s()));
  EXPECT_OK(backend_.MatmulBackward(dx.data(), dw.data(), db.data(), dout.data(), x.data(),
                                    w.data(), N, C, OC, h, s()));
  Sync();

  std::vector<uint16_t> out_ref(out.size()), dx_ref = dx0;
  cpu::MatmulForwardBf16(out_ref.data(), true, x.data(), w.data(), b.data(), N, C, OC);
  std::vector<float> wide(out.size()), gelu_ref(out.size()), dw_ref(dw.size(), 0.5f),
      db_ref(OC, -0.25f);
  cpu::MatmulForwardBf16(wide.data(), false, x.data(), w.data(), b.data(), N, C, OC);
  cpu::GeluForward(gelu_ref.data(), wide.data(), wide.size());
  cpu::MatmulBackwardBf16(dx_ref.data(), true, dw_ref.data(), db_ref.data(), dout.data(), x.data(),
                          w.data(), N, C, OC);
  EXPECT_TRUE(SameBits(out, out_ref));
  EXPECT_TRUE(SameBits(fc, Narrow(wide, h)));
  EXPECT_TRUE(SameBits(fc_gelu, Narrow(gelu_ref, h))) << "GELU of the unrounded product";
  EXPECT_TRUE(SameBits(dx, dx_ref));
  EXPECT_TRUE(SameBits(dw, dw_ref));
  EXPECT_TRUE(SameBits(db, db_ref));
}

// The 16-bit elementwise ops work a chunk at a time (cpu_backend_args.h): over several chunks and
// a tail, still bit for bit the fp32 kernel on widened arrays, rounded once; in place too.
TEST_P(CpuBackendModel, SixteenBitElementwiseOpsOverManyChunksRoundOnce) {
  const int64_t n = 3 * 4096 + 123;
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(h));
    const std::vector<uint16_t> a = Narrow(RandomFloats(n, 70, -3.0f, 3.0f), h),
                                b = Narrow(RandomFloats(n, 71), h),
                                d = Narrow(RandomFloats(n, 72), h);
    std::vector<uint16_t> gelu(n), dgelu = b, sum(n), in_place = a, da = a, db = b;
    EXPECT_OK(backend_.GeluForward(gelu.data(), a.data(), n, h, s()));
    EXPECT_OK(backend_.GeluBackward(dgelu.data(), a.data(), d.data(), n, h, s()));
    EXPECT_OK(backend_.ResidualForward(sum.data(), a.data(), b.data(), n, h, s()));
    EXPECT_OK(backend_.ResidualForward(in_place.data(), in_place.data(), b.data(), n, h, s()));
    EXPECT_OK(backend_.ResidualBackward(da.data(), db.data(), d.data(), n, h, s()));
    Sync();
    const size_t un = static_cast<size_t>(n);
    std::vector<float> gelu_ref(un), dgelu_ref = Widen(b, h), sum_ref(un), da_ref = Widen(a, h),
                                     db_ref = Widen(b, h);
    cpu::GeluForward(gelu_ref.data(), Widen(a, h).data(), un);
    cpu::GeluBackward(dgelu_ref.data(), Widen(a, h).data(), Widen(d, h).data(), un);
    cpu::ResidualForward(sum_ref.data(), Widen(a, h).data(), Widen(b, h).data(), un);
    cpu::ResidualBackward(da_ref.data(), db_ref.data(), Widen(d, h).data(), un);
    EXPECT_TRUE(SameBits(gelu, Narrow(gelu_ref, h)));
    EXPECT_TRUE(SameBits(dgelu, Narrow(dgelu_ref, h)));
    EXPECT_TRUE(SameBits(sum, Narrow(sum_ref, h)));
    EXPECT_TRUE(SameBits(in_place, Narrow(sum_ref, h)));
    EXPECT_TRUE(SameBits(da, Narrow(da_ref, h)));
    EXPECT_TRUE(SameBits(db, Narrow(db_ref, h)));
  }
}

// dlogits may be the logits' own array, in every type.
TEST_P(CpuBackendModel, CrossEntropyGradientMayOverwriteTheLogits) {
  const std::vector<float> logits = RandomFloats(size_t{N} * Vp, 40, -3.0f, 3.0f);
  const std::vector<int32_t> targets = RandomInts(N, V, 41);
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(h));
    const std::vector<uint16_t> bits = Narrow(logits, h);
    std::vector<uint16_t> in_place = bits, apart(bits.size());
    std::vector<float> losses(N), losses_apart(N);
    EXPECT_OK(backend_.SoftmaxCrossEntropy(losses.data(), in_place.data(), in_place.data(),
                                           targets.data(), 1.0f, N, V, Vp, 0.0f, h, s()));
    EXPECT_OK(backend_.SoftmaxCrossEntropy(losses_apart.data(), apart.data(), bits.data(),
                                           targets.data(), 1.0f, N, V, Vp, 0.0f, h, s()));
    Sync();
    EXPECT_TRUE(SameBits(in_place, apart));
    EXPECT_TRUE(SameBits(losses, losses_apart));
  }
}

TEST_P(CpuBackendModel, BadArgumentsNameTheOpAndTheArray) {
  std::vector<float> a(64), b(64);
  const auto expect = [](const Status& status, const std::string& op, const std::string& what) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find(op), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find(what), std::string::npos) << status.ToString();
  };
  expect(backend_.LayerNormForward(a.data(), a.data(), a.data(), nullptr, a.data(), a.data(), 4, 4,
                                   DType::kFloat32, s()),
         "LayerNormForward", "inp is null");
  expect(backend_.MatmulForward(a.data(), a.data(), b.data(), nullptr, 4, 0, 4, DType::kFloat32,
                                nullptr, s()),
         "MatmulForward", "C must be positive");
  expect(backend_.AttentionForward(a.data(), a.data(), b.data(), nullptr, 1, 2, 6, 4,
                                   DType::kFloat32, s()),
         "AttentionForward", "not a multiple of NH");
  expect(backend_.SoftmaxCrossEntropy(a.data(), nullptr, b.data(), nullptr, 1.0f, 2, 8, 4, 0.0f,
                                      DType::kFloat32, s()),
         "SoftmaxCrossEntropy", "smaller than V");
  expect(backend_.GeluForward(a.data(), b.data(), -1, DType::kFloat32, s()), "GeluForward",
         "n is negative");
  EXPECT_OK(backend_.ResidualForward(nullptr, nullptr, nullptr, 0, DType::kFloat32, s()));
}

INSTANTIATE_TEST_SUITE_P(Streams, CpuBackendModel,
                         ::testing::Values(Mode::kInline, Mode::kThreaded),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param == Mode::kInline ? "Inline" : "Threaded");
                         });

}  // namespace
}  // namespace hoist::kernels

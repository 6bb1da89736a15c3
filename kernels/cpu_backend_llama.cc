// CpuBackend's ops of the Llama family and the variants of Qwen3 and Gemma 2: kernels/cpu/ops.h on
// the stream, 16-bit arrays through fp32 copies as in cpu_backend_model.cc, bf16 attention on bf16
// operands where the matmuls are.
#include <cstdint>
#include <string>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "kernels/cpu_backend_args.h"

namespace hoist::kernels {

using cpu_backend_detail::CheckArgs;
using cpu_backend_detail::HostStreamOf;
using cpu_backend_detail::kOptional;
using cpu_backend_detail::Positive;
using cpu_backend_detail::RowBlocks;
using cpu_backend_detail::Use;
using cpu_backend_detail::UseBf16Attention;
using cpu_backend_detail::Wide;

namespace {

Status CheckHeads(const char* op, int B, int T, int NH, int NKV, int hd) {
  HOIST_RETURN_IF_ERROR(Positive(op, "B", B));
  HOIST_RETURN_IF_ERROR(Positive(op, "T", T));
  HOIST_RETURN_IF_ERROR(Positive(op, "NH", NH));
  HOIST_RETURN_IF_ERROR(Positive(op, "NKV", NKV));
  HOIST_RETURN_IF_ERROR(Positive(op, "hd", hd));
  if (NH % NKV != 0) {
    return InvalidArgumentError(std::string(op) + ": NH (" + std::to_string(NH) +
                                ") is not a multiple of NKV (" + std::to_string(NKV) + ")");
  }
  return Status::Ok();
}

// Elements of qkv (B,T,(NH+2*NKV)*hd) and of out (B,T,NH*hd).
int64_t QkvElements(int B, int T, int NH, int NKV, int hd) {
  return int64_t{B} * T * (NH + 2 * int64_t{NKV}) * hd;
}
int64_t OutElements(int B, int T, int NH, int hd) { return int64_t{B} * T * NH * hd; }

}  // namespace

int64_t CpuBackend::GqaAttentionWorkspaceBytes(int, int, int, int, int, DType) const { return 0; }
int64_t CpuBackend::GqaTiledAttentionWorkspaceBytes(int, int, int) const { return 0; }

Status CpuBackend::GqaAttentionForward(void* out, float* att, const void* qkv, void*, int B, int T,
                                       int NH, int NKV, int hd, const AttentionOptions& options,
                                       DType type, const Stream& stream) {
  constexpr const char* kOp = "GqaAttentionForward";
  HOIST_RETURN_IF_ERROR(CheckHeads(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  const int64_t n_qkv = QkvElements(B, T, NH, NKV, hd), n_out = OutElements(B, T, NH, hd);
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, n_out * e},
                                        {"att", att, int64_t{B} * NH * T * T * 4},
                                        {"qkv", qkv, n_qkv * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionForwardGqaBf16(static_cast<uint16_t*>(out), att,
                                   static_cast<const uint16_t*>(qkv), B, T, NH, NKV, hd, options);
      return Status::Ok();
    }
    Wide o(out, type, n_out, Use::kOut), q(qkv, type, n_qkv, Use::kIn);
    cpu::AttentionForwardGqa(o.get(), att, q.get(), B, T, NH, NKV, hd, options);
    o.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::GqaAttentionBackward(void* dqkv, const void* dout, const void* qkv,
                                        const float* att, void*, int B, int T, int NH, int NKV,
                                        int hd, const AttentionOptions& options, DType type,
                                        const Stream& stream) {
  constexpr const char* kOp = "GqaAttentionBackward";
  HOIST_RETURN_IF_ERROR(CheckHeads(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  const int64_t n_qkv = QkvElements(B, T, NH, NKV, hd), n_out = OutElements(B, T, NH, hd);
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dqkv", dqkv, n_qkv * e},
                                        {"dout", dout, n_out * e},
                                        {"qkv", qkv, n_qkv * e},
                                        {"att", att, int64_t{B} * NH * T * T * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionBackwardGqaBf16(
          static_cast<uint16_t*>(dqkv), static_cast<const uint16_t*>(dout),
          static_cast<const uint16_t*>(qkv), att, B, T, NH, NKV, hd, options);
      return Status::Ok();
    }
    Wide dq(dqkv, type, n_qkv, Use::kInOut), d(dout, type, n_out, Use::kIn),
        q(qkv, type, n_qkv, Use::kIn);
    cpu::AttentionBackwardGqa(dq.get(), d.get(), q.get(), att, B, T, NH, NKV, hd, options);
    dq.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::GqaAttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T,
                                            int NH, int NKV, int hd,
                                            const AttentionOptions& options, DType type,
                                            const Stream& stream) {
  constexpr const char* kOp = "GqaAttentionForwardTiled";
  HOIST_RETURN_IF_ERROR(CheckHeads(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  const int64_t n_qkv = QkvElements(B, T, NH, NKV, hd), n_out = OutElements(B, T, NH, hd);
  HOIST_RETURN_IF_ERROR(CheckArgs(
      kOp,
      {{"out", out, n_out * e}, {"lse", lse, int64_t{B} * NH * T * 4}, {"qkv", qkv, n_qkv * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionForwardTiledGqaBf16(static_cast<uint16_t*>(out), lse,
                                        static_cast<const uint16_t*>(qkv), B, T, NH, NKV, hd,
                                        options);
      return Status::Ok();
    }
    Wide o(out, type, n_out, Use::kOut), q(qkv, type, n_qkv, Use::kIn);
    cpu::AttentionForwardTiledGqa(o.get(), lse, q.get(), B, T, NH, NKV, hd, options);
    o.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::GqaAttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv,
                                             const void* out, const float* lse, void*, int B, int T,
                                             int NH, int NKV, int hd,
                                             const AttentionOptions& options, DType type,
                                             const Stream& stream) {
  constexpr const char* kOp = "GqaAttentionBackwardTiled";
  HOIST_RETURN_IF_ERROR(CheckHeads(kOp, B, T, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckAttentionOptions(kOp, options));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  const int64_t n_qkv = QkvElements(B, T, NH, NKV, hd), n_out = OutElements(B, T, NH, hd);
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dqkv", dqkv, n_qkv * e},
                                        {"dout", dout, n_out * e},
                                        {"qkv", qkv, n_qkv * e},
                                        {"out", out, n_out * e},
                                        {"lse", lse, int64_t{B} * NH * T * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionBackwardTiledGqaBf16(
          static_cast<uint16_t*>(dqkv), static_cast<const uint16_t*>(dout),
          static_cast<const uint16_t*>(qkv), static_cast<const uint16_t*>(out), lse, B, T, NH, NKV,
          hd, options);
      return Status::Ok();
    }
    Wide dq(dqkv, type, n_qkv, Use::kInOut), d(dout, type, n_out, Use::kIn),
        q(qkv, type, n_qkv, Use::kIn), o(out, type, n_out, Use::kIn);
    cpu::AttentionBackwardTiledGqa(dq.get(), d.get(), q.get(), o.get(), lse, B, T, NH, NKV, hd,
                                   options);
    dq.Finish();
    return Status::Ok();
  });
}

namespace {

Status CheckEps(const char* op, float eps) {
  if (eps >= 0.0f) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": eps must be >= 0, got " + std::to_string(eps));
}

// kInvalidArgument where [a, a + bytes) and [b, b + bytes) overlap.
Status Disjoint(const char* op, const char* a_name, const void* a, const char* b_name,
                const void* b, int64_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  const auto n = static_cast<uintptr_t>(bytes);
  if (x + n <= y || y + n <= x) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + a_name + " overlaps " + b_name +
                              " (it must be a separate array)");
}

Status CheckHeadNorm(const char* op, int N, int NH, int NKV, int hd) {
  HOIST_RETURN_IF_ERROR(Positive(op, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(op, "NH", NH));
  HOIST_RETURN_IF_ERROR(Positive(op, "NKV", NKV));
  return Positive(op, "hd", hd);
}

}  // namespace

Status CpuBackend::RmsNormForward(void* out, float* rstd, const void* inp, const void* weight,
                                  int N, int C, float eps, RmsNormStyle style, DType type,
                                  const Stream& stream) {
  constexpr const char* kOp = "RmsNormForward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(CheckEps(kOp, eps));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), NC = int64_t{N} * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, NC * e},
                                        {"rstd", rstd, int64_t{N} * 4},
                                        {"inp", inp, NC * e},
                                        {"weight", weight, C * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    Wide w(weight, type, C, Use::kIn);
    RowBlocks(type, N, {{out, Use::kOut, C}, {inp, Use::kIn, C}},
              [&](float* const* views, int64_t first, int64_t count) {
                cpu::RmsNormForward(views[0], rstd + first, views[1], w.get(),
                                    static_cast<int>(count), C, eps, type, style);
              });
    return Status::Ok();
  });
}

Status CpuBackend::RmsNormBackward(void* dinp, float* dweight, const void* dout, const void* inp,
                                   const void* weight, const float* rstd, int N, int C,
                                   RmsNormStyle style, DType type, const Stream& stream) {
  constexpr const char* kOp = "RmsNormBackward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), NC = int64_t{N} * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dinp", dinp, NC * e},
                                        {"dweight", dweight, C * 4, kOptional},
                                        {"dout", dout, NC * e},
                                        {"inp", inp, NC * e},
                                        {"weight", weight, C * e},
                                        {"rstd", rstd, int64_t{N} * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    Wide w(weight, type, C, Use::kIn);
    RowBlocks(type, N, {{dinp, Use::kInOut, C}, {dout, Use::kIn, C}, {inp, Use::kIn, C}},
              [&](float* const* views, int64_t first, int64_t count) {
                cpu::RmsNormBackward(views[0], dweight, views[1], views[2], w.get(), rstd + first,
                                     static_cast<int>(count), C, style);
              });
    return Status::Ok();
  });
}

// 16-bit rows a block at a time (RowBlocks), whole rows of q, k and v: the value heads are
// widened and rounded back unchanged, the exact round trip.
Status CpuBackend::HeadRmsNormForward(void* out, float* rstd, const void* inp, const void* q_weight,
                                      const void* k_weight, int N, int NH, int NKV, int hd,
                                      float eps, RmsNormStyle style, DType type,
                                      const Stream& stream) {
  constexpr const char* kOp = "HeadRmsNormForward";
  HOIST_RETURN_IF_ERROR(CheckHeadNorm(kOp, N, NH, NKV, hd));
  HOIST_RETURN_IF_ERROR(CheckEps(kOp, eps));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  const int64_t width = int64_t{NH + 2 * NKV} * hd, heads = int64_t{NH} + NKV;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, N * width * e},
                                        {"rstd", rstd, N * heads * 4},
                                        {"inp", inp, N * width * e},
                                        {"q_weight", q_weight, hd * e},
                                        {"k_weight", k_weight, hd * e}}));
  HOIST_RETURN_IF_ERROR(Disjoint(kOp, "out", out, "inp", inp, N * width * e));
  return HostStreamOf(stream).Enqueue([=] {
    Wide qw(q_weight, type, hd, Use::kIn), kw(k_weight, type, hd, Use::kIn);
    RowBlocks(type, N, {{out, Use::kOut, width}, {inp, Use::kIn, width}},
              [&](float* const* views, int64_t first, int64_t count) {
                cpu::HeadRmsNormForward(views[0], rstd + first * heads, views[1], qw.get(),
                                        kw.get(), static_cast<int>(count), NH, NKV, hd, eps, type,
                                        style);
              });
    return Status::Ok();
  });
}

Status CpuBackend::HeadRmsNormBackward(void* dinp, float* dq_weight, float* dk_weight,
                                       const void* dout, const void* inp, const void* q_weight,
                                       const void* k_weight, const float* rstd, int N, int NH,
                                       int NKV, int hd, RmsNormStyle style, DType type,
                                       const Stream& stream) {
  constexpr const char* kOp = "HeadRmsNormBackward";
  HOIST_RETURN_IF_ERROR(CheckHeadNorm(kOp, N, NH, NKV, hd));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  const int64_t width = int64_t{NH + 2 * NKV} * hd, heads = int64_t{NH} + NKV;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dinp", dinp, N * width * e},
                                        {"dq_weight", dq_weight, hd * 4, kOptional},
                                        {"dk_weight", dk_weight, hd * 4, kOptional},
                                        {"dout", dout, N * width * e},
                                        {"inp", inp, N * width * e},
                                        {"q_weight", q_weight, hd * e},
                                        {"k_weight", k_weight, hd * e},
                                        {"rstd", rstd, N * heads * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    Wide qw(q_weight, type, hd, Use::kIn), kw(k_weight, type, hd, Use::kIn);
    RowBlocks(type, N,
              {{dinp, Use::kInOut, width}, {dout, Use::kIn, width}, {inp, Use::kIn, width}},
              [&](float* const* views, int64_t first, int64_t count) {
                cpu::HeadRmsNormBackward(views[0], dq_weight, dk_weight, views[1], views[2],
                                         qw.get(), kw.get(), rstd + first * heads,
                                         static_cast<int>(count), NH, NKV, hd, style);
              });
    return Status::Ok();
  });
}

namespace {

// A rotary op over the 16-bit qkv a block of one sequence's positions at a time (RowBlocks):
// the table's rows from the block's first position on.
void RopeRows(void* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV, int hd,
              DType type,
              void (*rotate)(float*, const float*, const float*, int, int, int, int, int)) {
  if (type == DType::kFloat32) {  // in place, every sequence at once
    rotate(static_cast<float*>(qkv), cos, sin, B, T, NH, NKV, hd);
    return;
  }
  const int64_t row = int64_t{NH + 2 * NKV} * hd;  // a position's q, k and v
  const int64_t half = hd / 2;
  for (int b = 0; b < B; ++b) {
    RowBlocks(type, T, {{ElementPtr(qkv, type, int64_t{b} * T * row), Use::kInOut, row}},
              [&](float* const* views, int64_t first, int64_t count) {
                rotate(views[0], cos + first * half, sin + first * half, 1, static_cast<int>(count),
                       NH, NKV, hd);
              });
  }
}

Status CheckRope(const char* op, int B, int T, int NH, int NKV, int hd) {
  HOIST_RETURN_IF_ERROR(CheckHeads(op, B, T, NH, NKV, hd));
  if (hd % 2 != 0) {
    return InvalidArgumentError(std::string(op) + ": hd (" + std::to_string(hd) +
                                ") must be even (rotary pairs (i, i + hd/2))");
  }
  return Status::Ok();
}

}  // namespace

Status CpuBackend::RopeForward(void* qkv, const float* cos, const float* sin, int B, int T, int NH,
                               int NKV, int hd, DType type, const Stream& stream) {
  constexpr const char* kOp = "RopeForward";
  HOIST_RETURN_IF_ERROR(CheckRope(kOp, B, T, NH, NKV, hd));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), n = QkvElements(B, T, NH, NKV, hd);
  const int64_t table = int64_t{T} * (hd / 2) * 4;
  HOIST_RETURN_IF_ERROR(
      CheckArgs(kOp, {{"qkv", qkv, n * e}, {"cos", cos, table}, {"sin", sin, table}}));
  return HostStreamOf(stream).Enqueue([=] {
    RopeRows(qkv, cos, sin, B, T, NH, NKV, hd, type, cpu::RopeForward);
    return Status::Ok();
  });
}

Status CpuBackend::RopeBackward(void* dqkv, const float* cos, const float* sin, int B, int T,
                                int NH, int NKV, int hd, DType type, const Stream& stream) {
  constexpr const char* kOp = "RopeBackward";
  HOIST_RETURN_IF_ERROR(CheckRope(kOp, B, T, NH, NKV, hd));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), n = QkvElements(B, T, NH, NKV, hd);
  const int64_t table = int64_t{T} * (hd / 2) * 4;
  HOIST_RETURN_IF_ERROR(
      CheckArgs(kOp, {{"dqkv", dqkv, n * e}, {"cos", cos, table}, {"sin", sin, table}}));
  return HostStreamOf(stream).Enqueue([=] {
    RopeRows(dqkv, cos, sin, B, T, NH, NKV, hd, type, cpu::RopeBackward);
    return Status::Ok();
  });
}

namespace {

Status CheckGlu(const char* op, int N, int I) {
  HOIST_RETURN_IF_ERROR(Positive(op, "N", N));
  return Positive(op, "I", I);
}

}  // namespace

Status CpuBackend::GluForward(void* out, const void* inp, int N, int I, GluActivation activation,
                              DType type, const Stream& stream) {
  constexpr const char* kOp = "GluForward";
  HOIST_RETURN_IF_ERROR(CheckGlu(kOp, N, I));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), NI = int64_t{N} * I;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, NI * e}, {"inp", inp, 2 * NI * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    RowBlocks(type, N, {{out, Use::kOut, I}, {inp, Use::kIn, 2 * int64_t{I}}},
              [&](float* const* views, int64_t, int64_t count) {
                cpu::GluForward(views[0], views[1], static_cast<int>(count), I, activation);
              });
    return Status::Ok();
  });
}

Status CpuBackend::GluBackward(void* dinp, const void* inp, const void* dout, int N, int I,
                               GluActivation activation, DType type, const Stream& stream) {
  constexpr const char* kOp = "GluBackward";
  HOIST_RETURN_IF_ERROR(CheckGlu(kOp, N, I));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), NI = int64_t{N} * I;
  HOIST_RETURN_IF_ERROR(CheckArgs(
      kOp, {{"dinp", dinp, 2 * NI * e}, {"inp", inp, 2 * NI * e}, {"dout", dout, NI * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    RowBlocks(
        type, N,
        {{dinp, Use::kInOut, 2 * int64_t{I}}, {inp, Use::kIn, 2 * int64_t{I}}, {dout, Use::kIn, I}},
        [&](float* const* views, int64_t, int64_t count) {
          cpu::GluBackward(views[0], views[1], views[2], static_cast<int>(count), I, activation);
        });
    return Status::Ok();
  });
}

}  // namespace hoist::kernels

// CpuBackend's model ops: kernels/cpu/ops.h on the stream. fp32 arrays go to the CPU kernels as
// they are; a 16-bit array is widened into an fp32 copy first, and an output is rounded back
// into it once the kernel is done (an accumulated gradient: widened, added to in fp32, rounded
// once). The copies are transient host buffers of the op's own; the CPU rank's model computes
// in fp32, so the 16-bit forms serve as the oracle of the other backends. The exception: bf16
// products (the matmuls' and attention's), which on CPUs with AVX512_BF16 or AMX read the bf16
// operands as they are and accumulate in fp32 (kernels/cpu/gemm_bf16.h, attention_bf16.h).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "kernels/cpu_backend_args.h"

namespace hoist::kernels {

using cpu_backend_detail::CheckArgs;
using cpu_backend_detail::ChunkedElementwise;
using cpu_backend_detail::HostStreamOf;
using cpu_backend_detail::kOptional;
using cpu_backend_detail::NonNegative;
using cpu_backend_detail::Positive;
using cpu_backend_detail::RowBlocks;
using cpu_backend_detail::Use;
using cpu_backend_detail::UseBf16Attention;
using cpu_backend_detail::UseBf16Gemm;
using cpu_backend_detail::Wide;

Status CpuBackend::EncoderForward(void* out, const int32_t* tokens, const void* wte,
                                  const void* wpe, int B, int T, int C, DType type,
                                  const Stream& stream) {
  constexpr const char* kOp = "EncoderForward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "B", B));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "T", T));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), BT = int64_t{B} * T;
  // The token table's rows are read by token: its first row is what the size checks can name.
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, BT * C * e},
                                        {"tokens", tokens, BT * 4},
                                        {"wte", wte, C * e},
                                        {"wpe", wpe, int64_t{T} * C * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::EncoderForward(static_cast<float*>(out), tokens, static_cast<const float*>(wte),
                          static_cast<const float*>(wpe), B, T, C);
      return Status::Ok();
    }
    // A block of one sequence's positions at a time; each token's row of the table widened as
    // it is read: the fp32 kernel's sums, without a widened copy of the table.
    for (int b = 0; b < B; ++b) {
      const int32_t* seq = tokens + int64_t{b} * T;
      RowBlocks(
          type, T, {{ElementPtr(out, type, int64_t{b} * T * C), Use::kOut, C}, {wpe, Use::kIn, C}},
          [&](float* const* views, int64_t first, int64_t count) {
#pragma omp parallel
            {
              thread_local std::vector<float> te;  // a token's row, kept across blocks and steps
              te.resize(static_cast<size_t>(C));
#pragma omp for schedule(static)
              for (int64_t t = 0; t < count; ++t) {
                cpu::ToFloat(ElementPtr(wte, type, int64_t{seq[first + t]} * C), type, te.data(),
                             C);
                float* o = views[0] + t * C;
                const float* pe = views[1] + t * C;
                for (int c = 0; c < C; ++c) o[c] = te[static_cast<size_t>(c)] + pe[c];
              }
            }
          });
    }
    return Status::Ok();
  });
}

Status CpuBackend::EncoderBackward(float* dwte, float* dwpe, const void* dout,
                                   const int32_t* tokens, int B, int T, int C, DType type,
                                   const Stream& stream) {
  constexpr const char* kOp = "EncoderBackward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "B", B));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "T", T));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), BT = int64_t{B} * T;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dwte", dwte, int64_t{C} * 4},
                                        {"dwpe", dwpe, int64_t{T} * C * 4},
                                        {"dout", dout, BT * C * e},
                                        {"tokens", tokens, BT * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::EncoderBackward(dwte, dwpe, static_cast<const float*>(dout), tokens, B, T, C);
      return Status::Ok();
    }
    // Sequence by sequence, a block of positions at a time: the tokens in their order, so every
    // row of dwte and dwpe sums in the same order as over the whole batch.
    for (int b = 0; b < B; ++b) {
      RowBlocks(type, T, {{ElementPtr(dout, type, int64_t{b} * T * C), Use::kIn, C}},
                [&](float* const* views, int64_t first, int64_t count) {
                  cpu::EncoderBackward(dwte, dwpe + first * C, views[0],
                                       tokens + int64_t{b} * T + first, 1, static_cast<int>(count),
                                       C);
                });
    }
    return Status::Ok();
  });
}

Status CpuBackend::LayerNormForward(void* out, float* mean, float* rstd, const void* inp,
                                    const void* weight, const void* bias, int N, int C, DType type,
                                    const Stream& stream) {
  constexpr const char* kOp = "LayerNormForward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), NC = int64_t{N} * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, NC * e},
                                        {"mean", mean, int64_t{N} * 4},
                                        {"rstd", rstd, int64_t{N} * 4},
                                        {"inp", inp, NC * e},
                                        {"weight", weight, C * e},
                                        {"bias", bias, C * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    Wide w(weight, type, C, Use::kIn), b(bias, type, C, Use::kIn);
    RowBlocks(type, N, {{out, Use::kOut, C}, {inp, Use::kIn, C}},
              [&](float* const* views, int64_t first, int64_t count) {
                cpu::LayerNormForward(views[0], mean + first, rstd + first, views[1], w.get(),
                                      b.get(), static_cast<int>(count), C);
              });
    return Status::Ok();
  });
}

Status CpuBackend::LayerNormBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                                     const void* inp, const void* weight, const float* mean,
                                     const float* rstd, int N, int C, DType type,
                                     const Stream& stream) {
  constexpr const char* kOp = "LayerNormBackward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), NC = int64_t{N} * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dinp", dinp, NC * e},
                                        {"dweight", dweight, C * 4, kOptional},
                                        {"dbias", dbias, C * 4, kOptional},
                                        {"dout", dout, NC * e},
                                        {"inp", inp, NC * e},
                                        {"weight", weight, C * e},
                                        {"mean", mean, int64_t{N} * 4},
                                        {"rstd", rstd, int64_t{N} * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    Wide w(weight, type, C, Use::kIn);
    RowBlocks(type, N, {{dinp, Use::kInOut, C}, {dout, Use::kIn, C}, {inp, Use::kIn, C}},
              [&](float* const* views, int64_t first, int64_t count) {
                cpu::LayerNormBackward(views[0], dweight, dbias, views[1], views[2], w.get(),
                                       mean + first, rstd + first, static_cast<int>(count), C);
              });
    return Status::Ok();
  });
}

Status CpuBackend::MatmulForward(void* out, const void* inp, const void* weight, const void* bias,
                                 int N, int C, int OC, DType type, void* gelu_out,
                                 const Stream& stream) {
  constexpr const char* kOp = "MatmulForward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "OC", OC));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, int64_t{N} * OC * e},
                                        {"inp", inp, int64_t{N} * C * e},
                                        {"weight", weight, int64_t{OC} * C * e},
                                        {"bias", bias, OC * e, kOptional},
                                        {"gelu_out", gelu_out, int64_t{N} * OC * e, kOptional}}));
  const bool bf16_gemm = UseBf16Gemm(type);
  return HostStreamOf(stream).Enqueue([=] {
    const int64_t rows = N, out_n = rows * OC;
    const auto* bf16_bias = static_cast<const uint16_t*>(bias);
    if (bf16_gemm && gelu_out == nullptr) {
      // Straight into the bf16 out, bias added in fp32 before the one rounding.
      cpu::MatmulForwardBf16(out, true, static_cast<const uint16_t*>(inp),
                             static_cast<const uint16_t*>(weight), bf16_bias, N, C, OC);
      return Status::Ok();
    }
    Wide o(out, type, out_n, Use::kOut);
    if (bf16_gemm) {
      cpu::MatmulForwardBf16(o.get(), false, static_cast<const uint16_t*>(inp),
                             static_cast<const uint16_t*>(weight), bf16_bias, N, C, OC);
    } else {
      Wide x(inp, type, rows * C, Use::kIn), w(weight, type, int64_t{OC} * C, Use::kIn),
          b(bias, type, OC, Use::kIn);
      cpu::MatmulForward(o.get(), x.get(), w.get(), b.get(), N, C, OC);
    }
    if (gelu_out != nullptr) {
      // From the fp32 product, before it is rounded: as a GPU's epilogue computes it.
      Wide g(gelu_out, type, out_n, Use::kOut);
      cpu::GeluForward(g.get(), o.get(), static_cast<size_t>(out_n));
      g.Finish();
    }
    o.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::MatmulBackward(void* dinp, float* dweight, float* dbias, const void* dout,
                                  const void* inp, const void* weight, int N, int C, int OC,
                                  DType type, const Stream& stream) {
  constexpr const char* kOp = "MatmulBackward";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "C", C));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "OC", OC));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dinp", dinp, int64_t{N} * C * e, kOptional},
                                        {"dweight", dweight, int64_t{OC} * C * 4, kOptional},
                                        {"dbias", dbias, OC * 4, kOptional},
                                        {"dout", dout, int64_t{N} * OC * e},
                                        {"inp", inp, int64_t{N} * C * e},
                                        {"weight", weight, int64_t{OC} * C * e}}));
  const bool bf16_gemm = UseBf16Gemm(type);
  return HostStreamOf(stream).Enqueue([=] {
    if (bf16_gemm) {
      cpu::MatmulBackwardBf16(dinp, true, dweight, dbias, static_cast<const uint16_t*>(dout),
                              static_cast<const uint16_t*>(inp),
                              static_cast<const uint16_t*>(weight), N, C, OC);
      return Status::Ok();
    }
    const int64_t rows = N;
    Wide di(dinp, type, rows * C, Use::kInOut), d(dout, type, rows * OC, Use::kIn),
        x(inp, type, rows * C, Use::kIn), w(weight, type, int64_t{OC} * C, Use::kIn);
    cpu::MatmulBackward(di.get(), dweight, dbias, d.get(), x.get(), w.get(), N, C, OC);
    di.Finish();
    return Status::Ok();
  });
}

namespace {

Status CheckAttention(const char* op, int B, int T, int C, int NH) {
  HOIST_RETURN_IF_ERROR(Positive(op, "B", B));
  HOIST_RETURN_IF_ERROR(Positive(op, "T", T));
  HOIST_RETURN_IF_ERROR(Positive(op, "C", C));
  HOIST_RETURN_IF_ERROR(Positive(op, "NH", NH));
  if (C % NH != 0) {
    return InvalidArgumentError(std::string(op) + ": C (" + std::to_string(C) +
                                ") is not a multiple of NH (" + std::to_string(NH) + ")");
  }
  return Status::Ok();
}

}  // namespace

// The CPU kernels keep their scratch per thread: no workspace.
int64_t CpuBackend::AttentionWorkspaceBytes(int, int, int, int, DType) const { return 0; }
int64_t CpuBackend::TiledAttentionWorkspaceBytes(int, int, int) const { return 0; }

Status CpuBackend::AttentionForward(void* out, float* att, const void* qkv, void*, int B, int T,
                                    int C, int NH, DType type, const Stream& stream) {
  constexpr const char* kOp = "AttentionForward";
  HOIST_RETURN_IF_ERROR(CheckAttention(kOp, B, T, C, NH));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), BTC = int64_t{B} * T * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, BTC * e},
                                        {"att", att, int64_t{B} * NH * T * T * 4},
                                        {"qkv", qkv, 3 * BTC * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionForwardGqaBf16(static_cast<uint16_t*>(out), att,
                                   static_cast<const uint16_t*>(qkv), B, T, NH, NH, C / NH);
      return Status::Ok();
    }
    Wide o(out, type, BTC, Use::kOut), q(qkv, type, 3 * BTC, Use::kIn);
    cpu::AttentionForward(o.get(), att, q.get(), B, T, C, NH);
    o.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::AttentionBackward(void* dqkv, const void* dout, const void* qkv,
                                     const float* att, void*, int B, int T, int C, int NH,
                                     DType type, const Stream& stream) {
  constexpr const char* kOp = "AttentionBackward";
  HOIST_RETURN_IF_ERROR(CheckAttention(kOp, B, T, C, NH));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), BTC = int64_t{B} * T * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dqkv", dqkv, 3 * BTC * e},
                                        {"dout", dout, BTC * e},
                                        {"qkv", qkv, 3 * BTC * e},
                                        {"att", att, int64_t{B} * NH * T * T * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionBackwardGqaBf16(static_cast<uint16_t*>(dqkv),
                                    static_cast<const uint16_t*>(dout),
                                    static_cast<const uint16_t*>(qkv), att, B, T, NH, NH, C / NH);
      return Status::Ok();
    }
    Wide dq(dqkv, type, 3 * BTC, Use::kInOut), d(dout, type, BTC, Use::kIn),
        q(qkv, type, 3 * BTC, Use::kIn);
    cpu::AttentionBackward(dq.get(), d.get(), q.get(), att, B, T, C, NH);
    dq.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::AttentionForwardTiled(void* out, float* lse, const void* qkv, int B, int T,
                                         int C, int NH, DType type, const Stream& stream) {
  constexpr const char* kOp = "AttentionForwardTiled";
  HOIST_RETURN_IF_ERROR(CheckAttention(kOp, B, T, C, NH));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), BTC = int64_t{B} * T * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(
      kOp,
      {{"out", out, BTC * e}, {"lse", lse, int64_t{B} * NH * T * 4}, {"qkv", qkv, 3 * BTC * e}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionForwardTiledGqaBf16(static_cast<uint16_t*>(out), lse,
                                        static_cast<const uint16_t*>(qkv), B, T, NH, NH, C / NH);
      return Status::Ok();
    }
    Wide o(out, type, BTC, Use::kOut), q(qkv, type, 3 * BTC, Use::kIn);
    cpu::AttentionForwardTiled(o.get(), lse, q.get(), B, T, C, NH);
    o.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::AttentionBackwardTiled(void* dqkv, const void* dout, const void* qkv,
                                          const void* out, const float* lse, void*, int B, int T,
                                          int C, int NH, DType type, const Stream& stream) {
  constexpr const char* kOp = "AttentionBackwardTiled";
  HOIST_RETURN_IF_ERROR(CheckAttention(kOp, B, T, C, NH));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), BTC = int64_t{B} * T * C;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dqkv", dqkv, 3 * BTC * e},
                                        {"dout", dout, BTC * e},
                                        {"qkv", qkv, 3 * BTC * e},
                                        {"out", out, BTC * e},
                                        {"lse", lse, int64_t{B} * NH * T * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (UseBf16Attention(type)) {
      cpu::AttentionBackwardTiledGqaBf16(
          static_cast<uint16_t*>(dqkv), static_cast<const uint16_t*>(dout),
          static_cast<const uint16_t*>(qkv), static_cast<const uint16_t*>(out), lse, B, T, NH, NH,
          C / NH);
      return Status::Ok();
    }
    Wide dq(dqkv, type, 3 * BTC, Use::kInOut), d(dout, type, BTC, Use::kIn),
        q(qkv, type, 3 * BTC, Use::kIn), o(out, type, BTC, Use::kIn);
    cpu::AttentionBackwardTiled(dq.get(), d.get(), q.get(), o.get(), lse, B, T, C, NH);
    dq.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::GeluForward(void* out, const void* inp, int64_t n, DType type,
                               const Stream& stream) {
  constexpr const char* kOp = "GeluForward";
  HOIST_RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  if (n == 0) return Status::Ok();
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, bytes}, {"inp", inp, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::GeluForward(static_cast<float*>(out), static_cast<const float*>(inp),
                       static_cast<size_t>(n));
    } else {
      ChunkedElementwise(
          type, n, {{inp, Use::kIn}, {out, Use::kOut}},
          [](float* const* v, size_t count) { cpu::GeluForward(v[1], v[0], count); });
    }
    return Status::Ok();
  });
}

Status CpuBackend::GeluBackward(void* dinp, const void* inp, const void* dout, int64_t n,
                                DType type, const Stream& stream) {
  constexpr const char* kOp = "GeluBackward";
  HOIST_RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  if (n == 0) return Status::Ok();
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(
      CheckArgs(kOp, {{"dinp", dinp, bytes}, {"inp", inp, bytes}, {"dout", dout, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::GeluBackward(static_cast<float*>(dinp), static_cast<const float*>(inp),
                        static_cast<const float*>(dout), static_cast<size_t>(n));
    } else {
      ChunkedElementwise(
          type, n, {{dinp, Use::kInOut}, {inp, Use::kIn}, {dout, Use::kIn}},
          [](float* const* v, size_t count) { cpu::GeluBackward(v[0], v[1], v[2], count); });
    }
    return Status::Ok();
  });
}

Status CpuBackend::ResidualForward(void* out, const void* a, const void* b, int64_t n, DType type,
                                   const Stream& stream) {
  constexpr const char* kOp = "ResidualForward";
  HOIST_RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  if (n == 0) return Status::Ok();
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, bytes}, {"a", a, bytes}, {"b", b, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::ResidualForward(static_cast<float*>(out), static_cast<const float*>(a),
                           static_cast<const float*>(b), static_cast<size_t>(n));
    } else {
      ChunkedElementwise(
          type, n, {{a, Use::kIn}, {b, Use::kIn}, {out, Use::kOut}},
          [](float* const* v, size_t count) { cpu::ResidualForward(v[2], v[0], v[1], count); });
    }
    return Status::Ok();
  });
}

Status CpuBackend::ResidualBackward(void* da, void* db, const void* dout, int64_t n, DType type,
                                    const Stream& stream) {
  constexpr const char* kOp = "ResidualBackward";
  HOIST_RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  if (n == 0) return Status::Ok();
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(
      CheckArgs(kOp, {{"da", da, bytes}, {"db", db, bytes}, {"dout", dout, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::ResidualBackward(static_cast<float*>(da), static_cast<float*>(db),
                            static_cast<const float*>(dout), static_cast<size_t>(n));
    } else {
      ChunkedElementwise(
          type, n, {{da, Use::kInOut}, {db, Use::kInOut}, {dout, Use::kIn}},
          [](float* const* v, size_t count) { cpu::ResidualBackward(v[0], v[1], v[2], count); });
    }
    return Status::Ok();
  });
}

Status CpuBackend::Scale(void* out, const void* inp, int64_t n, float scale, DType type,
                         const Stream& stream) {
  constexpr const char* kOp = "Scale";
  HOIST_RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  if (!std::isfinite(scale)) {
    return InvalidArgumentError(std::string(kOp) + ": scale must be finite, got " +
                                std::to_string(scale));
  }
  if (n == 0) return Status::Ok();
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, bytes}, {"inp", inp, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::Scale(static_cast<float*>(out), static_cast<const float*>(inp), static_cast<size_t>(n),
                 scale);
    } else {
      ChunkedElementwise(
          type, n, {{inp, Use::kIn}, {out, Use::kOut}},
          [scale](float* const* v, size_t count) { cpu::Scale(v[1], v[0], count, scale); });
    }
    return Status::Ok();
  });
}

namespace {

// A cap of 0 (none) or positive and finite.
Status CheckSoftcap(const char* op, const char* name, float cap) {
  if (cap == 0.0f || (cap > 0.0f && std::isfinite(cap))) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name +
                              " must be 0 (no cap) or positive and finite, got " +
                              std::to_string(cap));
}

}  // namespace

Status CpuBackend::SoftcapForward(void* x, int64_t n, float cap, DType type, const Stream& stream) {
  constexpr const char* kOp = "SoftcapForward";
  HOIST_RETURN_IF_ERROR(NonNegative(kOp, "n", n));
  HOIST_RETURN_IF_ERROR(CheckSoftcap(kOp, "cap", cap));
  if (n == 0 || cap == 0.0f) return Status::Ok();
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"x", x, n * static_cast<int64_t>(DTypeSize(type))}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::SoftcapForward(static_cast<float*>(x), static_cast<size_t>(n), cap);
    } else {
      ChunkedElementwise(type, n, {{x, Use::kInOut}}, [cap](float* const* v, size_t count) {
        cpu::SoftcapForward(v[0], count, cap);
      });
    }
    return Status::Ok();
  });
}

Status CpuBackend::SoftmaxCrossEntropy(float* losses, void* dlogits, const void* logits,
                                       const int32_t* targets, float dloss, int N, int V, int Vp,
                                       float softcap, DType type, const Stream& stream) {
  constexpr const char* kOp = "SoftmaxCrossEntropy";
  HOIST_RETURN_IF_ERROR(Positive(kOp, "N", N));
  HOIST_RETURN_IF_ERROR(Positive(kOp, "V", V));
  if (Vp < V) {
    return InvalidArgumentError(std::string(kOp) + ": the padded vocabulary Vp (" +
                                std::to_string(Vp) + ") is smaller than V (" + std::to_string(V) +
                                ")");
  }
  HOIST_RETURN_IF_ERROR(CheckSoftcap(kOp, "softcap", softcap));
  const int64_t e = static_cast<int64_t>(DTypeSize(type)), NV = int64_t{N} * Vp;
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"losses", losses, int64_t{N} * 4},
                                        {"dlogits", dlogits, NV * e, kOptional},
                                        {"logits", logits, NV * e},
                                        {"targets", targets, int64_t{N} * 4}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::SoftmaxCrossEntropy(losses, static_cast<float*>(dlogits),
                               static_cast<const float*>(logits), targets, dloss, N, V, Vp,
                               softcap);
    } else {
      cpu::SoftmaxCrossEntropy16(losses, dlogits, logits, targets, dloss, N, V, Vp, type, softcap);
    }
    return Status::Ok();
  });
}

}  // namespace hoist::kernels

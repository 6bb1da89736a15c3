// CpuBackend's NF4 ops (kernels/backend.h): each block's 16 possible values computed and rounded
// once, then looked up per code (the bits of cpu::DequantizeNf4 rounded to the type); the 4-bit
// matmuls dequantize a panel of the weight that way and multiply it before the next.
#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/nf4.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu_backend.h"
#include "kernels/cpu_backend_args.h"
#include "kernels/nf4.h"
#include "kernels/nf4_args.h"

namespace hoist::kernels {

using cpu_backend_detail::CheckArgs;
using cpu_backend_detail::HostStreamOf;
using cpu_backend_detail::kOptional;
using cpu_backend_detail::Use;
using cpu_backend_detail::UseBf16Gemm;
using cpu_backend_detail::Wide;

namespace {

// The bytes of the weight's codes and absmaxes that an OC x C matrix reads, checked as device
// memory with the op's other arrays.
Status CheckNf4Weight(const char* op, const nf4::Matrix& w, int C, int OC) {
  const int64_t end = w.first + int64_t{OC} * C;  // one past the matrix's last element
  const int64_t first_block = w.first / nf4::kBlock, blocks = nf4::Blocks(end) - first_block;
  const int64_t first_byte = w.first / 2;
  HOIST_RETURN_IF_ERROR(
      CheckDeviceArrays(op, {{"codes", w.codes + first_byte, nf4::CodeBytes(end) - first_byte}}));
  if (w.absmax != nullptr) {
    return CheckDeviceArrays(op,
                             {{"absmax", w.absmax + first_block, blocks * int64_t{sizeof(float)}}});
  }
  const int64_t first_scale = first_block / cpu::kQuantBlockSize;
  return CheckDeviceArrays(
      op, {{"absmax_codes", w.absmax_codes + first_block, blocks},
           {"absmax_scales", w.absmax_scales + first_scale,
            (cpu::QuantBlocks(first_block + blocks) - first_scale) * int64_t{sizeof(float)}}});
}

}  // namespace

Status CpuBackend::DequantizeNf4(void* out, DType type, const uint8_t* codes, const float* absmax,
                                 int64_t n, const Stream& stream) {
  constexpr const char* kOp = "DequantizeNf4";
  HOIST_RETURN_IF_ERROR(nf4_args::CheckDequantizeNf4(kOp, out, codes, absmax, n));
  if (n == 0) return Status::Ok();
  HOIST_RETURN_IF_ERROR(
      CheckDeviceArrays(kOp, {{"out", out, n * static_cast<int64_t>(DTypeSize(type))},
                              {"codes", codes, nf4::CodeBytes(n)},
                              {"absmax", absmax, nf4::Blocks(n) * int64_t{sizeof(float)}}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32 || type == DType::kBFloat16) {
      // Runs of whole blocks through the panels' look-up (vectorised where the CPU allows), the
      // runs split across the threads.
      constexpr int64_t kRun = int64_t{1} << 16;
      static_assert(kRun % (2 * nf4::kBlock) == 0, "runs of whole blocks and bytes");
      const int64_t runs = (n + kRun - 1) / kRun;
      const bool bf16 = type == DType::kBFloat16;
      cpu::ParallelFor(runs, runs > 1, [&](int64_t r) {
        nf4::Matrix run;
        run.codes = codes;
        run.absmax = absmax;
        run.first = r * kRun;
        const int64_t count = std::min(kRun, n - run.first);
        cpu::DequantizeNf4Rect(run, count, 0, 1, 0, count, type, bf16,
                               static_cast<char*>(out) + run.first * (bf16 ? 2 : 4));
      });
      return Status::Ok();
    }
    // fp16: block by block, the block's 16 values (codebook x absmax, rounded once to fp16)
    // looked up per code, which gives the bits of multiplying and rounding each element.
    const int64_t blocks = nf4::Blocks(n);
    const auto e = static_cast<size_t>(DTypeSize(type));
    cpu::ParallelFor(blocks, blocks > 1, [&](int64_t b) {
      float values[16];
      alignas(8) unsigned char table[16 * sizeof(float)];
      for (int c = 0; c < 16; ++c) values[c] = nf4::kCodebook[c] * absmax[b];
      cpu::FromFloat(values, table, type, 16);
      const int64_t first = b * nf4::kBlock, count = std::min(nf4::kBlock, n - first);
      const uint8_t* src = codes + first / 2;
      // The block's elements looked up in the table, as 2-byte or 4-byte values.
      const auto look_up = [&](auto* d, const auto* t) {
        for (int64_t i = 0; i + 1 < count; i += 2) {
          d[i] = t[src[i / 2] >> 4];
          d[i + 1] = t[src[i / 2] & 15];
        }
        if (count % 2 != 0) d[count - 1] = t[src[(count - 1) / 2] >> 4];
      };
      auto* dst = static_cast<unsigned char*>(out) + static_cast<size_t>(first) * e;
      if (e == 2) {
        look_up(reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(table));
      } else {
        look_up(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(table));
      }
    });
    return Status::Ok();
  });
}

Status CpuBackend::DequantizeNf4Absmax(float* out, const uint8_t* codes, const float* scales,
                                       float offset, int64_t n, const Stream& stream) {
  constexpr const char* kOp = "DequantizeNf4Absmax";
  HOIST_RETURN_IF_ERROR(nf4_args::CheckDequantizeNf4Absmax(kOp, out, codes, scales, offset, n));
  if (n == 0) return Status::Ok();
  HOIST_RETURN_IF_ERROR(
      CheckDeviceArrays(kOp, {{"out", out, n * int64_t{sizeof(float)}},
                              {"codes", codes, n},
                              {"scales", scales, cpu::QuantBlocks(n) * int64_t{sizeof(float)}}}));
  return HostStreamOf(stream).Enqueue([=] {
    // The absmaxes' blockwise dequantization (blockwise_quant.h), then the offset, in chunks of
    // whole 256-blocks; most segments (one absmax per 64 weights) are one chunk.
    constexpr int64_t kChunk = int64_t{1} << 16;
    static_assert(kChunk % cpu::kQuantBlockSize == 0, "chunks of whole blocks");
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    cpu::ParallelFor(chunks, chunks > 1, [&](int64_t c) {
      const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
      float* chunk = out + begin;
      cpu::DequantizeBlockwise(cpu::SignedDynamicMap(), codes + begin,
                               scales + begin / cpu::kQuantBlockSize, count, chunk);
      for (int64_t b = 0; b < count; ++b) chunk[b] += offset;
    });
    return Status::Ok();
  });
}

Status CpuBackend::MatmulForwardNf4(void* out, const void* inp, const nf4::Matrix& weight,
                                    const void* bias, int N, int C, int OC, DType type,
                                    void* workspace, int64_t workspace_bytes,
                                    const Stream& stream) {
  constexpr const char* kOp = "MatmulForwardNf4";
  HOIST_RETURN_IF_ERROR(
      nf4_args::CheckMatmulNf4(kOp, out, inp, weight, N, C, OC, workspace, workspace_bytes));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"out", out, int64_t{N} * OC * e},
                                        {"inp", inp, int64_t{N} * C * e},
                                        {"bias", bias, OC * e, kOptional},
                                        {"workspace", workspace, workspace_bytes}}));
  HOIST_RETURN_IF_ERROR(CheckNf4Weight(kOp, weight, C, OC));
  const bool bf16_gemm = UseBf16Gemm(type);
  return HostStreamOf(stream).Enqueue([=] {
    // Panels of whole rows of the weight: out's columns [o, o + rows) are one product over C.
    const int64_t rows = nf4::PanelLines(workspace_bytes, C, bf16_gemm ? 2 : 4, OC);
    if (bf16_gemm) {
      const auto* bf16_bias = static_cast<const uint16_t*>(bias);
      for (int64_t o = 0; o < OC; o += rows) {
        const int64_t count = std::min(rows, OC - o);
        cpu::DequantizeNf4Rect(weight, C, o, count, 0, C, type, true, workspace);
        // b (C, count) is the panel transposed; the bias added in fp32 before the one rounding.
        cpu::GemmBf16({N, count, C, C, 1, 1, C, OC, false, true}, static_cast<const uint16_t*>(inp),
                      static_cast<const uint16_t*>(workspace), static_cast<uint16_t*>(out) + o,
                      bf16_bias == nullptr ? nullptr : bf16_bias + o);
      }
      return Status::Ok();
    }
    Wide o(out, type, int64_t{N} * OC, Use::kOut), x(inp, type, int64_t{N} * C, Use::kIn),
        b(bias, type, OC, Use::kIn);
    const auto* panel = static_cast<const float*>(workspace);
    for (int64_t first = 0; first < OC; first += rows) {
      const int64_t count = std::min(rows, OC - first);
      cpu::DequantizeNf4Rect(weight, C, first, count, 0, C, type, false, workspace);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, static_cast<int>(count), C, 1.0f,
                  x.get(), C, panel, C, 0.0f, o.get() + first, OC);
    }
    if (const float* b_values = b.get(); b_values != nullptr) {
      float* o_values = o.get();
      cpu::ParallelFor(N, N > 1, [&](int64_t i) {
        float* __restrict row = o_values + i * OC;
        for (int j = 0; j < OC; ++j) row[j] += b_values[j];
      });
    }
    o.Finish();
    return Status::Ok();
  });
}

Status CpuBackend::MatmulBackwardNf4(void* dinp, const void* dout, const nf4::Matrix& weight, int N,
                                     int C, int OC, DType type, void* workspace,
                                     int64_t workspace_bytes, const Stream& stream) {
  constexpr const char* kOp = "MatmulBackwardNf4";
  HOIST_RETURN_IF_ERROR(
      nf4_args::CheckMatmulNf4(kOp, dinp, dout, weight, N, C, OC, workspace, workspace_bytes));
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckArgs(kOp, {{"dinp", dinp, int64_t{N} * C * e},
                                        {"dout", dout, int64_t{N} * OC * e},
                                        {"workspace", workspace, workspace_bytes}}));
  HOIST_RETURN_IF_ERROR(CheckNf4Weight(kOp, weight, C, OC));
  const bool bf16_gemm = UseBf16Gemm(type);
  return HostStreamOf(stream).Enqueue([=] {
    // Panels of whole columns of the weight: dinp's columns [c, c + cols) each get their whole
    // sum over OC in one product.
    const int64_t cols = nf4::PanelLines(workspace_bytes, OC, bf16_gemm ? 2 : 4, C);
    if (bf16_gemm) {
      for (int64_t c = 0; c < C; c += cols) {
        const int64_t count = std::min(cols, C - c);
        cpu::DequantizeNf4Rect(weight, C, 0, OC, c, count, type, true, workspace);
        cpu::GemmBf16({N, count, OC, OC, 1, count, 1, C, true, true},
                      static_cast<const uint16_t*>(dout), static_cast<const uint16_t*>(workspace),
                      static_cast<uint16_t*>(dinp) + c);
      }
      return Status::Ok();
    }
    Wide di(dinp, type, int64_t{N} * C, Use::kInOut), d(dout, type, int64_t{N} * OC, Use::kIn);
    const auto* panel = static_cast<const float*>(workspace);
    for (int64_t c = 0; c < C; c += cols) {
      const int64_t count = std::min(cols, C - c);
      cpu::DequantizeNf4Rect(weight, C, 0, OC, c, count, type, false, workspace);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, static_cast<int>(count), OC, 1.0f,
                  d.get(), OC, panel, static_cast<int>(count), 1.0f, di.get() + c, C);
    }
    di.Finish();
    return Status::Ok();
  });
}

}  // namespace hoist::kernels

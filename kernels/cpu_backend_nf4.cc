// CpuBackend's NF4 op (kernels/backend.h): each block's 16 possible values computed and rounded
// once, then looked up per code (the bits of cpu::DequantizeNf4 rounded to the type).
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

using cpu_backend_detail::HostStreamOf;

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
    // Block by block: the block's 16 values (codebook x absmax, rounded once to `type`) looked
    // up per code, which gives the bits of multiplying and rounding each element.
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

}  // namespace hoist::kernels

// CpuBackend's NF4 op (kernels/backend.h): cpu::DequantizeNf4 straight into an fp32 out, and for
// 16-bit outputs a chunk at a time through an fp32 buffer, rounded once.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/nf4.h"
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
    if (type == DType::kFloat32) {
      cpu::DequantizeNf4(codes, absmax, n, static_cast<float*>(out));
      return Status::Ok();
    }
    // Chunks of whole blocks (an even element count), so each starts on a byte and an absmax.
    constexpr int64_t kChunk = 64 * nf4::kBlock;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const int64_t e = static_cast<int64_t>(DTypeSize(type));
#pragma omp parallel
    {
      std::vector<float> buffer(kChunk);
#pragma omp for schedule(static)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t first = ch * kChunk, count = std::min(kChunk, n - first);
        cpu::DequantizeNf4(codes + first / 2, absmax + first / nf4::kBlock, count, buffer.data());
        cpu::FromFloat(buffer.data(), static_cast<char*>(out) + first * e, type, count);
      }
    }
    return Status::Ok();
  });
}

}  // namespace hoist::kernels

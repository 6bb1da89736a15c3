// CpuBackend's LoRA ops: the general product and the dropout (kernels/backend.h). fp32 goes
// straight to the kernels of kernels/cpu/lora_ops.cc; 16-bit operands are widened (row by row,
// honouring their leading dimensions) into fp32 copies, and a 16-bit C is computed in an fp32
// copy of its window and rounded once into it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu_backend.h"
#include "kernels/cpu_backend_args.h"
#include "kernels/lora_args.h"

namespace hoist::kernels {

using cpu_backend_detail::GiveBackScratch;
using cpu_backend_detail::HostStreamOf;
using cpu_backend_detail::ScratchBuffer;
using cpu_backend_detail::TakeScratch;

namespace {

// An fp32 copy of a (rows, cols) window of `type` elements `ld` apart, packed (ld = cols); this
// thread's scratch, given back on destruction.
class PackedFloats {
 public:
  PackedFloats(int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {
    buffer_ = TakeScratch(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)));
  }
  ~PackedFloats() { GiveBackScratch(std::move(buffer_)); }
  PackedFloats(const PackedFloats&) = delete;
  PackedFloats& operator=(const PackedFloats&) = delete;

  float* get() { return buffer_.data.get(); }
  void Widen(const void* src, DType type, int64_t ld) {
    const int64_t e = static_cast<int64_t>(DTypeSize(type));
    if (ld == cols_) {
      cpu::ToFloat(src, type, get(), rows_ * cols_);
      return;
    }
    for (int64_t r = 0; r < rows_; ++r) {
      cpu::ToFloat(static_cast<const char*>(src) + r * ld * e, type, get() + r * cols_, cols_);
    }
  }
  // Rounds the copy into the window at dst; nothing outside it is written.
  void Narrow(void* dst, DType type, int64_t ld) {
    const int64_t e = static_cast<int64_t>(DTypeSize(type));
    if (ld == cols_) {
      cpu::FromFloat(get(), dst, type, rows_ * cols_);
      return;
    }
    for (int64_t r = 0; r < rows_; ++r) {
      cpu::FromFloat(get() + r * cols_, static_cast<char*>(dst) + r * ld * e, type, cols_);
    }
  }

 private:
  int64_t rows_, cols_;
  ScratchBuffer buffer_;
};

}  // namespace

Status CpuBackend::Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void* A,
                        int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                        DType type, DType c_type, const Stream& stream) {
  constexpr const char* kOp = "Gemm";
  HOIST_RETURN_IF_ERROR(
      lora_args::CheckGemm(kOp, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, type, c_type));
  const lora_args::StoredMatrix a = lora_args::StoredA(trans_a, M, K),
                                b = lora_args::StoredB(trans_b, N, K), c{M, N};
  HOIST_RETURN_IF_ERROR(CheckDeviceArrays(kOp, {{"A", A, a.Bytes(lda, type)},
                                                {"B", B, b.Bytes(ldb, type)},
                                                {"C", C, c.Bytes(ldc, c_type)}}));
  if (M == 0 || N == 0) return Status::Ok();
  return HostStreamOf(stream).Enqueue([=] {
    if (type == DType::kFloat32) {
      cpu::Gemm(trans_a, trans_b, M, N, K, alpha, static_cast<const float*>(A), lda,
                static_cast<const float*>(B), ldb, beta, static_cast<float*>(C), ldc);
      return Status::Ok();
    }
    PackedFloats wa(a.rows, a.cols), wb(b.rows, b.cols);
    if (K > 0) {
      wa.Widen(A, type, lda);
      wb.Widen(B, type, ldb);
    }
    if (c_type == DType::kFloat32) {
      cpu::Gemm(trans_a, trans_b, M, N, K, alpha, wa.get(), a.cols, wb.get(), b.cols, beta,
                static_cast<float*>(C), ldc);
      return Status::Ok();
    }
    // round(alpha AB + beta C) with C read widened: one rounding.
    PackedFloats wc(M, N);
    if (beta != 0.0f) wc.Widen(C, c_type, ldc);
    cpu::Gemm(trans_a, trans_b, M, N, K, alpha, wa.get(), a.cols, wb.get(), b.cols, beta, wc.get(),
              N);
    wc.Narrow(C, c_type, ldc);
    return Status::Ok();
  });
}

Status CpuBackend::Dropout(void* out, const void* inp, int64_t n, float p, uint64_t seed,
                           DType type, const Stream& stream) {
  constexpr const char* kOp = "Dropout";
  HOIST_RETURN_IF_ERROR(lora_args::CheckDropout(kOp, out, inp, n, p));
  if (n == 0) return Status::Ok();
  const int64_t bytes = n * static_cast<int64_t>(DTypeSize(type));
  HOIST_RETURN_IF_ERROR(CheckDeviceArrays(kOp, {{"out", out, bytes}, {"inp", inp, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (p == 0.0f) {
      // Every element kept, scaled by 1: the same bits.
      if (out != inp) std::memcpy(out, inp, static_cast<size_t>(bytes));
      return Status::Ok();
    }
    if (type == DType::kFloat32) {
      cpu::Dropout(static_cast<float*>(out), static_cast<const float*>(inp), n, p, seed);
      return Status::Ok();
    }
    // A chunk at a time through a buffer of the thread's own: widened, masked and scaled in
    // fp32, rounded once. In place is safe: each chunk is read before it is written.
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const int64_t e = static_cast<int64_t>(DTypeSize(type));
#pragma omp parallel
    {
      std::vector<float> buffer(kChunk);
#pragma omp for schedule(static)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t first = ch * kChunk, count = std::min(kChunk, n - first);
        cpu::ToFloat(static_cast<const char*>(inp) + first * e, type, buffer.data(), count);
        cpu::Dropout(buffer.data(), buffer.data(), count, p, seed, first);
        cpu::FromFloat(buffer.data(), static_cast<char*>(out) + first * e, type, count);
      }
    }
    return Status::Ok();
  });
}

}  // namespace hoist::kernels

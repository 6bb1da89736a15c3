// The CPU's bf16 matmuls: bf16 operands, fp32 accumulation, through oneDNN where the processor
// has AMX-BF16 or AVX512_BF16 (oneDNN picks its kernel at run time; hoist is never built with
// -march=native). Elsewhere, or in a build without oneDNN, bf16 runs keep the fp32 path: the
// operands are widened and multiplied by the BLAS's sgemm.
//
// Which path a run takes is decided once, by ActiveGemmPath(), from:
//   HOIST_CPU_MASK  comma-separated CPU features to hide from the choice: amx_bf16, avx512_bf16
//                   (or bf16 for both). Hiding AMX alone also caps oneDNN at AVX512_BF16.
//   HOIST_GEMM      auto (default): take bf16 only where it measured faster than sgemm on a
//                   GPT-2-sized product (256x768x768) in this process; bf16: take it wherever the
//                   ISA and the library are there; fp32: never.
// All functions are thread-safe. The products block until done.
#pragma once

#include <cstdint>
#include <string>

namespace hoist::kernels::cpu {

enum class GemmPath { kFp32Blas, kBf16Dnnl };

struct GemmChoice {
  GemmPath path = GemmPath::kFp32Blas;
  std::string isa;         // what the choice saw: "amx_bf16", "avx512_bf16" or "none"
  std::string library;     // "oneDNN 2.6.3 (its kernel: brg:avx512_core_amx_bf16)", or why none
  double bf16_gflops = 0;  // measured rates of the probe product; 0 when not measured
  double fp32_gflops = 0;
  std::string reason;  // one sentence: why this path
};

// Reads the environment and the CPU now, and may time both paths (some tens of milliseconds).
GemmChoice DecideGemmPath();
// DecideGemmPath() once per process; logs the choice once.
const GemmChoice& ActiveGemmPath();
const char* GemmPathName(GemmPath path);
// True when hoist was built with oneDNN and the CPU (not masked) has AVX512_BF16 or AMX-BF16.
bool Bf16GemmAvailable();

// The bf16 products; callable only where Bf16GemmAvailable(). bf16 arrays are raw bits; an array
// marked bf16 (out_bf16, dinp_bf16) is bf16, else fp32.
// out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC, may be null), accumulated in fp32 and,
// into a bf16 out, rounded once.
void MatmulForwardBf16(void* out, bool out_bf16, const uint16_t* inp, const uint16_t* weight,
                       const uint16_t* bias, int N, int C, int OC);
// dinp (N,C) += dout (N,OC) @ weight (OC,C) (dinp null: not wanted; a bf16 dinp is widened, added
// to in fp32 and rounded once); dweight (OC,C, null: a frozen weight, skipped) += dout^T @ inp
// and dbias (OC, null: no bias) += column sums of dout, both fp32 accumulators.
void MatmulBackwardBf16(void* dinp, bool dinp_bf16, float* dweight, float* dbias,
                        const uint16_t* dout, const uint16_t* inp, const uint16_t* weight, int N,
                        int C, int OC);

// The product the two above are made of, for kernels that multiply blocks of larger arrays
// (attention's heads): c (m,n) = scale * a (m,k) @ b (k,n), plus c's old value when `accumulate`.
// a and b are bf16 at (row, column) element strides, so a transposed operand is its strides
// swapped; c is fp32, or bf16 (c_bf16: the fp32 result, the old value added, rounded once), at row
// stride ldc. A primitive per distinct product is built at its first call and kept. Called inside
// an OpenMP parallel region, the product runs on the calling thread alone.
struct Bf16Product {
  int64_t m, n, k;
  int64_t a_row, a_col, b_row, b_col, ldc;
  bool accumulate = false;
  bool c_bf16 = false;
  float scale = 1.0f;
};
// bias (n, bf16), where not null, is added to every row in fp32 before the result is rounded.
void GemmBf16(const Bf16Product& product, const uint16_t* a, const uint16_t* b, void* c,
              const uint16_t* bias = nullptr);

}  // namespace hoist::kernels::cpu

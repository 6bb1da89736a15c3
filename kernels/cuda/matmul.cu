#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/cuda/cuda_status.h"
#include "core/dtype.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/nf4.h"
#include "kernels/nf4.h"
#include "kernels/nf4_args.h"

// Row-major products through column-major cuBLASLt: a row-major (R, C) array is the column-major
// (C, R) matrix with leading dimension C, so out (N,OC) = inp @ W^T is computed as the
// column-major out^T (OC,N) = W^T(op T of the stored (C,OC)) @ inp^T (stored (C,N)). Every product
// runs under CUBLAS_COMPUTE_32F: true fp32 for fp32 arrays (never TF32), fp32 accumulation for
// bf16 and fp16.

namespace hoist::kernels::cuda {
namespace {

using detail::CeilDiv;
using detail::ToFloat;

// One column-major product D (m,n) = op(A) @ op(B) + beta D, with an optional epilogue.
struct LtProduct {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  cudaDataType_t ab_type = CUDA_R_32F;
  void* d = nullptr;  // also C (beta != 0 reads it)
  int64_t ldd = 0;
  cudaDataType_t d_type = CUDA_R_32F;
  float beta = 0.0f;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // (m), d_type; with a *BIAS epilogue
  void* aux = nullptr;         // (m,n) ld aux_ld, d_type; with a GELU_AUX* epilogue
  int64_t aux_ld = 0;
};

Status MakeLayout(LtMatrixLayout* layout, cudaDataType_t type, int64_t rows, int64_t cols,
                  int64_t ld) {
  cublasLtMatrixLayout_t raw = nullptr;
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&raw, type, rows, cols, ld));
  layout->reset(raw);
  return Status::Ok();
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing p's address:
// the preference below keeps the heuristic from choosing an algorithm that needs more.
uint32_t AlignmentOf(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  if (address == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(address & (~address + 1), 256));
}

LtPlanKey KeyOf(const LtProduct& product) {
  LtPlanKey key;
  key.trans_a = static_cast<int>(product.trans_a);
  key.trans_b = static_cast<int>(product.trans_b);
  key.m = product.m;
  key.n = product.n;
  key.k = product.k;
  key.lda = product.lda;
  key.ldb = product.ldb;
  key.ldd = product.ldd;
  key.ab_type = static_cast<int>(product.ab_type);
  key.d_type = static_cast<int>(product.d_type);
  key.epilogue = static_cast<int>(product.epilogue);
  key.has_bias = product.bias != nullptr;
  key.has_aux = product.aux != nullptr;
  key.aux_ld = product.aux != nullptr ? product.aux_ld : 0;
  key.beta_nonzero = product.beta != 0.0f;
  key.align_a = AlignmentOf(product.a);
  key.align_b = AlignmentOf(product.b);
  key.align_d = AlignmentOf(product.d);
  key.align_bias = product.bias != nullptr ? AlignmentOf(product.bias) : 0;
  key.align_aux = product.aux != nullptr ? AlignmentOf(product.aux) : 0;
  return key;
}

// The descriptor, layouts and algorithm for `product`, as the heuristic picks them for the
// alignments in `key`. A heuristic that finds nothing gives a plan marked unsupported.
Status MakePlan(BlasHandle& blas, const LtProduct& product, const LtPlanKey& key, LtPlan* plan) {
  {
    cublasLtMatmulDesc_t raw = nullptr;
    HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    plan->desc.reset(raw);
  }
  cublasLtMatmulDesc_t desc = plan->desc.get();
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      desc, CUBLASLT_MATMUL_DESC_TRANSA, &product.trans_a, sizeof(product.trans_a)));
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      desc, CUBLASLT_MATMUL_DESC_TRANSB, &product.trans_b, sizeof(product.trans_b)));
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &product.epilogue, sizeof(product.epilogue)));
  // The heuristic sees the pointers of the call that makes the plan; later calls set their own.
  if (product.bias != nullptr) {
    HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &product.bias, sizeof(product.bias)));
  }
  if (product.aux != nullptr) {
    HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &product.aux, sizeof(product.aux)));
    HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &product.aux_ld, sizeof(product.aux_ld)));
  }

  const bool a_t = product.trans_a == CUBLAS_OP_T;
  const bool b_t = product.trans_b == CUBLAS_OP_T;
  HOIST_RETURN_IF_ERROR(MakeLayout(&plan->a, product.ab_type, a_t ? product.k : product.m,
                                   a_t ? product.m : product.k, product.lda));
  HOIST_RETURN_IF_ERROR(MakeLayout(&plan->b, product.ab_type, b_t ? product.n : product.k,
                                   b_t ? product.k : product.n, product.ldb));
  HOIST_RETURN_IF_ERROR(MakeLayout(&plan->d, product.d_type, product.m, product.n, product.ldd));

  LtMatmulPreference preference;
  {
    cublasLtMatmulPreference_t raw = nullptr;
    HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&raw));
    preference.reset(raw);
  }
  const uint64_t workspace_bytes = static_cast<uint64_t>(blas.workspace_bytes());
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
      sizeof(workspace_bytes)));
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_a,
      sizeof(key.align_a)));
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_b,
      sizeof(key.align_b)));
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_d,
      sizeof(key.align_d)));
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      preference.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_d,
      sizeof(key.align_d)));

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t search =
      cublasLtMatmulAlgoGetHeuristic(blas.lt(), desc, plan->a.get(), plan->b.get(), plan->d.get(),
                                     plan->d.get(), preference.get(), 1, &heuristic, &found);
  if (search == CUBLAS_STATUS_NOT_SUPPORTED || (search == CUBLAS_STATUS_SUCCESS && found == 0)) {
    plan->unsupported = true;
    plan->search_status = search;
    return Status::Ok();
  }
  if (search != CUBLAS_STATUS_SUCCESS) {
    return CublasError(search, "cublasLtMatmulAlgoGetHeuristic(...)", __FILE__, __LINE__);
  }
  plan->algo = heuristic.algo;
  return Status::Ok();
}

// Plans kept per handle. Training asks for a few dozen shapes; a caller that keeps changing
// them (varying sequence lengths) starts the cache over rather than growing it without bound.
constexpr size_t kMaxLtPlans = 512;

// Enqueues `product` on `stream`, with the plan prepared for its key (made on first use). Where
// cuBLASLt has no algorithm for the combination (an epilogue it does not fuse for these types)
// and `unsupported` is given, sets *unsupported and enqueues nothing; without `unsupported` that
// is an error.
Status RunLtProduct(BlasHandle& blas, const LtProduct& product, cudaStream_t stream,
                    bool* unsupported = nullptr) {
  if (unsupported != nullptr) *unsupported = false;
  const LtPlanKey key = KeyOf(product);
  BlasHandle::LtPlans& plans = blas.lt_plans();
  auto found = plans.find(key);
  if (found == plans.end()) {
    auto plan = std::make_unique<LtPlan>();
    // A plan that fails to build is not kept: the next call tries again.
    HOIST_RETURN_IF_ERROR(MakePlan(blas, product, key, plan.get()));
    if (plans.size() >= kMaxLtPlans) plans.clear();
    found = plans.emplace(key, std::move(plan)).first;
  }
  LtPlan& plan = *found->second;
  if (plan.unsupported) {
    if (unsupported != nullptr) {
      *unsupported = true;
      return Status::Ok();
    }
    if (plan.search_status != CUBLAS_STATUS_SUCCESS) {
      return CublasError(plan.search_status, "cublasLtMatmulAlgoGetHeuristic(...)", __FILE__,
                         __LINE__);
    }
    return InternalError("cuBLASLt offers no algorithm for a " + std::to_string(product.m) + "x" +
                         std::to_string(product.n) + "x" + std::to_string(product.k) + " product");
  }
  // The descriptor is host state that cublasLtMatmul reads when it enqueues, so this call's
  // pointers can replace the last call's even while that product still runs.
  if (product.bias != nullptr) {
    HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &product.bias, sizeof(product.bias)));
  }
  if (product.aux != nullptr) {
    HOIST_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                       &product.aux, sizeof(product.aux)));
  }
  const float alpha = 1.0f;
  HOIST_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      blas.lt(), plan.desc.get(), &alpha, product.a, plan.a.get(), product.b, plan.b.get(),
      &product.beta, product.d, plan.d.get(), product.d, plan.d.get(), &plan.algo, blas.workspace(),
      static_cast<size_t>(blas.workspace_bytes()), stream));
  return Status::Ok();
}

// out (N,OC) += bias (OC), rounded to T: the bias epilogue's work, for a bias whose address
// cuBLASLt's epilogue does not take (it wants 16-byte alignment).
template <typename T>
__global__ void AddBiasKernel(T* out, const T* bias, int64_t N, int OC) {
  const int64_t total = N * OC;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = detail::FromFloat<T>(ToFloat(out[i]) + ToFloat(bias[i % OC]));
  }
}

Status LaunchAddBias(void* out, const void* bias, int N, int OC, DType type, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(N) * OC;
  const int blocks = static_cast<int>(std::min<int64_t>(CeilDiv(total, 256), 4096));
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    AddBiasKernel<T>
        <<<blocks, 256, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(bias), N, OC);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

// Column sums of dout (N,OC) into dbias: block (32 columns) x (kBiasRowLanes row lanes), one
// block per column tile and chunk of rows. Within a block the sum has a fixed order; the
// chunks meet through fp32 atomics unless there is only one.
constexpr int kBiasRowLanes = 8;
constexpr int kBiasRowsPerChunk = 256;

template <typename T>
__global__ void BiasGradKernel(float* dbias, const T* dout, int N, int OC, bool atomic) {
  __shared__ float partial[kBiasRowLanes][33];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int row_begin = blockIdx.y * kBiasRowsPerChunk;
  const int row_end = min(N, row_begin + kBiasRowsPerChunk);
  float sum = 0.0f;
  if (col < OC) {
    for (int row = row_begin + threadIdx.y; row < row_end; row += kBiasRowLanes) {
      sum += ToFloat(dout[static_cast<int64_t>(row) * OC + col]);
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || col >= OC) return;
  float total = 0.0f;
  for (int lane = 0; lane < kBiasRowLanes; ++lane) total += partial[lane][threadIdx.x];
  if (atomic) {
    atomicAdd(dbias + col, total);
  } else {
    dbias[col] += total;
  }
}

Status LaunchBiasGrad(float* dbias, const void* dout, int N, int OC, DType type,
                      cudaStream_t stream) {
  const dim3 grid(CeilDiv(OC, 32), CeilDiv(N, kBiasRowsPerChunk));
  const dim3 block(32, kBiasRowLanes);
  const bool atomic = grid.y > 1;
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    BiasGradKernel<T>
        <<<grid, block, 0, stream>>>(dbias, static_cast<const T*>(dout), N, OC, atomic);
  };
  HOIST_CUDA_DISPATCH(type, launch);
  HOIST_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::Ok();
}

Status CheckSizes(const char* op, int N, int C, int OC) {
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "N", N));
  HOIST_RETURN_IF_ERROR(CheckPositive(op, "C", C));
  return CheckPositive(op, "OC", OC);
}

// Lines (rows or columns of the weight, each `width` elements of `element_bytes`) per NF4 panel:
// as many as the workspace holds, rounded down to a multiple of 8 where there is more than one
// panel. Then every panel starts 8 elements after the last, so the output and bias pointers of
// the products keep their 16-byte alignment from panel to panel (the bias epilogue stays usable,
// and the plans cached for one panel serve the next), and only the last panel differs in size.
int Nf4PanelLines(int64_t workspace_bytes, int width, int64_t element_bytes, int lines) {
  int64_t panel = nf4::PanelLines(workspace_bytes, width, element_bytes, lines);
  if (panel >= 8 && panel < lines) panel -= panel % 8;
  return static_cast<int>(panel);
}

}  // namespace

Status MatmulForward(BlasHandle& blas, void* out, const void* inp, const void* weight,
                     const void* bias, int N, int C, int OC, DType type, cudaStream_t stream,
                     void* gelu_out) {
  constexpr const char* kOp = "MatmulForward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "out", out));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckSizes(kOp, N, C, OC));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));

  LtProduct product;
  product.trans_a = CUBLAS_OP_T;  // weight stored (C,OC) column-major
  product.m = OC;
  product.n = N;
  product.k = C;
  product.a = weight;
  product.lda = C;
  product.b = inp;
  product.ldb = C;
  product.ab_type = product.d_type = CudaDataType(type);
  product.ldd = OC;
  // cuBLASLt's bias epilogues want the bias 16-byte aligned; another bias is added after.
  const bool bias_epilogue = bias != nullptr && AlignmentOf(bias) >= 16;
  product.bias = bias_epilogue ? bias : nullptr;

  if (gelu_out != nullptr && OC % 8 == 0 && (bias == nullptr || bias_epilogue)) {
    // GELU_AUX(_BIAS) writes GELU(pre) into D and pre-activation into the aux matrix, so D is
    // gelu_out and aux is out. cuBLASLt asks for an aux leading dimension divisible by 8; other
    // widths, and type combinations it does not fuse, take the unfused path below.
    LtProduct fused = product;
    fused.d = gelu_out;
    fused.epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    fused.aux = out;
    fused.aux_ld = OC;
    bool unsupported = false;
    HOIST_RETURN_IF_ERROR(RunLtProduct(blas, fused, stream, &unsupported));
    if (!unsupported) return Status::Ok();
  }
  product.d = out;
  product.epilogue = bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  HOIST_RETURN_IF_ERROR(RunLtProduct(blas, product, stream));
  if (bias != nullptr && !bias_epilogue) {
    HOIST_RETURN_IF_ERROR(LaunchAddBias(out, bias, N, OC, type, stream));
  }
  if (gelu_out == nullptr) return Status::Ok();
  // Unfused: GELU of the pre-activation as stored (rounded to `type`), as the CPU model does.
  return GeluForward(gelu_out, out, static_cast<int64_t>(N) * OC, type, stream);
}

Status MatmulBackward(BlasHandle& blas, void* dinp, float* dweight, float* dbias, const void* dout,
                      const void* inp, const void* weight, int N, int C, int OC, DType type,
                      cudaStream_t stream) {
  constexpr const char* kOp = "MatmulBackward";
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "dout", dout));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "inp", inp));
  HOIST_RETURN_IF_ERROR(CheckPointer(kOp, "weight", weight));
  HOIST_RETURN_IF_ERROR(CheckSizes(kOp, N, C, OC));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const cudaDataType_t data_type = CudaDataType(type);

  if (dinp != nullptr) {
    // dinp^T (C,N) += W^T (stored (C,OC)) @ dout^T (stored (OC,N)).
    LtProduct product;
    product.m = C;
    product.n = N;
    product.k = OC;
    product.a = weight;
    product.lda = C;
    product.b = dout;
    product.ldb = OC;
    product.ab_type = product.d_type = data_type;
    product.d = dinp;
    product.ldd = C;
    product.beta = 1.0f;
    HOIST_RETURN_IF_ERROR(RunLtProduct(blas, product, stream));
  }
  if (dweight != nullptr) {
    // dweight^T (C,OC) += inp^T (stored (C,N)) @ dout (op T of the stored (OC,N)), into fp32.
    LtProduct product;
    product.trans_b = CUBLAS_OP_T;
    product.m = C;
    product.n = OC;
    product.k = N;
    product.a = inp;
    product.lda = C;
    product.b = dout;
    product.ldb = OC;
    product.ab_type = data_type;
    product.d = dweight;
    product.ldd = C;
    product.d_type = CUDA_R_32F;
    product.beta = 1.0f;
    HOIST_RETURN_IF_ERROR(RunLtProduct(blas, product, stream));
  }
  if (dbias == nullptr) return Status::Ok();
  return LaunchBiasGrad(dbias, dout, N, OC, type, stream);
}

Status MatmulForwardNf4(BlasHandle& blas, void* out, const void* inp, const nf4::Matrix& weight,
                        const void* bias, int N, int C, int OC, DType type, void* workspace,
                        int64_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "MatmulForwardNf4";
  HOIST_RETURN_IF_ERROR(
      nf4_args::CheckMatmulNf4(kOp, out, inp, weight, N, C, OC, workspace, workspace_bytes));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const int64_t element_bytes = static_cast<int64_t>(DTypeSize(type));
  const int rows = Nf4PanelLines(workspace_bytes, C, element_bytes, OC);
  // One decision for the whole output: the bias epilogue where every panel's slice of the bias is
  // 16-byte aligned, else the bias added once at the end, so no output gets it twice.
  const bool bias_epilogue = bias != nullptr && AlignmentOf(bias) >= 16 &&
                             (rows == OC || (rows * element_bytes) % 16 == 0);

  // out[:, o0:o0+ob]^T (ob,N) = panel (stored (C,ob), op T) @ inp^T (stored (C,N)), written into
  // the column-major (OC,N) view of out.
  LtProduct product;
  product.trans_a = CUBLAS_OP_T;
  product.n = N;
  product.k = C;
  product.a = workspace;
  product.lda = C;
  product.b = inp;
  product.ldb = C;
  product.ab_type = product.d_type = CudaDataType(type);
  product.ldd = OC;
  product.epilogue = bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  // The panel's product is enqueued behind its dequantization and ahead of the next panel's, so
  // one workspace serves every panel.
  for (int o0 = 0; o0 < OC; o0 += rows) {
    const int ob = std::min(rows, OC - o0);
    HOIST_RETURN_IF_ERROR(detail::DequantizeNf4Rows(workspace, type, weight, C, o0, ob, stream));
    product.m = ob;
    product.d = ElementPtr(out, type, o0);
    product.bias = bias_epilogue ? ElementPtr(bias, type, o0) : nullptr;
    HOIST_RETURN_IF_ERROR(RunLtProduct(blas, product, stream));
  }
  if (bias == nullptr || bias_epilogue) return Status::Ok();
  return LaunchAddBias(out, bias, N, OC, type, stream);
}

Status MatmulBackwardNf4(BlasHandle& blas, void* dinp, const void* dout, const nf4::Matrix& weight,
                         int N, int C, int OC, DType type, void* workspace, int64_t workspace_bytes,
                         cudaStream_t stream) {
  constexpr const char* kOp = "MatmulBackwardNf4";
  HOIST_RETURN_IF_ERROR(
      nf4_args::CheckMatmulNf4(kOp, dinp, dout, weight, N, C, OC, workspace, workspace_bytes));
  HOIST_RETURN_IF_ERROR(CheckStream(kOp, stream));
  const int64_t element_bytes = static_cast<int64_t>(DTypeSize(type));
  const int cols = Nf4PanelLines(workspace_bytes, OC, element_bytes, C);

  // dinp[:, c0:c0+cb]^T (cb,N) += panel (OC,cb) row-major, i.e. stored (cb,OC) column-major @
  // dout^T (stored (OC,N)): the panel holds whole columns of the weight, so each dinp element
  // gets its whole sum over OC in one product, added to it and rounded once.
  LtProduct product;
  product.n = N;
  product.k = OC;
  product.a = workspace;
  product.b = dout;
  product.ldb = OC;
  product.ab_type = product.d_type = CudaDataType(type);
  product.ldd = C;
  product.beta = 1.0f;
  for (int c0 = 0; c0 < C; c0 += cols) {
    const int cb = std::min(cols, C - c0);
    HOIST_RETURN_IF_ERROR(
        detail::DequantizeNf4Columns(workspace, type, weight, C, OC, c0, cb, stream));
    product.m = cb;
    product.lda = cb;
    product.d = ElementPtr(dinp, type, c0);
    HOIST_RETURN_IF_ERROR(RunLtProduct(blas, product, stream));
  }
  return Status::Ok();
}

}  // namespace hoist::kernels::cuda

// The fused multi-tensor AdamW of kernels/cuda/adamw.h against the GPU's copy bandwidth.
//
// Per parameter the step reads param, grad, m and v (16 bytes with fp32 gradients) and writes
// param, m, v and the bf16 copy (14 bytes): 30 bytes. The anchor, timed in the same run on the
// same stream, is cudaMemcpyAsync of a large device buffer to another (read + write bytes). The
// figure is the step's bytes/s over the copy's; the aim is above 0.8. Runs alternate (copy, step,
// copy, step, ...) and medians are printed, since the machine may be shared.
//
//   adamw_gpu_bench [--params N] [--tensors K] [--reps R]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/cuda_device.h"
#include "core/cuda/event.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/adamw.h"

namespace {

namespace kc = ::hoist::kernels::cuda;
using hoist::DType;

#define CHECK_CUDA(expr)                                              \
  do {                                                                \
    const cudaError_t e = (expr);                                     \
    if (e != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(e)); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

template <typename T>
T Value(const hoist::StatusOr<T>& v) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(const_cast<hoist::StatusOr<T>&>(v)).value();
}

void Check(const hoist::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// n elements of T in device memory, zero-filled; exits on failure.
template <typename T>
T* DeviceZeros(size_t n) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  CHECK_CUDA(cudaMemset(p, 0, n * sizeof(T)));
  return static_cast<T*>(p);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t params = 124'475'904;  // GPT-2 124M with the padded vocabulary
  int tensors = 148;             // its tensor count (2 + 12 x 12 + 2)
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--params")) params = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tensors")) tensors = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  if (hoist::CudaDeviceCount() == 0) {
    std::printf("adamw_gpu_bench: no CUDA GPU visible (driver %s); nothing measured\n",
                hoist::CudaDriverVersionString().c_str());
    return 0;
  }
  CHECK_CUDA(cudaSetDevice(0));
  std::printf("GPU: %s\n", Value(hoist::CudaDeviceName(0)).c_str());
  hoist::CudaStream stream = Value(hoist::CudaStream::Create());
  const size_t n = static_cast<size_t>(params);
  float* param = DeviceZeros<float>(n);
  float* grad = DeviceZeros<float>(n);
  float* m = DeviceZeros<float>(n);
  float* v = DeviceZeros<float>(n);
  uint16_t* copy = DeviceZeros<uint16_t>(n);
  // The anchor copies as many bytes as the step moves, half read and half written.
  const size_t copy_bytes = n * 30 / 2;
  char* src = DeviceZeros<char>(copy_bytes);
  char* dst = DeviceZeros<char>(copy_bytes);

  std::vector<kc::AdamWTensor> list;
  const int64_t per = params / tensors;
  for (int t = 0; t < tensors; ++t) {
    const int64_t offset = t * per;
    kc::AdamWTensor x;
    x.param = param + offset;
    x.grad = grad + offset;
    x.m = m + offset;
    x.v = v + offset;
    x.copy = copy + offset;
    x.n = t + 1 == tensors ? params - offset : per;
    x.weight_decay = t % 2 == 0 ? 0.1f : 0.0f;
    list.push_back(x);
  }
  kc::AdamWStepParams p;
  hoist::CudaEvent start = Value(hoist::CudaEvent::Create(hoist::EventTiming::kEnabled));
  hoist::CudaEvent end = Value(hoist::CudaEvent::Create(hoist::EventTiming::kEnabled));
  auto time_ms = [&](auto&& fn) {
    Check(start.Record(stream));
    fn();
    Check(end.Record(stream));
    Check(end.Synchronize());
    return static_cast<double>(Value(hoist::CudaEvent::ElapsedMs(start, end)));
  };
  std::vector<double> copy_ms, step_ms;
  for (int r = 0; r < reps + 2; ++r) {
    const double c = time_ms([&] {
      CHECK_CUDA(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, stream.get()));
    });
    p.step = r + 1;
    const double s = time_ms([&] {
      Check(kc::AdamWMultiTensor(list, DType::kFloat32, DType::kBFloat16, p, stream.get()));
    });
    if (r >= 2) {  // the first two warm up
      copy_ms.push_back(c);
      step_ms.push_back(s);
    }
  }
  const double copy_gbs = 2.0 * copy_bytes / (Median(copy_ms) * 1e-3) / 1e9;
  const double step_gbs = 30.0 * n / (Median(step_ms) * 1e-3) / 1e9;
  std::printf("params %lld in %d tensors, %d reps (medians)\n", static_cast<long long>(params),
              tensors, reps);
  std::printf("%-38s %10s %10s\n", "", "ms", "GB/s");
  std::printf("%-38s %10.3f %10.1f\n", "device-to-device copy (anchor)", Median(copy_ms), copy_gbs);
  std::printf("%-38s %10.3f %10.1f\n", "fused AdamW, fp32 grad, bf16 copy", Median(step_ms),
              step_gbs);
  std::printf("AdamW bytes/s over copy bytes/s: %.3f (aim: above 0.8)\n", step_gbs / copy_gbs);
  cudaFree(param);
  cudaFree(grad);
  cudaFree(m);
  cudaFree(v);
  cudaFree(copy);
  cudaFree(src);
  cudaFree(dst);
  return 0;
}

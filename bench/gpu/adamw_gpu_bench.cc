// The fused multi-tensor AdamW of kernels/cuda/adamw.h against the GPU's copy bandwidth.
//
// Per parameter the step reads param, grad, m and v (16 bytes with fp32 gradients) and writes
// param, m, v and the bf16 copy (14 bytes): 30 bytes. The anchor, timed in the same run on the
// same stream, is cudaMemcpyAsync of a large device buffer to another (read + write bytes). The
// figure is the step's bytes/s over the copy's; the aim is above 0.8. Runs alternate (copy, step,
// copy, step, ...) and medians are printed, since the machine may be shared.
//
// The tensors are GPT-2 124M's (148, back to back in flat buffers as the model lays them out,
// every one starting on a 16-byte boundary), filled with random values, never zeros. With
// --tensors K the same buffers are cut into K equal tensors instead, which start wherever
// params / K puts them (odd sizes: between 16-byte boundaries).
//
//   adamw_gpu_bench [--tensors K [--params N]] [--reps R]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
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

// n elements of T in device memory, uniform in [lo, hi) (T float) or random bits; exits on
// failure. A block of at most 4M random elements is made on the host and repeated on the device
// (drawing gigabytes on the host would take longer than the bench).
template <typename T>
T* DeviceRandom(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  const size_t block = std::min<size_t>(n, size_t{1} << 22);
  std::vector<T> host(block);
  std::mt19937 rng(seed);
  if constexpr (std::is_same_v<T, float>) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (T& x : host) x = dist(rng);
  } else {
    for (T& x : host) x = static_cast<T>(rng());
  }
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  T* out = static_cast<T*>(p);
  CHECK_CUDA(cudaMemcpy(out, host.data(), block * sizeof(T), cudaMemcpyHostToDevice));
  for (size_t done = block; done < n;) {  // doubling copies of what is already there
    const size_t count = std::min(done, n - done);
    CHECK_CUDA(cudaMemcpy(out + done, out, count * sizeof(T), cudaMemcpyDeviceToDevice));
    done += count;
  }
  return out;
}

// GPT-2 124M's parameter tensors in the model's order (padded vocabulary 50304, 1024 positions).
std::vector<int64_t> Gpt2TensorSizes() {
  const int64_t C = 768, V = 50304, T = 1024, L = 12;
  std::vector<int64_t> sizes = {V * C, T * C};
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t n : {C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C}) {
      sizes.push_back(n);
    }
  }
  sizes.push_back(C);
  sizes.push_back(C);
  return sizes;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = Gpt2TensorSizes();
  int64_t params = 0;
  for (int64_t n : sizes) params += n;
  int tensors = 0;  // 0: GPT-2's tensors
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--params")) params = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tensors")) tensors = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  if (tensors > 0) {
    sizes.assign(static_cast<size_t>(tensors), params / tensors);
    sizes.back() += params % tensors;
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
  float* param = DeviceRandom<float>(n, 1, -0.1f, 0.1f);
  float* grad = DeviceRandom<float>(n, 2, -1e-2f, 1e-2f);
  float* m = DeviceRandom<float>(n, 3, -1e-3f, 1e-3f);
  float* v = DeviceRandom<float>(n, 4, 0.0f, 1e-5f);
  uint16_t* copy = DeviceRandom<uint16_t>(n, 5);
  // The anchor copies as many bytes as the step moves, half read and half written.
  const size_t copy_bytes = n * 30 / 2;
  char* src = DeviceRandom<char>(copy_bytes, 6);
  char* dst = DeviceRandom<char>(copy_bytes, 7);

  std::vector<kc::AdamWTensor> list;
  int64_t offset = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    kc::AdamWTensor x;
    x.param = param + offset;
    x.grad = grad + offset;
    x.m = m + offset;
    x.v = v + offset;
    x.copy = copy + offset;
    x.n = sizes[t];
    x.weight_decay = t % 2 == 0 ? 0.1f : 0.0f;
    list.push_back(x);
    offset += sizes[t];
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
  std::printf("params %lld in %zu tensors (%s), %d reps (medians)\n",
              static_cast<long long>(params), sizes.size(),
              tensors > 0 ? "equal split" : "GPT-2 124M's", reps);
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

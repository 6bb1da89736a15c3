// Throughput of the 8-bit AdamW CPU step (kernels/cpu/adamw8bit_step.h) against the 32-bit fused
// AdamW and against the memory-bandwidth bound of the bytes it moves, all in one run.
//
// Bytes per parameter: the 32-bit step reads param, grad, m, v and writes param, m, v (28 B);
// the 8-bit step reads param, grad and two code bytes and writes param and two code bytes, plus
// two absmaxes read and written per 256 parameters (16 + 16/256 B). The bound is those bytes at
// the machine's copy bandwidth, measured here by a parallel memcpy of a large buffer (read +
// write bytes per second; the faster of memcpy and a plain copy loop). A copy's write also
// reads the line it writes (write-allocate), so a kernel whose streams the caches and the
// prefetchers serve better can beat that bound: each kernel also gets an anchor with its own
// memory pattern and trivial math, the bound it could reach on this machine. Runs are interleaved
// and medians printed (shared, noisy machines).
//
//   OMP_NUM_THREADS=T adamw8bit_bench [--n PARAMS] [--reps N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/adamw8bit_step.h"
#include "kernels/cpu/adamw_step.h"
#include "kernels/cpu/blockwise_quant.h"

namespace {

using Clock = std::chrono::steady_clock;
using hoist::SimdLevel;
namespace cpu = hoist::kernels::cpu;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <typename T>
using Buffer = std::unique_ptr<T[], FreeDeleter>;

// n elements, 64-byte aligned, first touched by the thread team in a static schedule.
template <typename T>
Buffer<T> Filled(size_t n, T value) {
  const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
  T* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) {
    std::fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
    std::exit(1);
  }
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i) p[i] = value;
  return Buffer<T>(p);
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 50000000;
  int reps = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--n") {
      n = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: adamw8bit_bench [--n PARAMS] [--reps N]\n");
      return 2;
    }
  }
  const int threads = omp_get_max_threads();
  const size_t blocks = static_cast<size_t>(cpu::QuantBlocks(static_cast<int64_t>(n)));
  std::printf("adamw8bit_bench: %zu parameters, %d threads, SIMD %s, %d reps (medians)\n", n,
              threads, hoist::SimdLevelName(hoist::ActiveSimdLevel()), reps);

  // 32-bit state.
  Buffer<float> param = Filled(n, 0.5f), grad = Filled(n, 0.01f), m = Filled(n, 0.0f),
                v = Filled(n, 0.0f);
  // 8-bit state (its own param, so each step sees the same kind of values).
  Buffer<float> param8 = Filled(n, 0.5f);
  Buffer<uint8_t> qm = Filled<uint8_t>(n, cpu::QuantizeNearest(cpu::SignedDynamicMap(), 0.0f));
  Buffer<uint8_t> qv = Filled<uint8_t>(n, 0);
  Buffer<float> am = Filled(blocks, 0.0f), av = Filled(blocks, 0.0f);
  // The copy anchor: n floats to n floats.
  Buffer<float> src = Filled(n, 1.0f), dst = Filled(n, 0.0f);

  cpu::AdamWShard s32;
  s32.param = param.get();
  s32.m = m.get();
  s32.v = v.get();
  s32.grad = grad.get();
  s32.n = n;
  cpu::AdamW8bitShard s8;
  s8.param = param8.get();
  s8.m = qm.get();
  s8.v = qv.get();
  s8.absmax_m = am.get();
  s8.absmax_v = av.get();
  s8.grad = grad.get();
  s8.n = n;
  cpu::AdamWHyperparams h;
  h.lr = 1e-4f;
  h.weight_decay = 0.01f;

  std::vector<double> copy_s, anchor32_s, anchor8_s, adam32_s, adam8_s, adam8_scalar_s;
  for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up and is not counted
    h.step = rep + 1;
    auto t = Clock::now();
    const long long chunks = static_cast<long long>((n + 65535) / 65536);
#pragma omp parallel for schedule(static)
    for (long long c = 0; c < chunks; ++c) {
      const size_t begin = static_cast<size_t>(c) * 65536;
      std::memcpy(dst.get() + begin, src.get() + begin,
                  std::min<size_t>(65536, n - begin) * sizeof(float));
    }
    double copy = Seconds(t);
    // A plain vectorised copy loop too; the faster of the two is the bandwidth.
    t = Clock::now();
    float* __restrict d = dst.get();
    const float* __restrict in = src.get();
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < static_cast<long long>(n); ++i) d[i] = in[i];
    copy = std::min(copy, Seconds(t));
    // The anchors: each kernel's memory pattern with trivial math (what the step could reach
    // if it were bound by memory alone on this machine).
    t = Clock::now();
    {
      float *p = param.get(), *mm = m.get(), *vv = v.get();
      const float* g = grad.get();
#pragma omp parallel for simd schedule(static)
      for (long long i = 0; i < static_cast<long long>(n); ++i) {
        p[i] = p[i] + g[i];
        mm[i] = mm[i] + g[i];
        vv[i] = vv[i] + g[i];
      }
    }
    const double anchor32 = Seconds(t);
    t = Clock::now();
    {
      float* p = param8.get();
      const float* g = grad.get();
      uint8_t *cm = qm.get(), *cv = qv.get();
#pragma omp parallel for simd schedule(static)
      for (long long i = 0; i < static_cast<long long>(n); ++i) {
        p[i] = p[i] * 1.0f + 0.0f * g[i];
        cm[i] = static_cast<uint8_t>(cm[i] | 1u);
        cv[i] = static_cast<uint8_t>(cv[i] & 0xfeu);
      }
    }
    const double anchor8 = Seconds(t);
    t = Clock::now();
    cpu::AdamWFusedStep(s32, h);
    const double a32 = Seconds(t);
    t = Clock::now();
    cpu::AdamW8bitStep(s8, h);
    const double a8 = Seconds(t);
    t = Clock::now();
    cpu::AdamW8bitStepAt(SimdLevel::kScalar, s8, h);
    const double a8s = Seconds(t);
    if (rep == 0) continue;
    copy_s.push_back(copy);
    anchor32_s.push_back(anchor32);
    anchor8_s.push_back(anchor8);
    adam32_s.push_back(a32);
    adam8_s.push_back(a8);
    adam8_scalar_s.push_back(a8s);
  }
  const double copy_bw = 2.0 * static_cast<double>(n) * sizeof(float) / Median(copy_s);  // B/s
  const double bytes8 = 16.0 + 16.0 / 256.0;
  const double bytes32 = 28.0;
  const double mps32 = static_cast<double>(n) / Median(adam32_s) / 1e6;
  const double mps8 = static_cast<double>(n) / Median(adam8_s) / 1e6;
  const double mps8_scalar = static_cast<double>(n) / Median(adam8_scalar_s) / 1e6;
  const double bound8 = copy_bw / bytes8 / 1e6;
  const double bound32 = copy_bw / bytes32 / 1e6;
  std::printf("copy bandwidth (read+write): %.2f GB/s\n", copy_bw / 1e9);
  std::printf("%-34s %10s %12s %10s\n", "", "Mparams/s", "bound", "of bound");
  std::printf("%-34s %10.1f %12.1f %10.3f\n", "AdamW 32-bit fused (28 B/param)", mps32, bound32,
              mps32 / bound32);
  std::printf("%-34s %10.1f %12.1f %10.3f\n", "AdamW8bit (16.06 B/param)", mps8, bound8,
              mps8 / bound8);
  std::printf("%-34s %10.1f %12.1f %10.3f\n", "AdamW8bit scalar loop", mps8_scalar, bound8,
              mps8_scalar / bound8);
  const double anchor32_mps = static_cast<double>(n) / Median(anchor32_s) / 1e6;
  const double anchor8_mps = static_cast<double>(n) / Median(anchor8_s) / 1e6;
  std::printf("same-pattern anchors (trivial math): 32-bit %.1f Mparams/s, 8-bit %.1f Mparams/s\n",
              anchor32_mps, anchor8_mps);
  std::printf("of the anchor: AdamW 32-bit %.3f, AdamW8bit %.3f\n", mps32 / anchor32_mps,
              mps8 / anchor8_mps);
  std::printf("AdamW8bit / AdamW 32-bit: %.3f; SIMD / scalar 8-bit: %.2f\n", mps8 / mps32,
              mps8 / mps8_scalar);
  return 0;
}

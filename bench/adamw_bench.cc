// Throughput of the CPU optimizer step on a large offloaded shard, against the memory bound.
//
// AdamW streams 28 bytes per parameter (reads param, grad, m, v; writes param, m, v) and does
// ~15 flops on them, so on any CPU it is bound by memory bandwidth. The anchor is therefore a
// plain loop with exactly that memory pattern and trivial math, timed in the same run, and the
// figure is AdamW's Mparams/s over the anchor's (1.0 = at the bandwidth bound). The fused step
// that also writes the bf16 copy (30 bytes per parameter) has its own anchor that writes a
// 2-byte copy too. Runs are interleaved (anchor, step, anchor, step, ...) and medians printed,
// because machines are shared and noisy. torch's fused AdamW and DeepSpeed's DeepSpeedCPUAdam
// are run on the same size and thread count in a python3 child when importable; the child's
// medians are its own, divided by this run's anchor.
//
//   OMP_NUM_THREADS=T adamw_bench [--n PARAMS] [--reps N] [--python PATH]
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/cpu_features.h"
#include "core/device.h"
#include "kernels/cpu/adamw_step.h"

namespace {

using Clock = std::chrono::steady_clock;
using hoist::DType;
using hoist::kernels::cpu::AdamWFusedStep;
using hoist::kernels::cpu::AdamWHyperparams;
using hoist::kernels::cpu::AdamWShard;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <typename T>
using Buffer = std::unique_ptr<T[], FreeDeleter>;

// n elements, 64-byte aligned, first touched by the thread team in the same static schedule as
// the loops that use them, so pages sit near the threads that stream them.
template <typename T>
Buffer<T> AllocateFilled(size_t n, T value) {
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

// MemAvailable in bytes, 0 when unknown.
uint64_t AvailableMemoryBytes() {
  return static_cast<uint64_t>(hoist::HostMemAvailableBytes().value_or(0));
}

// The anchors: AdamW's memory pattern with math too cheap to matter. The scalings keep the
// values bounded over many repetitions (v stays >= 0) so the real step that follows on the same
// arrays sees ordinary numbers.
void BoundLoop(float* p, const float* g, float* m, float* v, size_t n) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i) {
    const float gi = g[i];
    const float mi = 0.5f * m[i] + gi;
    const float vi = 0.5f * v[i] + gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = 0.999f * p[i] - 1e-4f * mi;
  }
}

void BoundLoopWithCopy(float* p, const float* g, float* m, float* v, uint16_t* copy, size_t n) {
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < static_cast<long long>(n); ++i) {
    const float gi = g[i];
    const float mi = 0.5f * m[i] + gi;
    const float vi = 0.5f * v[i] + gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = 0.999f * p[i] - 1e-4f * mi;
    p[i] = pi;
    uint32_t bits;
    std::memcpy(&bits, &pi, sizeof bits);
    copy[i] = static_cast<uint16_t>(bits >> 16);
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Fn>
double Seconds(Fn fn) {
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The python3 child: prints "mparams_s X" or "missing <module>". Kept to what both libraries
// need: one fp32 parameter of n elements with a gradient, AdamW with weight decay.
constexpr const char* kPythonScript = R"PY(
import sys, time, statistics
which, n, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    import torch
except Exception:
    print("missing torch"); sys.exit(0)
torch.set_num_threads(threads)
p = torch.nn.Parameter(torch.rand(n) - 0.5)
p.grad = (torch.rand(n) - 0.5) * 1e-2
if which == "torch":
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, fused=True)
else:
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception:
        print("missing deepspeed"); sys.exit(0)
    opt = DeepSpeedCPUAdam([p], lr=1e-3, weight_decay=0.1, adamw_mode=True)
with torch.no_grad():
    opt.step()
    times = []
    for _ in range(reps):
        t = time.perf_counter(); opt.step(); times.append(time.perf_counter() - t)
print("mparams_s", n / statistics.median(times) / 1e6)
)PY";

// Runs the child and returns its stdout ("" when it could not be started).
std::string RunPython(const std::string& python, const char* which, size_t n, int threads,
                      int reps) {
  return hoist::bench::RunPythonScript(
      python, kPythonScript,
      {which, std::to_string(n), std::to_string(threads), std::to_string(reps)});
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = 100'000'000;
  int reps = 7;
  std::string python = "python3";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--n") && i + 1 < argc) {
      n = std::strtoull(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--python") && i + 1 < argc) {
      python = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--n PARAMS] [--reps N] [--python PATH]\n", argv[0]);
      return 2;
    }
  }
  // p, g, m, v in fp32 and the 2-byte copy; keep a quarter of what is available for the rest
  // of the machine (and for the python child, which allocates its own after these are freed).
  const uint64_t bytes_per_param = 4 * 4 + 2;
  const uint64_t available = AvailableMemoryBytes();
  if (available != 0 && n * bytes_per_param > available / 4 * 3) {
    const size_t fit = static_cast<size_t>(available / 4 * 3 / bytes_per_param);
    std::printf("NOTICE: %zu params need %.1f GB, %.1f GB available; scaled down to %zu params\n",
                n, n * bytes_per_param * 1e-9, available * 1e-9, fit);
    n = fit;
  }
  const int threads = omp_get_max_threads();
  std::printf("CPU: %s, SIMD %s, %d threads, %zu params (%.0f MB per fp32 array), %d reps\n",
              hoist::GetCpuFeatures().model_name.c_str(),
              hoist::SimdLevelName(hoist::ActiveSimdLevel()), threads, n, n * 4e-6, reps);

  double bound_s = 0, adamw_s = 0, bound_copy_s = 0, fused_s = 0;
  {
    Buffer<float> p = AllocateFilled(n, 0.25f), g = AllocateFilled(n, 1e-3f);
    Buffer<float> m = AllocateFilled(n, 0.0f), v = AllocateFilled(n, 0.0f);
    Buffer<uint16_t> copy = AllocateFilled<uint16_t>(n, 0);
    AdamWHyperparams h;
    h.weight_decay = 0.1f;
    AdamWShard shard;
    shard.param = p.get();
    shard.m = m.get();
    shard.v = v.get();
    shard.grad = g.get();
    shard.grad_format = DType::kFloat32;
    shard.n = n;
    AdamWShard fused = shard;
    fused.param_copy = copy.get();
    fused.copy_format = DType::kBFloat16;

    std::vector<double> bound, adamw, bound_copy, fused_copy;
    for (int r = -1; r < reps; ++r) {  // r = -1 warms up every variant
      const double b = Seconds([&] { BoundLoop(p.get(), g.get(), m.get(), v.get(), n); });
      const double a = Seconds([&] {
        AdamWFusedStep(shard, h);
        ++h.step;
      });
      const double bc =
          Seconds([&] { BoundLoopWithCopy(p.get(), g.get(), m.get(), v.get(), copy.get(), n); });
      const double f = Seconds([&] {
        AdamWFusedStep(fused, h);
        ++h.step;
      });
      if (r < 0) continue;
      bound.push_back(b);
      adamw.push_back(a);
      bound_copy.push_back(bc);
      fused_copy.push_back(f);
    }
    bound_s = Median(bound);
    adamw_s = Median(adamw);
    bound_copy_s = Median(bound_copy);
    fused_s = Median(fused_copy);
  }
  auto mps = [&](double s) { return n / s * 1e-6; };
  std::printf("anchor  bound loop (28 B/param)        %8.1f Mparams/s  %6.1f GB/s\n", mps(bound_s),
              n * 28.0 / bound_s * 1e-9);
  std::printf("hoist   AdamW fp32                     %8.1f Mparams/s  %5.3f of bound\n",
              mps(adamw_s), bound_s / adamw_s);
  std::printf("anchor  bound loop + 2 B copy (30 B)   %8.1f Mparams/s  %6.1f GB/s\n",
              mps(bound_copy_s), n * 30.0 / bound_copy_s * 1e-9);
  std::printf("hoist   AdamW fp32 + bf16 copy (fused) %8.1f Mparams/s  %5.3f of its bound\n",
              mps(fused_s), bound_copy_s / fused_s);

  const char* kMissing =
      "not installed (pip install torch deepspeed into a venv; see bench/ADAMW_NOTES.md)";
  for (const char* which : {"torch", "deepspeed"}) {
    const std::string out = RunPython(python, which, n, threads, reps);
    // DeepSpeed logs to stdout on import: the figure is on the line that starts with mparams_s.
    const size_t at = out.rfind("mparams_s ");
    double rate = 0;
    if (at != std::string::npos && (at == 0 || out[at - 1] == '\n') &&
        std::sscanf(out.c_str() + at, "mparams_s %lf", &rate) == 1 && rate > 0) {
      std::printf(
          "%-9s %s  %8.1f Mparams/s  %5.3f of bound\n", which,
          std::strcmp(which, "torch") ? "DeepSpeedCPUAdam        " : "AdamW(fused=True)       ",
          rate, rate / mps(bound_s));
    } else if (out.find("missing torch") != std::string::npos || out.empty()) {
      std::printf("torch: %s\n", kMissing);
      break;  // deepspeed needs torch too
    } else {
      std::printf("%s: %s\n", which, kMissing);
    }
  }
  return 0;
}

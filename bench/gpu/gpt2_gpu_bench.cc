// Training speed of GPT-2 on one GPU: hoist's training step (Gpt2Model on the ZeRO engine, stage 0,
// over the CUDA backend: what `hoist train --device cuda` runs) against the same model, batch and
// precision in PyTorch, eager and torch.compile, measured in the same run (a python3 child runs
// bench/gpu/torch_gpt2_bench.py right after hoist's steps, when torch imports).
//
// For each: tokens/s over timed training steps (forward, backward, AdamW) after warm-up, and MFU
// = tokens/s x (6N + 12 L C T) / peak, N the parameters without the position embedding (nanoGPT's
// count; the padded vocabulary's rows are in N: both models multiply by them), peak the card's
// dense bf16 rate (989 TFLOPS for H100 SXM and H200; --peak-tflops for another card). The batch
// is the largest power of two (from --max-batch down) whose step fits in hoist, unless --batch.
//
// --offload-ratio also times the same job (ZeRO stage 2, one rank) with the optimizer states in
// pinned host memory (ZeRO-Offload: gradients down, the CPU's AdamW, the weights up) against it
// without offload, in the same run, and prints the ratio of their step times.
//
//   gpt2_gpu_bench [--batch B] [--max-batch 64] [--seq 1024] [--steps 20] [--layers 12]
//                  [--dtype bf16|fp32] [--attention direct|tiled] [--peak-tflops P]
//                  [--python python3] [--no-torch] [--offload-ratio]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/staged_communicator.h"
#include "comm/thread_communicator.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/pinned_host_device.h"
#include "core/memory_tracker.h"
#include "kernels/cuda_backend.h"
#include "runtime/model/gpt2.h"
#include "zero/zero_engine.h"

namespace {

using hoist::DType;
using Clock = std::chrono::steady_clock;

struct Options {
  int batch = 0, max_batch = 64, seq = 1024, steps = 20, layers = 12;
  std::string dtype = "bf16", attention = "direct", python = "python3";
  double peak_tflops = 0;
  bool torch = true;
  bool offload_ratio = false;
};

double PeakTflops(const std::string& name) {
  // Dense bf16 tensor-core peaks (vendor data sheets; see shared/reference/peers.md section 7).
  if (name.find("H200") != std::string::npos) return 989;
  if (name.find("H100") != std::string::npos) {
    if (name.find("PCIe") != std::string::npos) return 756;
    if (name.find("NVL") != std::string::npos) return 835;
    return 989;
  }
  if (name.find("A100") != std::string::npos) return 312;
  return 0;
}

struct Measured {
  double tokens_per_s = 0;
  int64_t peak_bytes = 0;
  // With the optimizer on the host: the share of the gradient bytes that came down while the
  // backward ran, and the CPU's update per step.
  double down_during_backward = 0;
  double update_s_per_step = 0;
};

// One hoist run at batch B; an error (out of memory, say) comes back as a Status.
hoist::StatusOr<Measured> RunHoist(const hoist::runtime::ModelConfig& config, int B,
                                   const Options& o, DType type, int stage = 0,
                                   bool offload = false) {
  hoist::MemoryTracker tracker;
  HOIST_ASSIGN_OR_RETURN(auto backend, hoist::kernels::CudaBackend::Create(0, &tracker));
  HOIST_ASSIGN_OR_RETURN(auto pinned, hoist::PinnedHostDevice::Open(&tracker));
  HOIST_ASSIGN_OR_RETURN(auto group, hoist::comm::ThreadGroup::Create(1, 600.0));
  hoist::comm::StagedCommunicator comm(&group->comm(0), backend.get(), pinned.get());
  hoist::zero::ZeroOptions options;
  options.compute_type = type;
  options.adam.weight_decay = 0.1f;
  options.stage = stage;
  if (offload) options.offload_optimizer.place = hoist::Placement::kHost;
  const hoist::runtime::ParamLayout layout = hoist::runtime::ParamLayout::For(config);
  HOIST_ASSIGN_OR_RETURN(
      auto engine, hoist::zero::ZeroEngine::Create(layout.Units(), options, &comm, backend.get()));
  HOIST_ASSIGN_OR_RETURN(auto model, hoist::runtime::Gpt2Model::Create(
                                         config, B, o.seq, backend.get(), engine.get(), type));
  HOIST_RETURN_IF_ERROR(engine->Initialize(
      [&](int unit, float* out) { hoist::runtime::InitializeGpt2Unit(config, unit, 1, out); }));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, config.vocab_size - 1);
  std::vector<int32_t> inputs(static_cast<size_t>(B) * o.seq), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = token(rng);
    targets[i] = token(rng);
  }
  const hoist::Stream& stream = backend->compute_stream();
  auto step = [&]() -> hoist::Status {
    HOIST_RETURN_IF_ERROR(engine->ZeroGrads());
    // One micro-batch a step: its backward is the last, whose gradients the host optimizer
    // takes as they are reduced.
    engine->SetAccumulationBoundary(true);
    HOIST_RETURN_IF_ERROR(model->Forward(inputs.data(), targets.data(), B, o.seq, 1.0f).status());
    HOIST_RETURN_IF_ERROR(model->Backward());
    HOIST_RETURN_IF_ERROR(engine->status());
    HOIST_ASSIGN_OR_RETURN(hoist::zero::StepResult r, engine->Step(3e-4f, 1.0f, 1.0f));
    (void)r;
    return hoist::Status::Ok();
  };
  for (int i = 0; i < 3; ++i) HOIST_RETURN_IF_ERROR(step());
  HOIST_RETURN_IF_ERROR(stream.Synchronize());
  const hoist::zero::OffloadStats before = engine->offload_stats();
  const auto start = Clock::now();
  for (int i = 0; i < o.steps; ++i) HOIST_RETURN_IF_ERROR(step());
  HOIST_RETURN_IF_ERROR(stream.Synchronize());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Measured m;
  m.tokens_per_s = static_cast<double>(o.steps) * B * o.seq / seconds;
  m.peak_bytes = tracker.Snapshot().peak_total[int(hoist::Place::kDevice)];
  const hoist::zero::OffloadStats after = engine->offload_stats();
  const int64_t down = after.to_host_bytes - before.to_host_bytes;
  if (down > 0) {
    m.down_during_backward = static_cast<double>(after.to_host_during_backward_bytes -
                                                 before.to_host_during_backward_bytes) /
                             static_cast<double>(down);
  }
  m.update_s_per_step = (after.update_s - before.update_s) / o.steps;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--batch")
      o.batch = std::atoi(next().c_str());
    else if (a == "--max-batch")
      o.max_batch = std::atoi(next().c_str());
    else if (a == "--seq")
      o.seq = std::atoi(next().c_str());
    else if (a == "--steps")
      o.steps = std::atoi(next().c_str());
    else if (a == "--layers")
      o.layers = std::atoi(next().c_str());
    else if (a == "--dtype")
      o.dtype = next();
    else if (a == "--attention")
      o.attention = next();
    else if (a == "--peak-tflops")
      o.peak_tflops = std::atof(next().c_str());
    else if (a == "--python")
      o.python = next();
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--offload-ratio")
      o.offload_ratio = true;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (hoist::CudaDeviceCount() == 0) {
    std::printf("gpt2_gpu_bench: no CUDA GPU visible (driver %s); nothing measured\n",
                hoist::CudaDriverVersionString().c_str());
    return 0;
  }
  const std::string gpu = hoist::CudaDeviceName(0).ok() ? *hoist::CudaDeviceName(0) : "?";
  if (o.peak_tflops <= 0) o.peak_tflops = PeakTflops(gpu);
  hoist::runtime::ModelConfig config;  // GPT-2 124M
  config.n_layer = o.layers;
  config.seq_len = o.seq;
  config.attention = o.attention == "tiled" ? hoist::runtime::AttentionKind::kTiled
                                            : hoist::runtime::AttentionKind::kDirect;
  const DType type = o.dtype == "fp32" ? DType::kFloat32 : DType::kBFloat16;
  const auto layout = hoist::runtime::ParamLayout::For(config);
  const double n_params = static_cast<double>(layout.total - layout.sizes[hoist::runtime::kWpe]);
  const double flops_per_token =
      6.0 * n_params + 12.0 * config.n_layer * config.n_embd * static_cast<double>(o.seq);

  Measured hoist_run;
  int B = o.batch;
  for (int b = o.batch > 0 ? o.batch : o.max_batch; b >= 1; b /= 2) {
    auto run = RunHoist(config, b, o, type);
    if (run.ok()) {
      B = b;
      hoist_run = *run;
      break;
    }
    std::printf("batch %d: %s\n", b, run.status().ToString().c_str());
    if (o.batch > 0) return 1;
  }
  if (hoist_run.tokens_per_s == 0) return 1;
  std::printf(
      "GPU %s, peak %.0f TFLOPS; GPT-2 L=%d C=%d T=%d, %s, attention %s, batch %d, %d "
      "timed steps; %.1f MFLOP per token\n",
      gpu.c_str(), o.peak_tflops, config.n_layer, config.n_embd, o.seq, o.dtype.c_str(),
      o.attention.c_str(), B, o.steps, flops_per_token / 1e6);
  auto mfu = [&](double tps) { return tps * flops_per_token / (o.peak_tflops * 1e12); };
  std::printf("%-24s %12s %8s %10s\n", "", "tokens/s", "MFU", "vs hoist");
  std::printf("%-24s %12.0f %7.1f%% %10s   (device peak %.2f GiB)\n", "hoist",
              hoist_run.tokens_per_s, 100 * mfu(hoist_run.tokens_per_s), "1.000",
              static_cast<double>(hoist_run.peak_bytes) / (1 << 30));
  if (o.offload_ratio) {
    // Alternating, twice each: the machine's noise shows as the spread within a kind. The best
    // of each kind goes into the ratio.
    double resident = 0, offloaded = 0;
    for (int round = 0; round < 2; ++round) {
      for (const bool offload : {false, true}) {
        auto run = RunHoist(config, B, o, type, /*stage=*/2, offload);
        if (!run.ok()) {
          std::printf("stage 2%s: %s\n", offload ? ", optimizer on the host" : "",
                      run.status().ToString().c_str());
          return 1;
        }
        std::printf("%-24s %12.0f %7.1f%%   (device peak %.2f GiB",
                    offload ? "hoist stage 2, offload" : "hoist stage 2", run->tokens_per_s,
                    100 * mfu(run->tokens_per_s), static_cast<double>(run->peak_bytes) / (1 << 30));
        if (offload) {
          std::printf("; gradients down during backward %.0f%%, CPU update %.1f ms/step",
                      100 * run->down_during_backward, 1e3 * run->update_s_per_step);
        }
        std::printf(")\n");
        double& best = offload ? offloaded : resident;
        best = std::max(best, run->tokens_per_s);
      }
    }
    std::printf("ZeRO-Offload step time over the same job without offload: %.2fx\n",
                resident / offloaded);
  }
  if (!o.torch) return 0;
  const std::string script = std::string(HOIST_SOURCE_DIR) + "/bench/gpu/torch_gpt2_bench.py";
  const std::string command = o.python + " " + script + " --batch " + std::to_string(B) +
                              " --seq " + std::to_string(o.seq) + " --steps " +
                              std::to_string(o.steps) + " --layers " +
                              std::to_string(config.n_layer) + " --dtype " + o.dtype + " 2>&1";
  FILE* child = popen(command.c_str(), "r");
  if (child == nullptr) {
    std::printf("torch: could not start %s\n", command.c_str());
    return 0;
  }
  char line[512];
  while (std::fgets(line, sizeof(line), child) != nullptr) {
    char mode[64];
    double tps = 0;
    if (std::sscanf(line, "RESULT %63s %lf", mode, &tps) == 2) {
      std::printf("%-24s %12.0f %7.1f%% %10.3f\n", (std::string("torch ") + mode).c_str(), tps,
                  100 * mfu(tps), hoist_run.tokens_per_s / tps);
    } else {
      std::printf("  torch: %s", line);
    }
  }
  pclose(child);
  return 0;
}

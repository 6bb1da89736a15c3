// Training-step throughput on the CPU, against the BLAS it runs on.
//
// For GPT-2 124M (B=4, T=64) and a small model it measures tokens/s of the training step the
// trainer takes (runtime/train/trainer.cc): Gpt2Model computing through a zero::ZeroEngine as its
// ParamStore, ZeRO stage 0 on one rank (a comm::ThreadGroup of 1), the CPU backend, fp32. It
// prints the share of the step spent in matrix multiplies (the step's GEMMs replayed alone, with
// the same shapes and flags), and the model FLOP rate over the rate of a large square sgemm
// measured in the same run: the CPU "MFU". Machines are shared and noisy, so every figure comes
// with its anchor from this run.
//
// Each model's line is followed by its phases, as medians over the timed steps: forward and
// backward timed around the model's calls, and the gradient norm and AdamW as ZeroEngine::Step
// reports them (StepResult::reduce_s: finishing the gradient reduction, which one rank skips, and
// the global norm; StepResult::optimizer_s: AdamW with clipping over this rank's shard, the whole
// model in stage 0, and the gather of the updated weights, which stage 0 skips); the rest of the
// step is ZeroGrads.
//
//   train_step_bench [--steps N] [--only small|124m]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/cpu_features.h"
#include "core/random.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu_backend.h"
#include "runtime/model/gpt2.h"
#include "zero/zero_engine.h"

namespace {

using Clock = std::chrono::steady_clock;
using hoist::runtime::Gpt2Model;
using hoist::runtime::ModelConfig;
using hoist::runtime::ParamLayout;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median of `runs` timings of fn().
template <typename Fn>
double MedianSeconds(int runs, Fn fn) {
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    auto start = Clock::now();
    fn();
    times.push_back(Seconds(start, Clock::now()));
  }
  return Median(std::move(times));
}

std::vector<float> RandomVector(size_t n, uint64_t seed) {
  hoist::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Uniform() - 0.5);
  return v;
}

// FLOP/s of C(M,N) = A(M,K) B(K,N)^T in the layout the model uses (weights row-major (N,K)).
double SgemmRate(int M, int N, int K, int runs) {
  std::vector<float> a = RandomVector(size_t(M) * K, 1), b = RandomVector(size_t(N) * K, 2);
  std::vector<float> c(size_t(M) * N);
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K,
                0.0f, c.data(), N);
  };
  gemm();
  double s = MedianSeconds(runs, gemm);
  return 2.0 * M * N * K / s;
}

struct Gemm {
  int M, N, K;
  CBLAS_TRANSPOSE ta, tb;
};

// The GEMMs of one training step of the model (forward and backward), in the model's layout.
std::vector<Gemm> StepGemms(const ModelConfig& m, int B, int T) {
  const int N = B * T, C = m.n_embd, Vp = m.padded_vocab_size();
  std::vector<Gemm> gemms;
  auto linear = [&](int in, int out) {
    gemms.push_back({N, out, in, CblasNoTrans, CblasTrans});    // forward
    gemms.push_back({N, in, out, CblasNoTrans, CblasNoTrans});  // dinp = dout @ W
    gemms.push_back({out, in, N, CblasTrans, CblasNoTrans});    // dW = dout^T @ inp
  };
  for (int l = 0; l < m.n_layer; ++l) {
    linear(C, 3 * C);
    linear(C, C);
    linear(C, 4 * C);
    linear(4 * C, C);
  }
  linear(C, Vp);
  return gemms;
}

double ReplayGemms(const std::vector<Gemm>& gemms, int runs) {
  size_t max_elems = 0;
  for (const Gemm& g : gemms) {
    max_elems = std::max({max_elems, size_t(g.M) * g.K, size_t(g.K) * g.N, size_t(g.M) * g.N});
  }
  std::vector<float> a = RandomVector(max_elems, 3), b = RandomVector(max_elems, 4), c(max_elems);
  auto replay = [&] {
    for (const Gemm& g : gemms) {
      int lda = g.ta == CblasNoTrans ? g.K : g.M;
      int ldb = g.tb == CblasNoTrans ? g.N : g.K;
      cblas_sgemm(CblasRowMajor, g.ta, g.tb, g.M, g.N, g.K, 1.0f, a.data(), lda, b.data(), ldb,
                  1.0f, c.data(), g.N);
    }
  };
  replay();
  return MedianSeconds(runs, replay);
}

struct Measurement {
  const char* name;
  double params, step_s, gemm_s, tokens, flops;
  int B, T;
  // Phases of the step (medians): the model's passes, and what ZeroEngine::Step reports.
  double forward_s, backward_s, norm_s, adamw_s;
};

// Stops the bench with `status`'s message, naming what failed.
void CheckOk(const hoist::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "train_step_bench: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T ValueOrExit(hoist::StatusOr<T> value, const char* what) {
  CheckOk(value.status(), what);
  return std::move(value).value();
}

Measurement MeasureModel(const char* name, const ModelConfig& m, int B, int T, int steps) {
  hoist::CpuDevice device(hoist::Place::kDevice);
  hoist::kernels::CpuBackend backend(&device);
  auto group = ValueOrExit(hoist::comm::ThreadGroup::Create(1, 600.0), "one-rank group");
  // ZeroOptions' defaults: stage 0, fp32, and AdamW with runtime/config/config.h's defaults.
  const hoist::zero::ZeroOptions options;
  auto engine = ValueOrExit(hoist::zero::ZeroEngine::Create(ParamLayout::For(m).Units(), options,
                                                            &group->comm(0), &backend),
                            "ZeroEngine::Create");
  auto model = ValueOrExit(Gpt2Model::Create(m, B, T, &backend, engine.get()), "Gpt2Model::Create");
  CheckOk(engine->Initialize([&](int unit, float* out) { model->InitializeUnit(unit, 1337, out); }),
          "ZeroEngine::Initialize");

  hoist::Rng rng(7);
  std::vector<int32_t> inputs(size_t(B) * T), targets(size_t(B) * T);
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t(rng.NextU64() % uint64_t(m.vocab_size));
    targets[i] = int32_t(rng.NextU64() % uint64_t(m.vocab_size));
  }
  struct StepTimes {
    double step_s, forward_s, backward_s, norm_s, adamw_s;
  };
  auto step = [&] {
    const auto start = Clock::now();
    CheckOk(engine->ZeroGrads(), "ZeroEngine::ZeroGrads");
    const auto zeroed = Clock::now();
    CheckOk(model->Forward(inputs.data(), targets.data(), B, T, 1.0f).status(), "the forward pass");
    const auto forwarded = Clock::now();
    CheckOk(model->Backward(), "the backward pass");
    const auto backwarded = Clock::now();
    CheckOk(engine->status(), "the engine during the passes");
    const hoist::zero::StepResult result = ValueOrExit(
        engine->Step(1e-4f, /*loss_scale=*/1.0f, /*max_norm=*/1.0f), "ZeroEngine::Step");
    return StepTimes{Seconds(start, Clock::now()), Seconds(zeroed, forwarded),
                     Seconds(forwarded, backwarded), result.reduce_s, result.optimizer_s};
  };
  step();  // warm-up: first touch of every page
  std::vector<StepTimes> timed;
  for (int i = 0; i < steps; ++i) timed.push_back(step());
  auto median = [&](double StepTimes::*phase) {
    std::vector<double> v;
    for (const StepTimes& t : timed) v.push_back(t.*phase);
    return Median(std::move(v));
  };
  const double step_s = median(&StepTimes::step_s);
  const double gemm_s = ReplayGemms(StepGemms(m, B, T), steps);

  const double tokens = double(B) * T;
  const double params = double(model->num_parameters());
  // PaLM's count: 6 FLOPs per parameter per token, plus attention's 12 L C T per token. The
  // position embedding is a lookup, not a matmul, so its parameters are left out (as nanoGPT
  // does); wte is counted, since the tied LM head multiplies by it.
  const double matmul_params = params - double(model->layout().sizes[hoist::runtime::kWpe]);
  const double flops = tokens * (6.0 * matmul_params + 12.0 * m.n_layer * m.n_embd * T);
  return Measurement{name,
                     params,
                     step_s,
                     gemm_s,
                     tokens,
                     flops,
                     B,
                     T,
                     median(&StepTimes::forward_s),
                     median(&StepTimes::backward_s),
                     median(&StepTimes::norm_s),
                     median(&StepTimes::adamw_s)};
}

void Print(const Measurement& r, double anchor_flops) {
  const double model_rate = r.flops / r.step_s;
  std::printf(
      "%-10s params %11.0f  B=%d T=%d  step %8.1f ms  %9.0f tok/s  matmul share %5.1f%%  "
      "model %6.1f GFLOP/s  MFU(vs sgemm) %.3f\n",
      r.name, r.params, r.B, r.T, r.step_s * 1e3, r.tokens / r.step_s, 100.0 * r.gemm_s / r.step_s,
      model_rate * 1e-9, model_rate / anchor_flops);
  std::printf(
      "%-10s phases: forward %8.1f ms  backward %8.1f ms  gradient norm %6.1f ms  "
      "AdamW %6.1f ms  (of the step %5.1f%% %5.1f%% %5.1f%% %5.1f%%)\n",
      "", r.forward_s * 1e3, r.backward_s * 1e3, r.norm_s * 1e3, r.adamw_s * 1e3,
      100.0 * r.forward_s / r.step_s, 100.0 * r.backward_s / r.step_s, 100.0 * r.norm_s / r.step_s,
      100.0 * r.adamw_s / r.step_s);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  std::string only;
  const char* kUsage = "usage: train_step_bench [--steps N (>= 1)] [--only small|124m]\n";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (steps < 1 || (!only.empty() && only != "small" && only != "124m")) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::printf("CPU: %s, SIMD %s, BLAS: %s\n", hoist::GetCpuFeatures().model_name.c_str(),
              hoist::SimdLevelName(hoist::ActiveSimdLevel()),
              hoist::kernels::cpu::BlasDescription().c_str());
  // The anchor is taken as the better of two measurements, one now and one at the end, so a
  // burst of load from elsewhere flatters neither side; both are printed.
  const double anchor_start = SgemmRate(2048, 2048, 2048, 5);
  std::printf("anchor: sgemm 2048^3 %.1f GFLOP/s (at start)\n", anchor_start * 1e-9);
  struct Pending {
    const char* name;
    ModelConfig config;
    int B, T, steps;
  };
  std::vector<Pending> runs;
  if (only.empty() || only == "small") {
    ModelConfig small;
    small.n_layer = 4, small.n_head = 4, small.n_embd = 128, small.vocab_size = 256,
    small.seq_len = 128;
    runs.push_back({"small", small, 8, 128, steps * 4});
  }
  if (only.empty() || only == "124m") {
    ModelConfig gpt2;  // defaults are GPT-2 124M
    runs.push_back({"gpt2-124m", gpt2, 4, 64, steps});
  }
  std::vector<Measurement> results;
  for (const Pending& run : runs) {
    results.push_back(MeasureModel(run.name, run.config, run.B, run.T, run.steps));
  }
  const double anchor_end = SgemmRate(2048, 2048, 2048, 5);
  const double anchor = std::max(anchor_start, anchor_end);
  std::printf("anchor: sgemm 2048^3 %.1f GFLOP/s (at end); using %.1f\n", anchor_end * 1e-9,
              anchor * 1e-9);
  for (const Measurement& m : results) Print(m, anchor);
  return 0;
}

// bf16 against fp32 on the CPU, hoist next to PyTorch, in one run.
//
// For GPT-2 124M (B=4, T=64) and a small GPT (4 layers, 256 wide, 4 heads, vocabulary 8192,
// B=8, T=256) it times a training pass (gradients zeroed, forward with targets, backward; no
// optimizer step) four ways: hoist fp32, hoist bf16 (Gpt2Model in DType::kBFloat16 on the CPU
// backend: its matmuls and attention take the path kernels/cpu/gemm_bf16.h chose, printed
// first), PyTorch eager fp32 and PyTorch with bf16 autocast (transformers' GPT2LMHeadModel, eager
// attention, no dropout), with as many threads as OpenMP gives hoist. The four run interleaved,
// round after round, so that a machine's load drifts over all of them alike; each figure is the
// median over the rounds of each round's median pass. Compare the lines of one run, not runs with
// each other.
//
//   cpu_bf16_bench [--rounds R] [--steps S] [--only small|124m] [--python PATH]
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/cpu_features.h"
#include "core/device.h"
#include "core/random.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/gemm_bf16.h"
#include "runtime/model/gpt2.h"

namespace {

using Clock = std::chrono::steady_clock;
using hoist::runtime::Gpt2Model;
using hoist::runtime::ModelConfig;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The python3 child: prints "tokens_s X" or "missing <why>".
constexpr const char* kPythonScript = R"PY(
import sys, time, statistics
L, C, NH, V, B, T, threads, steps, bf16 = (int(a) for a in sys.argv[1:10])
try:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
except Exception as e:
    print("missing", e); sys.exit(0)
torch.set_num_threads(threads)
config = GPT2Config(vocab_size=V, n_positions=max(T, 1024), n_embd=C, n_layer=L, n_head=NH,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                    eos_token_id=0, attn_implementation="eager")
model = GPT2LMHeadModel(config).train()
g = torch.Generator().manual_seed(1)
x = torch.randint(0, V, (B, T), generator=g)
y = torch.randint(0, V, (B, T), generator=g)
def step():
    model.zero_grad(set_to_none=False)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(bf16)):
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V).float(), y.reshape(-1))
    loss.backward()
step()
times = []
for _ in range(steps):
    t = time.perf_counter(); step(); times.append(time.perf_counter() - t)
print("tokens_s", B * T / statistics.median(times))
)PY";

double RunPython(const std::string& python, const ModelConfig& m, int B, int T, int threads,
                 int steps, bool bf16, std::string* why) {
  const std::string out = hoist::bench::RunPythonScript(
      python, kPythonScript,
      {std::to_string(m.n_layer), std::to_string(m.n_embd), std::to_string(m.n_head),
       std::to_string(m.vocab_size), std::to_string(B), std::to_string(T), std::to_string(threads),
       std::to_string(steps), bf16 ? "1" : "0"});
  const size_t at = out.rfind("tokens_s ");
  double tokens_s = 0;
  if (at == std::string::npos || std::sscanf(out.c_str() + at, "tokens_s %lf", &tokens_s) != 1) {
    *why = out.empty() ? "python did not start" : out.substr(0, out.find('\n'));
    return 0;
  }
  return tokens_s;
}

struct HoistRun {
  std::unique_ptr<Gpt2Model> model;
  std::vector<int32_t> inputs, targets;
};

// Median tokens/s of `steps` passes (after one untimed pass).
double TimeHoist(HoistRun& run, int B, int T, int steps) {
  std::vector<double> times;
  for (int s = 0; s <= steps; ++s) {
    const auto start = Clock::now();
    HOIST_CHECK_OK(run.model->ZeroGradients());
    run.model->Forward(run.inputs.data(), run.targets.data(), B, T, 1.0f).value();
    HOIST_CHECK_OK(run.model->Backward());
    if (s > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return B * T / Median(times);
}

bool Bench(const char* name, const ModelConfig& m, int B, int T, int rounds, int steps,
           const std::string& python, hoist::CpuDevice* device) {
  const int threads = omp_get_max_threads();
  HoistRun runs[2];
  const hoist::DType types[2] = {hoist::DType::kFloat32, hoist::DType::kBFloat16};
  for (int i = 0; i < 2; ++i) {
    auto created = Gpt2Model::Create(m, B, T, device, nullptr, types[i]);
    if (!created.ok()) {
      std::fprintf(stderr, "cpu_bf16_bench: %s\n", created.status().ToString().c_str());
      return false;
    }
    runs[i].model = std::move(*created);
    HOIST_CHECK_OK(runs[i].model->InitializeWeights(1));
    hoist::Rng rng(3);
    for (int j = 0; j < B * T; ++j) {
      runs[i].inputs.push_back(static_cast<int32_t>(rng.NextU64() % uint64_t(m.vocab_size)));
      runs[i].targets.push_back(static_cast<int32_t>(rng.NextU64() % uint64_t(m.vocab_size)));
    }
  }
  std::vector<double> rate[4];
  std::string why;
  for (int r = 0; r < rounds; ++r) {
    rate[0].push_back(TimeHoist(runs[0], B, T, steps));
    rate[1].push_back(TimeHoist(runs[1], B, T, steps));
    for (int i = 0; i < 2; ++i) {
      const double t = RunPython(python, m, B, T, threads, steps, i == 1, &why);
      if (t > 0) rate[2 + i].push_back(t);
    }
  }
  const double h32 = Median(rate[0]), h16 = Median(rate[1]);
  std::printf("%s: B=%d T=%d, %d threads, %d rounds of %d passes (tokens/s, median of rounds)\n",
              name, B, T, threads, rounds, steps);
  std::printf(
      "  hoist   fp32            %9.0f\n  hoist   bf16            %9.0f   (%.2fx hoist fp32)\n",
      h32, h16, h16 / h32);
  if (rate[2].empty() || rate[3].empty()) {
    std::printf("  pytorch: not measured (%s); pass --python with torch and transformers\n",
                why.c_str());
    return true;
  }
  const double p32 = Median(rate[2]), p16 = Median(rate[3]);
  std::printf(
      "  pytorch fp32 (eager)    %9.0f\n  pytorch bf16 (autocast) %9.0f   (%.2fx pytorch fp32)\n",
      p32, p16, p16 / p32);
  std::printf("  ratio   hoist fp32 / pytorch fp32 %6.2f\n", h32 / p32);
  std::printf("  ratio   hoist bf16 / pytorch bf16 %6.2f\n", h16 / p16);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, steps = 3;
  std::string python = "python3", only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--python") && i + 1 < argc) {
      python = argv[++i];
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--rounds R] [--steps S] [--only small|124m] [--python PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  const hoist::kernels::cpu::GemmChoice& gemm = hoist::kernels::cpu::ActiveGemmPath();
  std::printf(
      "CPU: %s\nbf16 GEMM: %s: %s (ISA %s, %s; 256x768x768: bf16 %.0f, sgemm %.0f GFLOP/s)\n",
      hoist::GetCpuFeatures().model_name.c_str(), hoist::kernels::cpu::GemmPathName(gemm.path),
      gemm.reason.c_str(), gemm.isa.c_str(), gemm.library.c_str(), gemm.bf16_gflops,
      gemm.fp32_gflops);
  const hoist::kernels::cpu::AttentionChoice& attention =
      hoist::kernels::cpu::ActiveAttentionPath();
  std::printf("bf16 attention: %s: %s (B=2 T=256 4x64 forward+backward: bf16 %.2f, fp32 %.2f ms)\n",
              attention.bf16 ? "bf16 (oneDNN)" : "fp32 (BLAS sgemm)", attention.reason.c_str(),
              attention.bf16_ms, attention.fp32_ms);
  hoist::CpuDevice device(hoist::Place::kDevice);
  if (only.empty() || only == "small") {
    ModelConfig small;
    small.n_layer = 4, small.n_head = 4, small.n_embd = 256, small.vocab_size = 8192,
    small.seq_len = 256;
    if (!Bench("small GPT (4 layers, 256 wide, vocab 8192)", small, 8, 256, rounds, steps, python,
               &device)) {
      return 1;
    }
  }
  if (only.empty() || only == "124m") {
    ModelConfig gpt2;  // defaults are GPT-2 124M
    if (!Bench("GPT-2 124M", gpt2, 4, 64, rounds, steps, python, &device)) return 1;
  }
  return 0;
}

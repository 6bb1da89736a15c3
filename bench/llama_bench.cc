// Training-pass throughput of a small Llama on the CPU, next to the same model in PyTorch eager in
// the same run.
//
// The model: hidden 256, 4 layers, 8 query heads and 4 key/value heads (head 32), SwiGLU width
// 688, vocabulary 8000, Llama 3's rope scaling, an untied head; micro-batch B=4, T=128, fp32.
// hoist: DecoderModel on the CPU backend with its own flat store, Forward with targets and Backward
// (the gradients; no optimizer step, which adamw_bench measures). PyTorch: transformers'
// LlamaForCausalLM with eager attention, the same shapes, loss.backward(), as many threads as
// OpenMP gives hoist. Each figure is the median over the timed passes, after a warm-up pass.
// Machines are shared and noisy: compare the two lines of one run, not runs with each other. On a
// machine busier than its cores, OpenMP's spinning threads wait on descheduled ones: run with
// OMP_WAIT_POLICY=passive there (2 shared cores, load 3.7: 4128 tokens/s against PyTorch's 3103,
// where the default spinning gave 634).
//
// With --device cuda (a build with CUDA) both run on the GPU: hoist's DecoderModel on the CUDA
// backend (each pass ends with the stream synchronized) and PyTorch's model moved to "cuda" (each
// pass ends with torch.cuda.synchronize()); --batch and --seq set B and T (a GPU wants more work
// than the CPU's default 4 x 128).
//
//   llama_bench [--steps N] [--python PATH] [--device cpu|cuda] [--batch B] [--seq T]
//   (PATH: a python3 with torch and transformers)
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

#ifdef HOIST_LLAMA_BENCH_CUDA
#include "kernels/cuda_backend.h"
#endif

#include "bench/bench_util.h"
#include "core/cpu_features.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/random.h"
#include "runtime/model/decoder.h"

namespace {

using Clock = std::chrono::steady_clock;

hoist::runtime::ModelConfig BenchConfig(int T) {
  hoist::runtime::ModelConfig m;
  m.family = hoist::runtime::ModelFamily::kLlama;
  m.n_layer = 4;
  m.n_embd = 256;
  m.n_head = 8;
  m.n_kv_head = 4;
  m.intermediate_size = 688;
  m.vocab_size = 8000;
  m.seq_len = T;
  m.rope_theta = 500000.0;
  m.rope_scaling.llama3 = true;
  m.rope_scaling.original_max_position_embeddings = 64;
  m.rms_norm_eps = 1e-5f;
  return m;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The python3 child: prints "tokens_s X" or "missing <module>".
constexpr const char* kPythonScript = R"PY(
import sys, time, statistics
B, T, threads, steps = (int(a) for a in sys.argv[1:5])
device = sys.argv[5]
try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
except Exception as e:
    print("missing", e); sys.exit(0)
torch.set_num_threads(threads)
config = LlamaConfig(vocab_size=8000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                     num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=T,
                     rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64},
                     rms_norm_eps=1e-5, tie_word_embeddings=False, attn_implementation="eager")
if device == "cuda" and not torch.cuda.is_available():
    print("missing a CUDA device for torch"); sys.exit(0)
model = LlamaForCausalLM(config).train().to(device)
g = torch.Generator().manual_seed(1)
x = torch.randint(0, 8000, (B, T), generator=g).to(device)
y = torch.randint(0, 8000, (B, T), generator=g).to(device)
def step():
    model.zero_grad(set_to_none=False)
    logits = model(x).logits
    torch.nn.functional.cross_entropy(logits.reshape(-1, 8000), y.reshape(-1)).backward()
    if device == "cuda":
        torch.cuda.synchronize()
step()
times = []
for _ in range(steps):
    t = time.perf_counter(); step(); times.append(time.perf_counter() - t)
print("tokens_s", B * T / statistics.median(times))
)PY";

std::string RunPython(const std::string& python, int B, int T, int threads, int steps,
                      const std::string& device) {
  return hoist::bench::RunPythonScript(python, kPythonScript,
                                       {std::to_string(B), std::to_string(T),
                                        std::to_string(threads), std::to_string(steps), device});
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  int B = 4, T = 128;
  std::string python = "python3";
  std::string device_name = "cpu";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--python") && i + 1 < argc) {
      python = argv[++i];
    } else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) {
      device_name = argv[++i];
    } else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) {
      B = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--seq") && i + 1 < argc) {
      T = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: %s [--steps N] [--python PATH] [--device cpu|cuda] [--batch B] "
                   "[--seq T]\n",
                   argv[0]);
      return 2;
    }
  }
  if (device_name != "cpu" && device_name != "cuda") {
    std::fprintf(stderr, "--device: %s is neither cpu nor cuda\n", device_name.c_str());
    return 2;
  }
  const bool gpu = device_name == "cuda";
  const int threads = omp_get_max_threads();
  const hoist::runtime::ModelConfig config = BenchConfig(T);
  hoist::MemoryTracker tracker;
  hoist::CpuDevice device(hoist::Place::kDevice, &tracker);
  std::unique_ptr<hoist::kernels::Backend> backend;
  hoist::StatusOr<std::unique_ptr<hoist::runtime::DecoderModel>> created =
      hoist::InvalidArgumentError("--device cuda needs a build with CUDA");
  if (gpu) {
#ifdef HOIST_LLAMA_BENCH_CUDA
    auto cuda = hoist::kernels::CudaBackend::Create(0, &tracker);
    if (!cuda.ok()) {
      std::printf("llama_bench: no GPU (%s); nothing measured\n", cuda.status().ToString().c_str());
      return 0;
    }
    backend = std::move(cuda).value();
    created = hoist::runtime::DecoderModel::Create(config, B, T, backend.get());
#else
    std::printf("llama_bench: --device cuda needs a build with CUDA; nothing measured\n");
    return 0;
#endif
  } else {
    created = hoist::runtime::DecoderModel::Create(config, B, T, &device);
  }
  if (!created.ok()) {
    std::fprintf(stderr, "llama_bench: %s\n", created.status().ToString().c_str());
    return 1;
  }
  hoist::runtime::DecoderModel& model = **created;
  HOIST_CHECK_OK(model.InitializeWeights(1));
  std::printf("%s: %s; Llama %.1fM params, B=%d T=%d, fp32, %d timed passes\n", gpu ? "GPU" : "CPU",
              gpu ? "CUDA backend" : hoist::GetCpuFeatures().model_name.c_str(),
              model.num_parameters() * 1e-6, B, T, steps);
  if (!gpu) std::printf("%d threads\n", threads);
  hoist::Rng rng(3);
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T), targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<int32_t>(rng.NextU64() % 8000);
    targets[i] = static_cast<int32_t>(rng.NextU64() % 8000);
  }
  std::vector<double> times;
  for (int s = 0; s <= steps; ++s) {
    const auto start = Clock::now();
    HOIST_CHECK_OK(model.ZeroGradients());
    model.Forward(inputs.data(), targets.data(), B, T, 1.0f).value();
    HOIST_CHECK_OK(model.Backward());
    // The GPU's work is queued: the pass ends when its stream is done.
    if (backend != nullptr && !backend->compute_stream().Synchronize().ok()) {
      std::fprintf(stderr, "llama_bench: the GPU's stream failed\n");
      return 1;
    }
    if (s > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  const double hoist_tokens_s = double(B) * T / Median(times);
  std::printf("hoist    DecoderModel (%s backend)        %9.0f tokens/s\n", gpu ? "CUDA" : "CPU ",
              hoist_tokens_s);

  const std::string out = RunPython(python, B, T, threads, steps, device_name);
  const size_t at = out.rfind("tokens_s ");
  double torch_tokens_s = 0;
  if (at != std::string::npos && std::sscanf(out.c_str() + at, "tokens_s %lf", &torch_tokens_s) &&
      torch_tokens_s > 0) {
    std::printf("pytorch  LlamaForCausalLM (eager)         %9.0f tokens/s\n", torch_tokens_s);
    std::printf("ratio    hoist / pytorch                  %9.2f\n",
                hoist_tokens_s / torch_tokens_s);
  } else {
    std::printf("pytorch: not measured (%s); pass --python with torch and transformers installed\n",
                out.empty() ? "python did not start" : out.substr(0, out.find('\n')).c_str());
  }
  return 0;
}

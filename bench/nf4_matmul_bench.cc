// The 4-bit base's matmuls on the CPU backend: a weight held in NF4 multiplied a panel at a time
// (Backend::MatmulForwardNf4 / MatmulBackwardNf4, what the models call) against, in the same
// run, (anchor) the dense products of the weight already dequantized, and (whole) dequantizing
// the whole weight into a buffer first and then the dense products, as the 4-bit store did before
// its matmuls dequantized panel by panel. Per matrix of a Llama block, forward and the input
// gradient (the weight is frozen), in the compute type; medians of interleaved rounds, and the
// scratch each way holds: the workspace against the dequantized weight.
//
//   OMP_NUM_THREADS=T nf4_matmul_bench [--model llama-3.2-1b] [--tokens N] [--type bf16|fp32]
//                                      [--rounds R] [--panel-mb MB (default: the store's)]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/nf4.h"
#include "kernels/cpu_backend.h"
#include "kernels/nf4.h"

namespace {

using namespace hoist;  // NOLINT: a benchmark's main

struct MatrixShape {
  const char* name;
  int C, OC;  // in features, out features
};

// A Llama block's four products (q, k, v side by side; gate and up side by side).
std::vector<MatrixShape> LlamaBlock(const std::string& model) {
  if (model == "llama-3.2-1b") {
    return {{"qkv", 2048, 2048 + 2 * 512},
            {"o", 2048, 2048},
            {"gate_up", 2048, 2 * 8192},
            {"down", 8192, 2048}};
  }
  if (model == "llama-3.1-8b") {
    return {{"qkv", 4096, 4096 + 2 * 1024},
            {"o", 4096, 4096},
            {"gate_up", 4096, 2 * 14336},
            {"down", 14336, 4096}};
  }
  std::fprintf(stderr, "unknown --model %s (llama-3.2-1b, llama-3.1-8b)\n", model.c_str());
  std::exit(2);
}

bool Ok(const Status& status) {
  if (status.ok()) return true;
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "llama-3.2-1b", type_name = "bf16";
  int tokens = 512, rounds = 5;
  double panel_mb = 0;  // 0: nf4::WorkspaceBytes, what the store allocates
  bench::ParseFlags(
      argc, argv,
      {{"--model", [&](const std::string& v) { model = v; }},
       {"--tokens", [&](const std::string& v) { tokens = std::stoi(v); }},
       {"--type", [&](const std::string& v) { type_name = v; }},
       {"--rounds", [&](const std::string& v) { rounds = std::stoi(v); }},
       {"--panel-mb", [&](const std::string& v) { panel_mb = std::stod(v); }}},
      "nf4_matmul_bench [--model llama-3.2-1b|llama-3.1-8b] [--tokens N] [--type bf16|fp32] "
      "[--rounds R] [--panel-mb MB]");
  const DType type = type_name == "fp32" ? DType::kFloat32 : DType::kBFloat16;
  const int64_t e = static_cast<int64_t>(DTypeSize(type));
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  kernels::CpuBackend backend(&device);
  const Stream& s = backend.compute_stream();
  std::printf("nf4_matmul_bench: %s block, %d tokens, %s; bf16 matmuls: %s\n", model.c_str(),
              tokens, DTypeName(type),
              type == DType::kBFloat16
                  ? kernels::cpu::GemmPathName(kernels::cpu::ActiveGemmPath().path)
                  : "n/a");
  std::printf("%-8s %6s %6s | %10s %10s %10s | %7s %7s | %9s %9s\n", "matrix", "C", "OC",
              "anchor ms", "whole ms", "panel ms", "whole/a", "panel/a", "buffer MB", "panel MB");
  double total[3] = {0, 0, 0};
  for (const MatrixShape& m : LlamaBlock(model)) {
    const int N = tokens, C = m.C, OC = m.OC;
    const int64_t n = int64_t{OC} * C;
    // N(0, 0.02)-ish weights, quantized as the store quantizes them on import.
    const std::vector<float> w = bench::RandomVector(static_cast<size_t>(n), 1, -0.05f, 0.05f);
    std::vector<uint8_t> codes(static_cast<size_t>(kernels::nf4::CodeBytes(n)));
    std::vector<float> absmax(static_cast<size_t>(kernels::nf4::Blocks(n)));
    Ok(kernels::cpu::QuantizeNf4(w.data(), n, codes.data(), absmax.data()));
    kernels::nf4::Matrix matrix;
    matrix.codes = codes.data();
    matrix.absmax = absmax.data();
    std::vector<char> dense(static_cast<size_t>(n * e));
    Ok(backend.DequantizeNf4(dense.data(), type, codes.data(), absmax.data(), n, s));
    std::vector<char> buffer(dense.size());
    const int64_t workspace_bytes =
        panel_mb > 0 ? std::max(static_cast<int64_t>(panel_mb * 1e6), int64_t{4} * std::max(C, OC))
                     : kernels::nf4::WorkspaceBytes(n);
    std::vector<char> workspace(static_cast<size_t>(workspace_bytes));
    const auto filled = [&](size_t count, uint64_t seed) {
      const std::vector<float> x = bench::RandomVector(count, seed);
      std::vector<char> out(count * static_cast<size_t>(e));
      kernels::cpu::FromFloat(x.data(), out.data(), type, static_cast<int64_t>(count));
      return out;
    };
    const std::vector<char> inp = filled(size_t(N) * C, 2), dout = filled(size_t(N) * OC, 3);
    std::vector<char> out(size_t(N) * OC * static_cast<size_t>(e));
    std::vector<char> dinp(size_t(N) * C * static_cast<size_t>(e));
    const auto anchor = [&](const void* weight) {
      Ok(backend.MatmulForward(out.data(), inp.data(), weight, nullptr, N, C, OC, type, nullptr,
                               s));
      Ok(backend.MatmulBackward(dinp.data(), nullptr, nullptr, dout.data(), inp.data(), weight, N,
                                C, OC, type, s));
      Ok(s.Synchronize());
    };
    // The store dequantized a unit at each acquire: once for forward, once more for backward.
    const auto whole = [&] {
      Ok(backend.DequantizeNf4(buffer.data(), type, codes.data(), absmax.data(), n, s));
      Ok(backend.MatmulForward(out.data(), inp.data(), buffer.data(), nullptr, N, C, OC, type,
                               nullptr, s));
      Ok(backend.DequantizeNf4(buffer.data(), type, codes.data(), absmax.data(), n, s));
      Ok(backend.MatmulBackward(dinp.data(), nullptr, nullptr, dout.data(), inp.data(),
                                buffer.data(), N, C, OC, type, s));
      Ok(s.Synchronize());
    };
    const auto panel = [&] {
      Ok(backend.MatmulForwardNf4(out.data(), inp.data(), matrix, nullptr, N, C, OC, type,
                                  workspace.data(), workspace_bytes, s));
      Ok(backend.MatmulBackwardNf4(dinp.data(), dout.data(), matrix, N, C, OC, type,
                                   workspace.data(), workspace_bytes, s));
      Ok(s.Synchronize());
    };
    // Interleaved rounds, each way once per round after a warm-up of each.
    std::vector<double> times[3];
    anchor(dense.data());
    whole();
    panel();
    const auto seconds = [](const auto& fn) {
      const auto start = std::chrono::steady_clock::now();
      fn();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    for (int r = 0; r < rounds; ++r) {
      times[0].push_back(seconds([&] { anchor(dense.data()); }));
      times[1].push_back(seconds(whole));
      times[2].push_back(seconds(panel));
    }
    double median[3];
    for (int k = 0; k < 3; ++k) {
      std::sort(times[k].begin(), times[k].end());
      median[k] = times[k][times[k].size() / 2];
      total[k] += median[k];
    }
    std::printf("%-8s %6d %6d | %10.2f %10.2f %10.2f | %7.3f %7.3f | %9.1f %9.1f\n", m.name, C, OC,
                1e3 * median[0], 1e3 * median[1], 1e3 * median[2], median[1] / median[0],
                median[2] / median[0], double(n * e) / 1e6, double(workspace_bytes) / 1e6);
  }
  std::printf("%-8s %6s %6s | %10.2f %10.2f %10.2f | %7.3f %7.3f |\n", "block", "", "",
              1e3 * total[0], 1e3 * total[1], 1e3 * total[2], total[1] / total[0],
              total[2] / total[0]);
  return 0;
}

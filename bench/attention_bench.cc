// Tiled (memory-efficient) against direct causal attention on the CPU: forward + backward time
// and the bytes each keeps from forward for backward, at GPT-2 124M's head layout (C=768, NH=12)
// and growing T. The direct kernel is the anchor: the ratio column is tiled time / direct time,
// measured in the same run. Each op is the median of repeats.
//
// --bf16: instead, the direct attention of a bf16 run both ways, at the shapes of GPT-2 124M
// (B=4, T=64), the small GPT (B=8, T=256, 4 heads of 64) and a long sequence (B=1, T=1024): the
// fp32 path (bf16 q, k, v and gradients widened to fp32 copies, the fp32 kernel, the results
// rounded back, as CpuBackend's Wide views do) is the anchor of the bf16 kernels
// (kernels/cpu/attention_bf16.h); the ratio is fp32 time / bf16 time.
//
// --bf16-tiled: the same for the tiled attention of a bf16 run: the fp32 path (widened copies,
// the fp32 tiled kernel at its default tiles, results rounded back) is the anchor of the bf16
// tiled kernels (kernels/cpu/flash_attention_bf16.h), at their default tiles or --tiles.
//
//   attention_bench [--repeats N] [--batch B] [--tiles QxK] [--seq T[,T...]] [--bf16]
//                   [--bf16-tiled]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/cpu_features.h"
#include "core/random.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/flash_attention_bf16.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/ops.h"

namespace {

namespace ops = hoist::kernels::cpu;

using hoist::bench::MedianSeconds;
using hoist::bench::RandomVector;

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 3) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, units[u]);
  return buf;
}

void BenchSequence(int B, int T, int C, int NH, int repeats, const ops::TiledAttentionOptions& o) {
  const size_t N = size_t(B) * T;
  const auto qkv = RandomVector(N * 3 * C, 11, -2.0f, 2.0f);
  const auto dout = RandomVector(N * C, 12);
  std::vector<float> out(N * C), dqkv(N * 3 * C, 0.0f);
  double direct_fwd, direct_bwd, tiled_fwd, tiled_bwd;
  {
    std::vector<float> att(ops::DirectAttentionSavedFloats(B, T, NH));
    direct_fwd = MedianSeconds(
        repeats, [&] { ops::AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH); });
    direct_bwd = MedianSeconds(repeats, [&] {
      ops::AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    });
  }
  std::vector<float> lse(ops::TiledAttentionSavedFloats(B, T, NH));
  tiled_fwd = MedianSeconds(repeats, [&] {
    ops::AttentionForwardTiledWith(o, out.data(), lse.data(), qkv.data(), B, T, C, NH);
  });
  tiled_bwd = MedianSeconds(repeats, [&] {
    ops::AttentionBackwardTiledWith(o, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                    B, T, C, NH);
  });
  const double direct_saved = 4.0 * ops::DirectAttentionSavedFloats(B, T, NH);
  const double tiled_saved = 4.0 * ops::TiledAttentionSavedFloats(B, T, NH);
  const double workspace = 4.0 * ops::TiledAttentionWorkspaceFloats(o, T, C / NH);
  std::printf(
      "T=%-5d fwd %8.2f / %8.2f ms (%.2fx)  bwd %8.2f / %8.2f ms (%.2fx)  fwd+bwd %8.2f / %8.2f ms "
      "%.2fx\n",
      T, tiled_fwd * 1e3, direct_fwd * 1e3, tiled_fwd / direct_fwd, tiled_bwd * 1e3,
      direct_bwd * 1e3, tiled_bwd / direct_bwd, (tiled_fwd + tiled_bwd) * 1e3,
      (direct_fwd + direct_bwd) * 1e3, (tiled_fwd + tiled_bwd) / (direct_fwd + direct_bwd));
  std::printf(
      "        saved for backward: tiled %s (%.0f B/token), direct %s (%.0f B/token); tiled "
      "scratch %s per thread\n",
      Bytes(tiled_saved).c_str(), tiled_saved / N, Bytes(direct_saved).c_str(), direct_saved / N,
      Bytes(workspace).c_str());
}

std::vector<uint16_t> ToBf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  ops::CastFp32ToBf16(out.data(), x.data(), static_cast<int64_t>(x.size()));
  return out;
}

void BenchBf16(int B, int T, int NH, int hs, int repeats) {
  const int C = NH * hs;
  const size_t N = size_t(B) * T, n_qkv = N * 3 * C, n_out = N * C;
  const auto qkv = ToBf16(RandomVector(n_qkv, 11, -2.0f, 2.0f));
  const auto dout = ToBf16(RandomVector(n_out, 12));
  std::vector<uint16_t> out(n_out), dqkv(n_qkv, 0);
  std::vector<float> att(ops::DirectAttentionSavedFloats(B, T, NH));
  // The fp32 path's copies, allocated once (CpuBackend's come from a per-thread pool).
  std::vector<float> qkv32(n_qkv), out32(n_out), dqkv32(n_qkv), dout32(n_out);
  const double fp32_fwd = MedianSeconds(repeats, [&] {
    ops::CastBf16ToFp32(qkv32.data(), qkv.data(), n_qkv);
    std::fill(out32.begin(), out32.end(), 0.0f);
    ops::AttentionForward(out32.data(), att.data(), qkv32.data(), B, T, C, NH);
    ops::CastFp32ToBf16(out.data(), out32.data(), n_out);
  });
  const double fp32_bwd = MedianSeconds(repeats, [&] {
    ops::CastBf16ToFp32(dqkv32.data(), dqkv.data(), n_qkv);
    ops::CastBf16ToFp32(dout32.data(), dout.data(), n_out);
    ops::CastBf16ToFp32(qkv32.data(), qkv.data(), n_qkv);
    ops::AttentionBackward(dqkv32.data(), dout32.data(), qkv32.data(), att.data(), B, T, C, NH);
    ops::CastFp32ToBf16(dqkv.data(), dqkv32.data(), n_qkv);
  });
  std::fill(dqkv.begin(), dqkv.end(), 0);
  const double bf16_fwd = MedianSeconds(repeats, [&] {
    ops::AttentionForwardGqaBf16(out.data(), att.data(), qkv.data(), B, T, NH, NH, hs);
  });
  const double bf16_bwd = MedianSeconds(repeats, [&] {
    ops::AttentionBackwardGqaBf16(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NH,
                                  hs);
  });
  std::printf(
      "B=%-2d T=%-5d NH=%-2d hs=%-3d fwd %7.2f / %7.2f ms (%.2fx)  bwd %7.2f / %7.2f ms (%.2fx)  "
      "fwd+bwd %7.2f / %7.2f ms %.2fx\n",
      B, T, NH, hs, fp32_fwd * 1e3, bf16_fwd * 1e3, fp32_fwd / bf16_fwd, fp32_bwd * 1e3,
      bf16_bwd * 1e3, fp32_bwd / bf16_bwd, (fp32_fwd + fp32_bwd) * 1e3, (bf16_fwd + bf16_bwd) * 1e3,
      (fp32_fwd + fp32_bwd) / (bf16_fwd + bf16_bwd));
}

void BenchTiledBf16(int B, int T, int NH, int hs, int repeats,
                    const ops::TiledAttentionOptions& bf16_tiles) {
  const int C = NH * hs;
  const size_t N = size_t(B) * T, n_qkv = N * 3 * C, n_out = N * C;
  const auto qkv = ToBf16(RandomVector(n_qkv, 11, -2.0f, 2.0f));
  const auto dout = ToBf16(RandomVector(n_out, 12));
  std::vector<uint16_t> out(n_out), dqkv(n_qkv, 0);
  std::vector<float> lse(ops::TiledAttentionSavedFloats(B, T, NH));
  std::vector<float> qkv32(n_qkv), out32(n_out), dqkv32(n_qkv), dout32(n_out);
  const double fp32_fwd = MedianSeconds(repeats, [&] {
    ops::CastBf16ToFp32(qkv32.data(), qkv.data(), n_qkv);
    std::fill(out32.begin(), out32.end(), 0.0f);
    ops::AttentionForwardTiled(out32.data(), lse.data(), qkv32.data(), B, T, C, NH);
    ops::CastFp32ToBf16(out.data(), out32.data(), n_out);
  });
  const double fp32_bwd = MedianSeconds(repeats, [&] {
    ops::CastBf16ToFp32(dqkv32.data(), dqkv.data(), n_qkv);
    ops::CastBf16ToFp32(dout32.data(), dout.data(), n_out);
    ops::CastBf16ToFp32(qkv32.data(), qkv.data(), n_qkv);
    ops::CastBf16ToFp32(out32.data(), out.data(), n_out);
    ops::AttentionBackwardTiled(dqkv32.data(), dout32.data(), qkv32.data(), out32.data(),
                                lse.data(), B, T, C, NH);
    ops::CastFp32ToBf16(dqkv.data(), dqkv32.data(), n_qkv);
  });
  std::fill(dqkv.begin(), dqkv.end(), 0);
  const double bf16_fwd = MedianSeconds(repeats, [&] {
    ops::AttentionForwardTiledGqaBf16With(bf16_tiles, out.data(), lse.data(), qkv.data(), B, T, NH,
                                          NH, hs);
  });
  const double bf16_bwd = MedianSeconds(repeats, [&] {
    ops::AttentionBackwardTiledGqaBf16With(bf16_tiles, dqkv.data(), dout.data(), qkv.data(),
                                           out.data(), lse.data(), B, T, NH, NH, hs);
  });
  std::printf(
      "B=%-2d T=%-5d NH=%-2d hs=%-3d fwd %7.2f / %7.2f ms (%.2fx)  bwd %7.2f / %7.2f ms (%.2fx)  "
      "fwd+bwd %7.2f / %7.2f ms %.2fx\n",
      B, T, NH, hs, fp32_fwd * 1e3, bf16_fwd * 1e3, fp32_fwd / bf16_fwd, fp32_bwd * 1e3,
      bf16_bwd * 1e3, fp32_bwd / bf16_bwd, (fp32_fwd + fp32_bwd) * 1e3, (bf16_fwd + bf16_bwd) * 1e3,
      (fp32_fwd + fp32_bwd) / (bf16_fwd + bf16_bwd));
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 7, B = 1;
  bool bf16 = false, bf16_tiled = false, tiles_given = false;
  const int C = 768, NH = 12;
  std::vector<int> seqs = {256, 1024, 2048};
  ops::TiledAttentionOptions options = ops::DefaultTiledAttentionOptions(1024);
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) {
      B = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--tiles") && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%dx%d", &options.q_rows, &options.k_cols) == 2) {
      ++i;
      tiles_given = true;
    } else if (!std::strcmp(argv[i], "--bf16")) {
      bf16 = true;
    } else if (!std::strcmp(argv[i], "--bf16-tiled")) {
      bf16_tiled = true;
    } else if (!std::strcmp(argv[i], "--seq") && i + 1 < argc) {
      seqs.clear();
      for (char* p = argv[++i]; *p != '\0';) {
        seqs.push_back(std::max(1, static_cast<int>(std::strtol(p, &p, 10))));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--repeats N] [--batch B] [--tiles QxK] [--seq T[,T...]] [--bf16] "
                   "[--bf16-tiled]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf(
      "CPU: %s, SIMD %s, OpenMP threads %d, BLAS: %s\n", hoist::GetCpuFeatures().model_name.c_str(),
      hoist::SimdLevelName(hoist::ActiveSimdLevel()), omp_get_max_threads(), openblas_get_config());
  if (bf16_tiled) {
    if (!ops::Bf16GemmAvailable()) {
      std::printf("no bf16 attention here: %s\n", ops::DecideGemmPath().reason.c_str());
      return 0;
    }
    ops::TiledAttentionOptions bf16_tiles = ops::DefaultTiledAttentionBf16Options(1024);
    if (tiles_given) {
      bf16_tiles.q_rows = options.q_rows;
      bf16_tiles.k_cols = options.k_cols;
    }
    std::printf(
        "tiled causal attention of a bf16 run, bf16 tiles %dx%d; times fp32 path / bf16 kernels "
        "(fp32/bf16)\n",
        bf16_tiles.q_rows, bf16_tiles.k_cols);
    BenchTiledBf16(4, 64, 12, 64, repeats, bf16_tiles);
    BenchTiledBf16(8, 256, 4, 64, repeats, bf16_tiles);
    BenchTiledBf16(1, 1024, 12, 64, repeats, bf16_tiles);
    return 0;
  }
  if (bf16) {
    if (!ops::Bf16GemmAvailable()) {
      std::printf("no bf16 attention here: %s\n", ops::DecideGemmPath().reason.c_str());
      return 0;
    }
    std::printf("causal attention of a bf16 run, times fp32 path / bf16 kernels (fp32/bf16)\n");
    BenchBf16(4, 64, 12, 64, repeats);
    BenchBf16(8, 256, 4, 64, repeats);
    BenchBf16(1, 1024, 12, 64, repeats);
    const ops::AttentionChoice choice = ops::DecideAttentionPath();
    std::printf("a bf16 run here takes %s: %s (probe B=2 T=256 4x64: bf16 %.2f, fp32 %.2f ms)\n",
                choice.bf16 ? "bf16" : "fp32", choice.reason.c_str(), choice.bf16_ms,
                choice.fp32_ms);
    return 0;
  }
  std::printf("causal attention B=%d C=%d NH=%d, tiles %dx%d; times tiled / direct (ratio)\n", B, C,
              NH, options.q_rows, options.k_cols);
  for (int T : seqs) BenchSequence(B, T, C, NH, repeats, options);
  return 0;
}

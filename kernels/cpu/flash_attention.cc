#include "kernels/cpu/flash_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_kernels.h"

// Attention a tile at a time with an online softmax. A query tile walks the key tiles left to
// right keeping, per row, the largest score seen (max) and the sum of e^{score - max}; when the
// max grows, the sum and the partial output are rescaled by e^{max_old - max_new}, so after the
// last tile out = o / sum and lse = max + log(sum) with no T x T buffer anywhere. Backward
// recomputes each tile's probabilities as e^{score - lse} and forms the softmax gradient with
// delta = rowsum(dout * out), which equals sum_s P dP (out = P V, so dout . out = sum_s P (dout .
// v_s)).
//
// With a sliding window the walks skip the tiles outside every window: a query tile starts at the
// key tile holding its first row's first key, and a key tile stops at the last query tile whose
// rows' windows reach it, so a short window costs in proportion to its length, not to T. Inside
// a tile, the per-row mask starts where the row's window does.
//
// Tile products go through sgemm, as in attention.cc and for the same reason: the calls run
// inside the OpenMP team's parallel region, where OpenBLAS runs single-threaded, so each task is
// serial and its result does not depend on which thread runs it or how many there are. The
// per-element work of a tile (exps, masking, rescaling) is the per-ISA loop of
// vector_kernels.inc.

namespace hoist::kernels::cpu {
namespace {

// Tiles of 64 x 64 keep every per-tile buffer at 16 KiB (hs = 64), inside L1/L2 between the
// sgemm that writes it and the loop that reads it, while the products stay large enough for
// sgemm to run near its full rate. Short sequences take one tile per head.
constexpr int kQueryRows = 64;
constexpr int kKeyCols = 64;

// The tile sizes actually used at sequence length T: a tile never exceeds the sequence.
int QueryRows(const TiledAttentionOptions& o, int T) { return std::min(o.q_rows, T); }
int KeyCols(const TiledAttentionOptions& o, int T) { return std::min(o.k_cols, T); }

size_t ForwardWorkspaceFloats(int rows, int cols, int hs) {
  return static_cast<size_t>(rows) * cols + static_cast<size_t>(rows) * hs + 2 * size_t(rows);
}
size_t BackwardWorkspaceFloats(int rows, int cols, int T) {
  return 2 * static_cast<size_t>(rows) * cols + static_cast<size_t>(T);
}

// One scratch buffer per thread, shared by forward and backward. It grows to the largest size
// seen and is kept, so the steady state allocates nothing.
float* ThreadScratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

void CheckTiles(const TiledAttentionOptions& tiles) {
  HOIST_CHECK(tiles.q_rows >= 1 && tiles.k_cols >= 1)
      << "tile " << tiles.q_rows << " x " << tiles.k_cols;
  HOIST_CHECK(SimdLevelAvailable(tiles.level))
      << "SIMD level " << SimdLevelName(tiles.level) << " is not supported by this CPU";
}

// One past the last query that sees key `key`: key + window with a window (the queries
// [key, key + window) hold it in theirs), else T.
int QueriesSeeingKeyEnd(int key, int window, int T) {
  return window > 0 ? static_cast<int>(std::min<int64_t>(T, int64_t{key} + window)) : T;
}

}  // namespace

TiledAttentionOptions DefaultTiledAttentionOptions(int /*T*/) {
  TiledAttentionOptions options;
  options.q_rows = kQueryRows;
  options.k_cols = kKeyCols;
  options.level = ActiveSimdLevel();
  return options;
}

size_t TiledAttentionSavedFloats(int B, int T, int NH) { return static_cast<size_t>(B) * NH * T; }

size_t DirectAttentionSavedFloats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T * T;
}

size_t TiledAttentionWorkspaceFloats(const TiledAttentionOptions& options, int T, int hs) {
  const int rows = QueryRows(options, T), cols = KeyCols(options, T);
  return std::max(ForwardWorkspaceFloats(rows, cols, hs), BackwardWorkspaceFloats(rows, cols, T));
}

void AttentionForwardTiledGqaWith(const TiledAttentionOptions& tiles, float* out, float* lse,
                                  const float* qkv, int B, int T, int NH, int NKV, int hs,
                                  const AttentionOptions& options) {
  CheckTiles(tiles);
  const int C = NH * hs;               // out's row width
  const int C3 = (NH + 2 * NKV) * hs;  // qkv's row width
  const int group = NH / NKV;          // query heads per key/value head
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int q_rows = QueryRows(tiles, T);
  const int k_cols = KeyCols(tiles, T);
  const int num_q_tiles = (T + q_rows - 1) / q_rows;
  const auto online_softmax_tile = VectorKernelsFor(tiles.level).online_softmax_tile;
  const size_t workspace = ForwardWorkspaceFloats(q_rows, k_cols, hs);
#pragma omp parallel
  {
    float* s = ThreadScratch(workspace);  // (q_rows, k_cols) scores, then e^{s - max}
    float* o = s + static_cast<size_t>(q_rows) * k_cols;    // (q_rows, hs) unnormalised output
    float* row_max = o + static_cast<size_t>(q_rows) * hs;  // (q_rows)
    float* row_sum = row_max + q_rows;                      // (q_rows)
    // A task is a query tile of one (b, h): it writes only its own rows of out and lse. Later
    // tiles see more keys, so tasks are handed out dynamically, as in attention.cc.
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int tile = 0; tile < num_q_tiles; ++tile) {
          const int t0 = tile * q_rows;
          const int t1 = std::min(T, t0 + q_rows);
          const int rows = t1 - t0;
          const float* q = qkv + (static_cast<size_t>(b) * T + t0) * C3 + h * hs;  // (rows, hs)
          const float* k = qkv + static_cast<size_t>(b) * T * C3 + C + h / group * hs;  // (T, hs)
          const float* v = k + NKV * hs;                                                // (T, hs)
          std::fill(o, o + static_cast<size_t>(rows) * hs, 0.0f);
          std::fill(row_max, row_max + rows, -std::numeric_limits<float>::infinity());
          std::fill(row_sum, row_sum + rows, 0.0f);
          // Keys at or after t1 are masked for every row of the tile, and so are the key tiles
          // before the one holding row t0's first key: the walk covers the tiles between.
          const int first_tile = AttentionWindowStart(t0, window) / k_cols * k_cols;
          for (int s0 = first_tile; s0 < t1; s0 += k_cols) {
            const int cols = std::min(t1, s0 + k_cols) - s0;
            const float* k_tile = k + static_cast<size_t>(s0) * C3;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, q, C3,
                        k_tile, C3, 0.0f, s, k_cols);
            online_softmax_tile(s, k_cols, rows, cols, t0 - s0 + 1, window, softcap, row_max,
                                row_sum, o, hs);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, s, k_cols,
                        v + static_cast<size_t>(s0) * C3, C3, 1.0f, o, hs);
          }
          float* out_tile = out + (static_cast<size_t>(b) * T + t0) * C + h * hs;  // (rows, hs)
          float* lse_tile = lse + (static_cast<size_t>(b) * NH + h) * T + t0;      // (rows)
          for (int r = 0; r < rows; ++r) {
            // Every row sees at least its own key, so its sum is >= 1 (the max term is e^0).
            const float inv_sum = 1.0f / row_sum[r];
            const float* o_row = o + static_cast<size_t>(r) * hs;
            float* out_row = out_tile + static_cast<size_t>(r) * C;
            for (int i = 0; i < hs; ++i) out_row[i] = o_row[i] * inv_sum;
            lse_tile[r] = row_max[r] + std::log(row_sum[r]);
          }
        }
      }
    }
  }
}

void AttentionBackwardTiledGqaWith(const TiledAttentionOptions& tiles, float* dqkv,
                                   const float* dout, const float* qkv, const float* out,
                                   const float* lse, int B, int T, int NH, int NKV, int hs,
                                   const AttentionOptions& options) {
  CheckTiles(tiles);
  const int C = NH * hs;
  const int C3 = (NH + 2 * NKV) * hs;
  const int group = NH / NKV;
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int q_rows = QueryRows(tiles, T);
  const int k_cols = KeyCols(tiles, T);
  const auto tile_backward = VectorKernelsFor(tiles.level).attention_tile_backward;
  const size_t workspace = BackwardWorkspaceFloats(q_rows, k_cols, T);
#pragma omp parallel
  {
    float* p = ThreadScratch(workspace);                       // (q_rows, k_cols) scores, then P
    float* ds = p + static_cast<size_t>(q_rows) * k_cols;      // (q_rows, k_cols) dP, then dscores
    float* delta = ds + static_cast<size_t>(q_rows) * k_cols;  // (T) rowsum(dout * out)
    // dq of a query receives contributions from every earlier key tile and dk, dv of a key from
    // every later query tile of every query head of its group, so a task is a whole (b, key/value
    // head): it owns its slices of dqkv and adds into them in a fixed order (the group's query
    // heads in turn; with NKV == NH, one head, the order of plain multi-head attention).
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b) {
      for (int kvh = 0; kvh < NKV; ++kvh) {
        const size_t kv_head = static_cast<size_t>(b) * T * C3 + C + kvh * hs;
        const float* k = qkv + kv_head;  // (T, hs), row stride C3, as q, v, dq, dk, dv
        const float* v = k + NKV * hs;
        float* dk = dqkv + kv_head;
        float* dv = dk + NKV * hs;
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          const size_t head = static_cast<size_t>(b) * T * C3 + h * hs;
          const float* q = qkv + head;
          float* dq = dqkv + head;
          const size_t head_out = static_cast<size_t>(b) * T * C + h * hs;
          const float* d_head = dout + head_out;  // (T, hs), row stride C, as o_head
          const float* o_head = out + head_out;
          const float* lse_head = lse + (static_cast<size_t>(b) * NH + h) * T;  // (T)
          for (int t = 0; t < T; ++t) {
            const float* d_row = d_head + static_cast<size_t>(t) * C;
            const float* o_row = o_head + static_cast<size_t>(t) * C;
            float dot = 0.0f;
            for (int i = 0; i < hs; ++i) dot += d_row[i] * o_row[i];
            delta[t] = dot;
          }
          for (int s0 = 0; s0 < T; s0 += k_cols) {
            const int cols = std::min(T, s0 + k_cols) - s0;
            const float* k_tile = k + static_cast<size_t>(s0) * C3;  // (cols, hs)
            const float* v_tile = v + static_cast<size_t>(s0) * C3;
            float* dk_tile = dk + static_cast<size_t>(s0) * C3;
            float* dv_tile = dv + static_cast<size_t>(s0) * C3;
            // Queries before s0 see none of these keys, nor, with a window, those past the last
            // query that sees the tile's last key: walk the query tiles between.
            const int t_end = QueriesSeeingKeyEnd(s0 + cols - 1, window, T);
            for (int t0 = s0 / q_rows * q_rows; t0 < t_end; t0 += q_rows) {
              const int rows = std::min(T, t0 + q_rows) - t0;
              const float* q_tile = q + static_cast<size_t>(t0) * C3;  // (rows, hs)
              const float* d_tile = d_head + static_cast<size_t>(t0) * C;
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, q_tile,
                          C3, k_tile, C3, 0.0f, p, k_cols);
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0f, d_tile, C,
                          v_tile, C3, 0.0f, ds, k_cols);
              tile_backward(p, ds, k_cols, rows, cols, t0 - s0 + 1, window, softcap, lse_head + t0,
                            delta + t0, scale);
              // out = P V: dV += P^T dout. scores = scale Q K^T (scale already in ds):
              // dQ += dS K and dK += dS^T Q.
              cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, p, k_cols,
                          d_tile, C, 1.0f, dv_tile, C3);
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, ds,
                          k_cols, k_tile, C3, 1.0f, dq + static_cast<size_t>(t0) * C3, C3);
              cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, ds, k_cols,
                          q_tile, C3, 1.0f, dk_tile, C3);
            }
          }
        }
      }
    }
  }
}

void AttentionForwardTiledWith(const TiledAttentionOptions& tiles, float* out, float* lse,
                               const float* qkv, int B, int T, int C, int NH) {
  AttentionForwardTiledGqaWith(tiles, out, lse, qkv, B, T, NH, NH, C / NH);
}

void AttentionBackwardTiledWith(const TiledAttentionOptions& tiles, float* dqkv, const float* dout,
                                const float* qkv, const float* out, const float* lse, int B, int T,
                                int C, int NH) {
  AttentionBackwardTiledGqaWith(tiles, dqkv, dout, qkv, out, lse, B, T, NH, NH, C / NH);
}

void AttentionForwardTiledGqa(float* out, float* lse, const float* qkv, int B, int T, int NH,
                              int NKV, int hd, const AttentionOptions& options) {
  AttentionForwardTiledGqaWith(DefaultTiledAttentionOptions(T), out, lse, qkv, B, T, NH, NKV, hd,
                               options);
}

void AttentionBackwardTiledGqa(float* dqkv, const float* dout, const float* qkv, const float* out,
                               const float* lse, int B, int T, int NH, int NKV, int hd,
                               const AttentionOptions& options) {
  AttentionBackwardTiledGqaWith(DefaultTiledAttentionOptions(T), dqkv, dout, qkv, out, lse, B, T,
                                NH, NKV, hd, options);
}

void AttentionForwardTiled(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  AttentionForwardTiledWith(DefaultTiledAttentionOptions(T), out, lse, qkv, B, T, C, NH);
}

void AttentionBackwardTiled(float* dqkv, const float* dout, const float* qkv, const float* out,
                            const float* lse, int B, int T, int C, int NH) {
  AttentionBackwardTiledWith(DefaultTiledAttentionOptions(T), dqkv, dout, qkv, out, lse, B, T, C,
                             NH);
}

}  // namespace hoist::kernels::cpu

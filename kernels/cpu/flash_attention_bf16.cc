#include "kernels/cpu/flash_attention_bf16.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/bf16_rows.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/vector_kernels.h"

// The walk is flash_attention.cc's, task for task, with its sliding-window skips: forward, a
// query tile of one (b, head) walking its key tiles left to right with an online softmax;
// backward, a whole (b, key/value head) walking its query heads, and in each the key tiles and
// the query tiles that see them. The per-element work of a tile is the same per-ISA loop as the
// fp32 kernel's; only the products change, each a oneDNN call on the task's thread alone
// (gemm_bf16.h), so a task's result does not depend on which thread runs it or how many there
// are.
//
// As in attention_bf16.cc, oneDNN takes its AMX kernel only for dense operands, so every operand
// is a dense copy: forward, the query tile and each key tile's k and v rows; backward, the head's
// q, k, v and dout, (T, hd) each, copied once per task and read by every tile. Scores and
// probabilities are dense tiles (row stride = the tile's columns), also on a partial last tile.

namespace hoist::kernels::cpu {
namespace {

// Tiles larger than the fp32 kernel's 64 x 64: each oneDNN call costs about a microsecond besides
// its work and the AMX products run faster the larger they are. Measured on Sapphire Rapids
// (bench/attention_bench --bf16-tiled --tiles; bench/CPU_BF16_NOTES.md): 128 x 128 beat 64 x 64
// and, at T = 256, tiles of 256 rows or columns; at T = 1024 those were within the noise of it.
constexpr int kQueryRows = 128;
constexpr int kKeyCols = 128;

void CheckTiles(const TiledAttentionOptions& tiles) {
  HOIST_CHECK(tiles.q_rows >= 1 && tiles.k_cols >= 1)
      << "tile " << tiles.q_rows << " x " << tiles.k_cols;
  HOIST_CHECK(SimdLevelAvailable(tiles.level))
      << "SIMD level " << SimdLevelName(tiles.level) << " is not supported by this CPU";
}

// One past the last query that sees key `key`, as flash_attention.cc's.
int QueriesSeeingKeyEnd(int key, int window, int T) {
  return window > 0 ? static_cast<int>(std::min<int64_t>(T, int64_t{key} + window)) : T;
}

// A per-thread buffer of at least n elements, kept for the next call.
template <typename E>
E* ThreadScratch(std::vector<E>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// bf16 widens to fp32 exactly: its bits are fp32's upper half.
float Widen(uint16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }

}  // namespace

TiledAttentionOptions DefaultTiledAttentionBf16Options(int /*T*/) {
  TiledAttentionOptions options;
  options.q_rows = kQueryRows;
  options.k_cols = kKeyCols;
  options.level = ActiveSimdLevel();
  return options;
}

void AttentionForwardTiledGqaBf16With(const TiledAttentionOptions& tiles, uint16_t* out, float* lse,
                                      const uint16_t* qkv, int B, int T, int NH, int NKV, int hs,
                                      const AttentionOptions& options) {
  CheckTiles(tiles);
  const int64_t C = int64_t{NH} * hs;               // out's row width
  const int64_t C3 = (NH + 2 * int64_t{NKV}) * hs;  // qkv's row width
  const int group = NH / NKV;
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int q_rows = std::min(tiles.q_rows, T);
  const int k_cols = std::min(tiles.k_cols, T);
  const int num_q_tiles = (T + q_rows - 1) / q_rows;
  const auto online_softmax_tile = VectorKernelsFor(tiles.level).online_softmax_tile;
#pragma omp parallel
  {
    thread_local std::vector<float> f_scratch;
    thread_local std::vector<uint16_t> h_scratch;
    const size_t tile = static_cast<size_t>(q_rows) * k_cols;
    const size_t q_tile = static_cast<size_t>(q_rows) * hs;
    const size_t k_tile = static_cast<size_t>(k_cols) * hs;
    float* s = ThreadScratch(f_scratch, tile + q_tile + 2 * static_cast<size_t>(q_rows));
    float* o = s + tile;                // s: scores, then e^{s - max}, (rows, cols);
    float* row_max = o + q_tile;        // o: the unnormalised output, (rows, hs);
    float* row_sum = row_max + q_rows;  // the online softmax's max and sum, (rows)
    uint16_t* p16 = ThreadScratch(h_scratch, tile + 2 * k_tile + q_tile);
    uint16_t* k = p16 + tile;  // s rounded, (rows, cols); the key tile's k and v, (cols, hs);
    uint16_t* v = k + k_tile;  // the query tile's q, (rows, hs)
    uint16_t* q = v + k_tile;
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int qt = 0; qt < num_q_tiles; ++qt) {
          const int t0 = qt * q_rows;
          const int t1 = std::min(T, t0 + q_rows);
          const int rows = t1 - t0;
          const uint16_t* k_src = qkv + int64_t{b} * T * C3 + C + h / group * hs;  // (T, hs)
          const uint16_t* v_src = k_src + int64_t{NKV} * hs;
          CopyRows(q, hs, qkv + (int64_t{b} * T + t0) * C3 + h * hs, C3, rows, hs);
          std::fill(o, o + static_cast<size_t>(rows) * hs, 0.0f);
          std::fill(row_max, row_max + rows, -std::numeric_limits<float>::infinity());
          std::fill(row_sum, row_sum + rows, 0.0f);
          // From the key tile holding row t0's first key, as in flash_attention.cc.
          const int first_tile = AttentionWindowStart(t0, window) / k_cols * k_cols;
          for (int s0 = first_tile; s0 < t1; s0 += k_cols) {
            const int cols = std::min(t1, s0 + k_cols) - s0;
            CopyRows(k, hs, k_src + s0 * C3, C3, cols, hs);
            CopyRows(v, hs, v_src + s0 * C3, C3, cols, hs);
            // K^T (hs, cols) is K read down its rows.
            GemmBf16({rows, cols, hs, hs, 1, 1, hs, cols, false, false, scale}, q, k, s);
            online_softmax_tile(s, cols, rows, cols, t0 - s0 + 1, window, softcap, row_max, row_sum,
                                o, hs);
            RoundRows(p16, cols, s, cols, rows, cols);
            GemmBf16({rows, hs, cols, cols, 1, hs, 1, hs, true}, p16, v, o);
          }
          float* lse_tile = lse + (int64_t{b} * NH + h) * T + t0;  // (rows)
          for (int r = 0; r < rows; ++r) {
            // Every row sees at least its own key, so its sum is >= 1 (the max term is e^0).
            const float inv_sum = 1.0f / row_sum[r];
            float* o_row = o + static_cast<size_t>(r) * hs;
            for (int i = 0; i < hs; ++i) o_row[i] *= inv_sum;
            lse_tile[r] = row_max[r] + std::log(row_sum[r]);
          }
          RoundRows(out + (int64_t{b} * T + t0) * C + h * hs, C, o, hs, rows, hs);
        }
      }
    }
  }
}

void AttentionBackwardTiledGqaBf16With(const TiledAttentionOptions& tiles, uint16_t* dqkv,
                                       const uint16_t* dout, const uint16_t* qkv,
                                       const uint16_t* out, const float* lse, int B, int T, int NH,
                                       int NKV, int hs, const AttentionOptions& options) {
  CheckTiles(tiles);
  const int64_t C = int64_t{NH} * hs;
  const int64_t C3 = (NH + 2 * int64_t{NKV}) * hs;
  const int group = NH / NKV;
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int q_rows = std::min(tiles.q_rows, T);
  const int k_cols = std::min(tiles.k_cols, T);
  const auto tile_backward = VectorKernelsFor(tiles.level).attention_tile_backward;
#pragma omp parallel
  {
    thread_local std::vector<float> f_scratch;
    thread_local std::vector<uint16_t> h_scratch;
    const size_t tile = static_cast<size_t>(q_rows) * k_cols;
    const size_t head = static_cast<size_t>(T) * hs;
    float* p = ThreadScratch(f_scratch, 2 * tile + 3 * head + T);
    float* ds = p + tile;        // scores, then P; dL/dP, then dL/dscores; (rows, cols) each
    float* dq32 = ds + tile;     // the fp32 sums of dq, dk and dv of a head, (T, hs) each
    float* dk32 = dq32 + head;   //
    float* dv32 = dk32 + head;   //
    float* delta = dv32 + head;  // rowsum(dout * out), (T)
    uint16_t* p16 = ThreadScratch(h_scratch, 2 * tile + 4 * head);
    uint16_t* ds16 = p16 + tile;  // P and dL/dscores of a tile in bf16, (rows, cols)
    uint16_t* q = ds16 + tile;    // a head's q, k, v and dout, dense, (T, hs) each
    uint16_t* k = q + head;
    uint16_t* v = k + head;
    uint16_t* d = v + head;
    // dq of a query receives contributions from every earlier key tile and dk, dv of a key from
    // every later query tile of every query head of its group, so a task is a whole (b, key/value
    // head) that owns its slices of dqkv, as in flash_attention.cc.
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b) {
      for (int kvh = 0; kvh < NKV; ++kvh) {
        const int64_t kv_head = int64_t{b} * T * C3 + C + kvh * hs;
        uint16_t* dk = dqkv + kv_head;
        uint16_t* dv = dk + int64_t{NKV} * hs;
        CopyRows(k, hs, qkv + kv_head, C3, T, hs);
        CopyRows(v, hs, qkv + kv_head + int64_t{NKV} * hs, C3, T, hs);
        WidenRows(dk32, hs, dk, C3, T, hs);
        WidenRows(dv32, hs, dv, C3, T, hs);
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          const int64_t q_head = int64_t{b} * T * C3 + h * hs;
          uint16_t* dq = dqkv + q_head;
          const int64_t head_out = int64_t{b} * T * C + h * hs;  // dout's and out's, stride C
          CopyRows(q, hs, qkv + q_head, C3, T, hs);
          CopyRows(d, hs, dout + head_out, C, T, hs);
          WidenRows(dq32, hs, dq, C3, T, hs);
          for (int t = 0; t < T; ++t) {
            const uint16_t* d_row = d + static_cast<size_t>(t) * hs;
            const uint16_t* o_row = out + head_out + t * C;
            float dot = 0.0f;
            for (int i = 0; i < hs; ++i) dot += Widen(d_row[i]) * Widen(o_row[i]);
            delta[t] = dot;
          }
          const float* lse_head = lse + (int64_t{b} * NH + h) * T;  // (T)
          for (int s0 = 0; s0 < T; s0 += k_cols) {
            const int cols = std::min(T, s0 + k_cols) - s0;
            const uint16_t* k_tile = k + static_cast<size_t>(s0) * hs;  // (cols, hs)
            const uint16_t* v_tile = v + static_cast<size_t>(s0) * hs;
            // The query tiles whose rows see these keys, as in flash_attention.cc.
            const int t_end = QueriesSeeingKeyEnd(s0 + cols - 1, window, T);
            for (int t0 = s0 / q_rows * q_rows; t0 < t_end; t0 += q_rows) {
              const int rows = std::min(T, t0 + q_rows) - t0;
              const uint16_t* q_tile = q + static_cast<size_t>(t0) * hs;  // (rows, hs)
              const uint16_t* d_tile = d + static_cast<size_t>(t0) * hs;
              GemmBf16({rows, cols, hs, hs, 1, 1, hs, cols, false, false, scale}, q_tile, k_tile,
                       p);
              GemmBf16({rows, cols, hs, hs, 1, 1, hs, cols}, d_tile, v_tile, ds);
              tile_backward(p, ds, cols, rows, cols, t0 - s0 + 1, window, softcap, lse_head + t0,
                            delta + t0, scale);
              RoundRows(p16, cols, p, cols, rows, cols);
              RoundRows(ds16, cols, ds, cols, rows, cols);
              // out = P V: dV += P^T dout. scores = scale Q K^T (scale already in dS):
              // dQ += dS K and dK += dS^T Q.
              GemmBf16({cols, hs, rows, 1, cols, hs, 1, hs, true}, p16, d_tile,
                       dv32 + static_cast<size_t>(s0) * hs);
              GemmBf16({rows, hs, cols, cols, 1, hs, 1, hs, true}, ds16, k_tile,
                       dq32 + static_cast<size_t>(t0) * hs);
              GemmBf16({cols, hs, rows, 1, cols, hs, 1, hs, true}, ds16, q_tile,
                       dk32 + static_cast<size_t>(s0) * hs);
            }
          }
          RoundRows(dq, C3, dq32, hs, T, hs);
        }
        RoundRows(dk, C3, dk32, hs, T, hs);
        RoundRows(dv, C3, dv32, hs, T, hs);
      }
    }
  }
}

void AttentionForwardTiledGqaBf16(uint16_t* out, float* lse, const uint16_t* qkv, int B, int T,
                                  int NH, int NKV, int hd, const AttentionOptions& options) {
  AttentionForwardTiledGqaBf16With(DefaultTiledAttentionBf16Options(T), out, lse, qkv, B, T, NH,
                                   NKV, hd, options);
}

void AttentionBackwardTiledGqaBf16(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                                   const uint16_t* out, const float* lse, int B, int T, int NH,
                                   int NKV, int hd, const AttentionOptions& options) {
  AttentionBackwardTiledGqaBf16With(DefaultTiledAttentionBf16Options(T), dqkv, dout, qkv, out, lse,
                                    B, T, NH, NKV, hd, options);
}

}  // namespace hoist::kernels::cpu

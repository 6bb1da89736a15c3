#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_kernels.h"

// The products of one head (Q K^T, P V and the four of the backward) go through sgemm, a block of
// query rows at a time: a block of rows [t0, t1) needs only keys [k0, t1), k0 the first key of row
// t0's window (0 without one), so the work above the causal diagonal is limited to the triangle
// inside the diagonal block, and the work before a sliding window to the triangle at its start.
// The sgemm calls run inside the OpenMP team's parallel region, where OpenBLAS's OpenMP build runs
// single-threaded (omp_in_parallel()), so each task is serial and its result does not depend on
// which thread runs it or how many there are.
//
// The softmax rows and their backward are the per-ISA loops of vector_kernels.inc.

namespace hoist::kernels::cpu {
namespace {

// Query rows per block. Short sequences take small blocks: little work is spent above the
// diagonal and the sgemm calls stay few. Long ones take larger blocks so that the backward's
// dK and dV products (inner dimension = rows of the block) run near the sgemm's full rate; the
// Q K^T block of a T=1024 head (128 x 1024 floats, 512 KiB) still stays in L2 between the sgemm
// that writes it and the softmax that reads it.
constexpr int kShortRowBlock = 32;
constexpr int kLongRowBlockFrom = 256;
constexpr int kLongRowBlock = 128;
int RowBlock(int T) { return T <= kLongRowBlockFrom ? kShortRowBlock : kLongRowBlock; }

}  // namespace

void AttentionForwardGqa(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                         int hs, const AttentionOptions& options) {
  const int C = NH * hs;               // out's row width
  const int C3 = (NH + 2 * NKV) * hs;  // qkv's row width
  const int group = NH / NKV;          // query heads per key/value head
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int row_block = RowBlock(T);
  const int num_blocks = (T + row_block - 1) / row_block;
  const auto softmax_rows = VectorKernelsFor(ActiveSimdLevel()).causal_softmax_rows;
  // A task is a block of query rows of one (b, h): it writes only its own att rows and out rows.
  // Later blocks cost more (more keys), and tasks are independent, so they are handed out
  // dynamically; the result of a task does not depend on the thread that runs it.
#pragma omp parallel for collapse(3) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int blk = 0; blk < num_blocks; ++blk) {
        const int t0 = blk * row_block;
        const int t1 = std::min(T, t0 + row_block);
        const int rows = t1 - t0;
        const int k0 = AttentionWindowStart(t0, window);  // the block's first key
        const int keys = t1 - k0;
        const float* q = qkv + (static_cast<size_t>(b) * T + t0) * C3 + h * hs;  // (rows, hs)
        const float* k = qkv + (static_cast<size_t>(b) * T + k0) * C3 + C + h / group * hs;
        const float* v = k + NKV * hs;                                      // k, v: (keys, hs)
        float* a = att + ((static_cast<size_t>(b) * NH + h) * T + t0) * T;  // (rows, T)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hs, scale, q, C3, k, C3,
                    0.0f, a + k0, T);
        softmax_rows(a, T, t0, rows, window, softcap);
        float* o = out + (static_cast<size_t>(b) * T + t0) * C + h * hs;  // (rows, hs)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, keys, 1.0f, a + k0, T, v,
                    C3, 0.0f, o, C);
      }
    }
  }
}

void AttentionBackwardGqa(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                          int T, int NH, int NKV, int hs, const AttentionOptions& options) {
  const int C = NH * hs;
  const int C3 = (NH + 2 * NKV) * hs;
  const int group = NH / NKV;
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int row_block = RowBlock(T);
  const auto softmax_backward_rows =
      VectorKernelsFor(ActiveSimdLevel()).causal_softmax_backward_rows;
  // dk and dv of one key receive contributions from every later query of every query head of its
  // group, so a task is a whole (b, key/value head): it owns its slices of dqkv and walks the
  // group's query heads, and in each the query blocks, in order. With NKV == NH the group is one
  // head and the order is that of plain multi-head attention.
#pragma omp parallel
  {
    // dL/dscores of one block of rows, (row_block, T), and with a softcap the block's scaled
    // scores, recomputed (att keeps only the probabilities). Grows to the largest T seen and is
    // kept, so the steady state allocates nothing.
    thread_local std::vector<float> datt_scratch;
    const size_t block_floats = static_cast<size_t>(std::min(T, row_block)) * T;
    const size_t scratch_floats = softcap > 0.0f ? 2 * block_floats : block_floats;
    if (datt_scratch.size() < scratch_floats) datt_scratch.resize(scratch_floats);
    float* datt = datt_scratch.data();
    float* scores = softcap > 0.0f ? datt + block_floats : nullptr;
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b) {
      for (int kvh = 0; kvh < NKV; ++kvh) {
        const size_t kv_head = static_cast<size_t>(b) * T * C3 + C + kvh * hs;
        const float* k_head = qkv + kv_head;
        const float* v_head = k_head + NKV * hs;
        float* dk_head = dqkv + kv_head;
        float* dv_head = dk_head + NKV * hs;
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          const size_t head = static_cast<size_t>(b) * T * C3 + h * hs;
          const float* q = qkv + head;
          float* dq = dqkv + head;
          const float* d_head = dout + static_cast<size_t>(b) * T * C + h * hs;
          const float* att_head = att + (static_cast<size_t>(b) * NH + h) * T * T;
          for (int t0 = 0; t0 < T; t0 += row_block) {
            const int t1 = std::min(T, t0 + row_block);
            const int rows = t1 - t0;
            // Keys [k0, t1): those of the block's windows. datt keeps row stride t1 and absolute
            // columns; only [k0, t1) is computed.
            const int k0 = AttentionWindowStart(t0, window);
            const int keys = t1 - k0;
            const size_t first_key = static_cast<size_t>(k0) * C3;
            const float* k = k_head + first_key;  // (keys, hs), as v, dk, dv
            const float* v = v_head + first_key;
            float* dk = dk_head + first_key;
            float* dv = dv_head + first_key;
            const float* d = d_head + static_cast<size_t>(t0) * C;    // (rows, hs)
            const float* p = att_head + static_cast<size_t>(t0) * T;  // (rows, T)
            const float* q_blk = q + static_cast<size_t>(t0) * C3;    // (rows, hs)
            float* dq_blk = dq + static_cast<size_t>(t0) * C3;        // (rows, hs)
            // out = P V: dP = dout V^T and dV += P^T dout.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hs, 1.0f, d, C, v, C3,
                        0.0f, datt + k0, t1);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, hs, rows, 1.0f, p + k0, T, d,
                        C, 1.0f, dv, C3);
            if (softcap > 0.0f) {
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, keys, hs, scale, q_blk, C3,
                          k, C3, 0.0f, scores + k0, t1);
            }
            softmax_backward_rows(datt, t1, p, T, t0, rows, scale, window, softcap, scores);
            // scores = scale Q K^T (scale already in datt): dQ += dS K and dK += dS^T Q.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, keys, 1.0f, datt + k0,
                        t1, k, C3, 1.0f, dq_blk, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, keys, hs, rows, 1.0f, datt + k0,
                        t1, q_blk, C3, 1.0f, dk, C3);
          }
        }
      }
    }
  }
}

void AttentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  AttentionForwardGqa(out, att, qkv, B, T, NH, NH, C / NH);
}

void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                       int T, int C, int NH) {
  AttentionBackwardGqa(dqkv, dout, qkv, att, B, T, NH, NH, C / NH);
}

}  // namespace hoist::kernels::cpu

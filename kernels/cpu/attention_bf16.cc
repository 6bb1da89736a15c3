#include "kernels/cpu/attention_bf16.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/logging.h"
#include "kernels/cpu/bf16_rows.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vector_kernels.h"

// The tasks are those of the fp32 kernel (attention.cc): forward, a block of query rows of one
// (b, head); backward, a whole (b, key/value head) walking its query heads and their blocks in
// order. Each oneDNN product inside the team's parallel region runs on the task's thread alone,
// so a task's result does not depend on which thread runs it or how many there are.
//
// oneDNN 2.6 takes its AMX kernel (brgemm) only for dense operands: a strided one (a head's
// columns of qkv, a block's rows of att) sends it to a generic kernel that measured slower than
// sgemm. So each task gathers its heads' rows into dense copies (O(T hd), next to the products'
// O(rows T hd)) and writes dense results that it moves into place.

namespace hoist::kernels::cpu {
namespace {

// Query rows per block. Larger than the fp32 kernel's (attention.cc): each oneDNN call costs about
// a microsecond besides its work and the AMX products run faster the larger they are, so fewer,
// larger blocks win although more of each diagonal block's upper triangle is computed and
// discarded. Measured on Sapphire Rapids (bench/attention_bench --bf16; bench/CPU_BF16_NOTES.md):
// 128 rows beat 32 and 64 up to T = 256, 256 rows beat 128 at T = 1024.
int RowBlock(int T) { return T <= 512 ? 128 : 256; }

// A per-thread buffer of at least n elements, kept for the next call.
template <typename E>
E* ThreadScratch(std::vector<E>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

void AttentionForwardGqaBf16(uint16_t* out, float* att, const uint16_t* qkv, int B, int T, int NH,
                             int NKV, int hs, const AttentionOptions& options) {
  const int64_t C = int64_t{NH} * hs;               // out's row width
  const int64_t C3 = (NH + 2 * int64_t{NKV}) * hs;  // qkv's row width
  const int group = NH / NKV;
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int row_block = RowBlock(T);
  const int num_blocks = (T + row_block - 1) / row_block;
  const auto softmax_rows = VectorKernelsFor(ActiveSimdLevel()).causal_softmax_rows;
#pragma omp parallel
  {
    // Grown to the largest T seen and kept: the steady state allocates nothing.
    thread_local std::vector<float> f_scratch;
    thread_local std::vector<uint16_t> h_scratch;
    const size_t block = static_cast<size_t>(std::min(T, row_block)) * T;
    const size_t head = static_cast<size_t>(T) * hs;
    float* s = ThreadScratch(f_scratch, block);  // the block's scores, (rows, t1)
    uint16_t* p16 = ThreadScratch(h_scratch, block + 2 * head + 2 * row_block * hs);
    uint16_t* k = p16 + block;  // the block's P in bf16 (rows, keys); keys and values (keys, hs);
    uint16_t* v = k + head;     // queries and out (rows, hs)
    uint16_t* q = v + head;
    uint16_t* o = q + row_block * hs;
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int blk = 0; blk < num_blocks; ++blk) {
          const int t0 = blk * row_block;
          const int t1 = std::min(T, t0 + row_block);
          const int rows = t1 - t0;
          const int k0 = AttentionWindowStart(t0, window);  // the block's keys: [k0, t1)
          const int keys = t1 - k0;
          const uint16_t* k_src = qkv + (int64_t{b} * T + k0) * C3 + C + h / group * hs;
          CopyRows(q, hs, qkv + (int64_t{b} * T + t0) * C3 + h * hs, C3, rows, hs);
          CopyRows(k, hs, k_src, C3, keys, hs);
          CopyRows(v, hs, k_src + int64_t{NKV} * hs, C3, keys, hs);
          // K^T (hs, keys) is K read down its rows.
          GemmBf16({rows, keys, hs, hs, 1, 1, hs, keys, false, false, scale}, q, k, s);
          float* a = att + ((int64_t{b} * NH + h) * T + t0) * T;  // (rows, T)
          CopyRows(a + k0, T, s, keys, rows, keys);
          softmax_rows(a, T, t0, rows, window, softcap);
          RoundRows(p16, keys, a + k0, T, rows, keys);
          GemmBf16({rows, hs, keys, keys, 1, hs, 1, hs, false, true}, p16, v, o);
          CopyRows(out + (int64_t{b} * T + t0) * C + h * hs, C, o, hs, rows, hs);
        }
      }
    }
  }
}

void AttentionBackwardGqaBf16(uint16_t* dqkv, const uint16_t* dout, const uint16_t* qkv,
                              const float* att, int B, int T, int NH, int NKV, int hs,
                              const AttentionOptions& options) {
  const int64_t C = int64_t{NH} * hs;
  const int64_t C3 = (NH + 2 * int64_t{NKV}) * hs;
  const int group = NH / NKV;
  const float scale = AttentionScale(options, hs);
  const int window = options.window;
  const float softcap = options.softcap;
  const int row_block = RowBlock(T);
  const auto softmax_backward_rows =
      VectorKernelsFor(ActiveSimdLevel()).causal_softmax_backward_rows;
#pragma omp parallel
  {
    thread_local std::vector<float> f_scratch;
    thread_local std::vector<uint16_t> h_scratch;
    const size_t block = static_cast<size_t>(std::min(T, row_block)) * T;
    const size_t head = static_cast<size_t>(T) * hs;
    float* f = ThreadScratch(f_scratch, (softcap > 0.0f ? 2 : 1) * block + 3 * head);
    float* datt = f;              // dL/dP, then dL/dscores, of a block, (rows, t1)
    float* dq32 = f + block;      // the fp32 sums of dq, dk and dv of a head, (T, hs) each
    float* dk32 = dq32 + head;    //
    float* dv32 = dk32 + head;    //
    float* scores = dv32 + head;  // with a softcap, the block's scores, recomputed, (rows, t1)
    uint16_t* p16 = ThreadScratch(h_scratch, 2 * block + 4 * head);
    uint16_t* ds16 = p16 + block;  // P and dL/dscores of a block in bf16, (rows, t1)
    uint16_t* q = ds16 + block;    // a head's q, k, v and dout, dense, (T, hs) each
    uint16_t* k = q + head;
    uint16_t* v = k + head;
    uint16_t* d = v + head;
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
          CopyRows(q, hs, qkv + q_head, C3, T, hs);
          CopyRows(d, hs, dout + int64_t{b} * T * C + h * hs, C, T, hs);
          WidenRows(dq32, hs, dq, C3, T, hs);
          const float* att_head = att + (int64_t{b} * NH + h) * T * T;
          for (int t0 = 0; t0 < T; t0 += row_block) {
            const int t1 = std::min(T, t0 + row_block);
            const int rows = t1 - t0;
            // Keys [k0, t1): those of the block's windows. datt and scores keep row stride t1 and
            // absolute columns; only [k0, t1) is computed. P and dS in bf16 are dense (rows, keys).
            const int k0 = AttentionWindowStart(t0, window);
            const int keys = t1 - k0;
            const uint16_t* k_blk = k + int64_t{k0} * hs;  // (keys, hs), as v_blk
            const uint16_t* v_blk = v + int64_t{k0} * hs;
            const uint16_t* d_blk = d + int64_t{t0} * hs;  // (rows, hs)
            const uint16_t* q_blk = q + int64_t{t0} * hs;  // (rows, hs)
            const float* p = att_head + int64_t{t0} * T;   // (rows, T)
            // out = P V: dP = dout V^T and dV += P^T dout, P rounded as the forward rounded it.
            GemmBf16({rows, keys, hs, hs, 1, 1, hs, t1}, d_blk, v_blk, datt + k0);
            RoundRows(p16, keys, p + k0, T, rows, keys);
            GemmBf16({keys, hs, rows, 1, keys, hs, 1, hs, true}, p16, d_blk,
                     dv32 + int64_t{k0} * hs);
            if (softcap > 0.0f) {
              GemmBf16({rows, keys, hs, hs, 1, 1, hs, t1, false, false, scale}, q_blk, k_blk,
                       scores + k0);
            }
            softmax_backward_rows(datt, t1, p, T, t0, rows, scale, window, softcap, scores);
            RoundRows(ds16, keys, datt + k0, t1, rows, keys);
            // scores = scale Q K^T (scale already in dS): dQ += dS K and dK += dS^T Q.
            GemmBf16({rows, hs, keys, keys, 1, hs, 1, hs, true}, ds16, k_blk,
                     dq32 + int64_t{t0} * hs);
            GemmBf16({keys, hs, rows, 1, keys, hs, 1, hs, true}, ds16, q_blk,
                     dk32 + int64_t{k0} * hs);
          }
          RoundRows(dq, C3, dq32, hs, T, hs);
        }
        RoundRows(dk, C3, dk32, hs, T, hs);
        RoundRows(dv, C3, dv32, hs, T, hs);
      }
    }
  }
}

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Milliseconds of the best of three runs of fn, after one that builds what it needs.
template <typename Fn>
double BestMs(Fn fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double t0 = Seconds();
    fn();
    best = std::min(best, Seconds() - t0);
  }
  return best * 1e3;
}

}  // namespace

AttentionChoice DecideAttentionPath() {
  AttentionChoice choice;
  const GemmChoice& gemm = ActiveGemmPath();
  if (gemm.path != GemmPath::kBf16Dnnl) {
    choice.reason = "the bf16 matmuls take the fp32 path (" + gemm.reason + ")";
    return choice;
  }
  const char* mode = std::getenv("HOIST_GEMM");
  if (mode != nullptr && std::string(mode) == "bf16") {
    choice.bf16 = true;
    choice.reason = "HOIST_GEMM=bf16";
    return choice;
  }
  constexpr int B = 2, T = 256, NH = 4, hs = 64, C = NH * hs;
  const size_t n_qkv = size_t{B} * T * 3 * C, n_out = size_t{B} * T * C;
  // Inputs of moderate size (scores within a few units); the values do not change the work.
  std::vector<uint16_t> qkv(n_qkv), dout(n_out, 0x3c00), out(n_out), dqkv(n_qkv, 0);
  for (size_t i = 0; i < n_qkv; ++i) qkv[i] = static_cast<uint16_t>(0x3e00 + i % 97);
  std::vector<float> att(size_t{B} * NH * T * T), qkv32(n_qkv), out32(n_out), dout32(n_out),
      dqkv32(n_qkv);
  choice.fp32_ms = BestMs([&] {
    CastBf16ToFp32(qkv32.data(), qkv.data(), n_qkv);
    std::fill(out32.begin(), out32.end(), 0.0f);
    AttentionForward(out32.data(), att.data(), qkv32.data(), B, T, C, NH);
    CastFp32ToBf16(out.data(), out32.data(), n_out);
    CastBf16ToFp32(dqkv32.data(), dqkv.data(), n_qkv);
    CastBf16ToFp32(dout32.data(), dout.data(), n_out);
    CastBf16ToFp32(qkv32.data(), qkv.data(), n_qkv);
    AttentionBackward(dqkv32.data(), dout32.data(), qkv32.data(), att.data(), B, T, C, NH);
    CastFp32ToBf16(dqkv.data(), dqkv32.data(), n_qkv);
  });
  choice.bf16_ms = BestMs([&] {
    AttentionForwardGqaBf16(out.data(), att.data(), qkv.data(), B, T, NH, NH, hs);
    AttentionBackwardGqaBf16(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NH, hs);
  });
  choice.bf16 = choice.bf16_ms < choice.fp32_ms;
  choice.reason = choice.bf16 ? "bf16 attention measured faster than the fp32 path"
                              : "bf16 attention measured no faster than the fp32 path";
  return choice;
}

const AttentionChoice& ActiveAttentionPath() {
  static const AttentionChoice choice = [] {
    AttentionChoice c = DecideAttentionPath();
    HOIST_LOG(INFO) << "bf16 attention: " << (c.bf16 ? "bf16 (oneDNN)" : "fp32 (BLAS sgemm)")
                    << ": " << c.reason;
    return c;
  }();
  return choice;
}

}  // namespace hoist::kernels::cpu

// AttentionOptions: what the grouped-query attention ops (kernels/backend.h, kernels/cpu/ops.h,
// kernels/cuda/attention.h) do beyond plain causal attention, as newer model families ask: the
// scores' scale (Gemma 2's query_pre_attn_scalar), a sliding window (Mistral's and Gemma 2's
// sliding_window) and soft-capped scores (Gemma 2's attn_logit_softcapping). A plain value; the
// default is plain causal attention scaled by 1/sqrt(hd), the same bits as before the options.
#pragma once

#include "core/status.h"

namespace hoist::kernels {

struct AttentionOptions {
  // scores = (q . k) * scale; 0 means 1/sqrt(hd).
  float scale = 0;
  // 0: query i attends every key j <= i. > 0: Hugging Face's sliding_window, query i attends key
  // j iff i - window < j <= i (1: itself only; window >= T is the same as 0, bit for bit).
  int window = 0;
  // 0: none. > 0: after scaling and before the mask, s = softcap * tanh(s / softcap).
  float softcap = 0;
};

// The factor the ops scale q . k by: options.scale, or 1/sqrt(hd) in fp32 where it is 0.
float AttentionScale(const AttentionOptions& options, int hd);

// The first key that query t attends: t - window + 1, at least 0; 0 without a window. (constexpr:
// the CUDA kernels call it too.)
constexpr int AttentionWindowStart(int t, int window) {
  return window > 0 && t >= window ? t - window + 1 : 0;
}

// kInvalidArgument naming `op` and the option for a negative window, or a scale or softcap that
// is negative or not finite; Ok otherwise.
Status CheckAttentionOptions(const char* op, const AttentionOptions& options);

}  // namespace hoist::kernels

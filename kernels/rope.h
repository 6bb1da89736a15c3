// The rotary position embedding's frequency table, computed on the host once per model and copied
// to the backend's device (the RopeForward/RopeBackward ops read it). It follows Hugging Face's
// LlamaRotaryEmbedding (transformers' modeling_rope_utils):
//   inv_freq[i] = 1 / rope_theta^(2i / hd), i < hd/2, in fp32 as HF computes it (the fp32 exponent
//                 2i/hd; the power itself evaluated in double and rounded once, which is HF's
//                 fp32 pow to within an ulp);
//   rope_type "llama3" then rescales it (_compute_llama3_parameters, in fp32 arithmetic as HF's
//                 tensors run it): wavelen = 2 pi / inv_freq; wavelen > original/low_freq_factor:
//                 inv_freq / factor; wavelen < original/high_freq_factor: unchanged; between:
//                 (1 - smooth) inv_freq / factor + smooth inv_freq, smooth = (original / wavelen -
//                 low_freq_factor) / (high_freq_factor - low_freq_factor);
//   angle[t,i]  = float(t) * inv_freq[i] (one fp32 product, HF's positions.float() @ inv_freq);
//   cos, sin    = cos(angle), sin(angle) rounded once to fp32 (HF's fp32 cos/sin, to an ulp).
// HF duplicates the table over both halves of the head (cat(freqs, freqs)); it is stored once.
// HF hands 16-bit models cos/sin rounded to the model's dtype and rotates in that dtype; the ops
// here rotate in fp32 from the fp32 table and round once (16-bit results differ by about a
// rounding).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace hoist::kernels {

// Llama 3's rope_scaling (config.json's "rope_scaling" with "rope_type": "llama3").
struct RopeScaling {
  bool llama3 = false;  // false: the default rope (no scaling)
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// inv_freq (hd/2) as above. kInvalidArgument for an odd or non-positive hd, theta <= 0, or llama3
// scaling with factor <= 0 or high_freq_factor <= low_freq_factor.
StatusOr<std::vector<float>> RopeInvFreq(int hd, double theta, const RopeScaling& scaling = {});

// cos and sin (T, hd/2) for positions 0..T-1 from inv_freq (hd/2 values).
struct RopeTable {
  std::vector<float> cos;
  std::vector<float> sin;
};
RopeTable MakeRopeTable(const std::vector<float>& inv_freq, int T);

}  // namespace hoist::kernels

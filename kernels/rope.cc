#include "kernels/rope.h"

#include <cmath>
#include <cstddef>
#include <numbers>

namespace hoist::kernels {

StatusOr<std::vector<float>> RopeInvFreq(int hd, double theta, const RopeScaling& scaling) {
  if (hd <= 0 || hd % 2 != 0) {
    return InvalidArgumentError("rope: the head dimension must be positive and even, got " +
                                std::to_string(hd));
  }
  if (!(theta > 0.0)) {
    return InvalidArgumentError("rope: rope_theta must be positive, got " + std::to_string(theta));
  }
  if (scaling.llama3 &&
      (!(scaling.factor > 0.0) || !(scaling.high_freq_factor > scaling.low_freq_factor) ||
       !(scaling.low_freq_factor > 0.0) || !(scaling.original_max_position_embeddings > 0.0))) {
    return InvalidArgumentError(
        "rope: llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0");
  }
  const int half = hd / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    // HF: arange(0, dim, 2).float() / dim, in fp32.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hd);
    const float power = static_cast<float>(
        std::pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(exponent)));
    inv_freq[static_cast<size_t>(i)] = 1.0f / power;
  }
  if (!scaling.llama3) return inv_freq;
  // _compute_llama3_parameters, with its fp32 tensors' arithmetic (python scalars become fp32).
  const float factor = static_cast<float>(scaling.factor);
  const float low = static_cast<float>(scaling.low_freq_factor);
  const float high = static_cast<float>(scaling.high_freq_factor);
  const float old_len = static_cast<float>(scaling.original_max_position_embeddings);
  const float low_freq_wavelen =
      static_cast<float>(scaling.original_max_position_embeddings / scaling.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(scaling.original_max_position_embeddings / scaling.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv_freq) {
    // torch's scalar / tensor is reciprocal(tensor) * scalar.
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = ((1.0f / wavelen) * old_len - low) / (high - low);
      f = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      f = scaled;
    }
  }
  return inv_freq;
}

RopeTable MakeRopeTable(const std::vector<float>& inv_freq, int T) {
  const size_t half = inv_freq.size();
  RopeTable table;
  table.cos.resize(static_cast<size_t>(T) * half);
  table.sin.resize(static_cast<size_t>(T) * half);
  for (int t = 0; t < T; ++t) {
    for (size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[i];
      table.cos[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::cos(static_cast<double>(angle)));
      table.sin[static_cast<size_t>(t) * half + i] =
          static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return table;
}

}  // namespace hoist::kernels

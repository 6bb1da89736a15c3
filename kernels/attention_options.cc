#include "kernels/attention_options.h"

#include <cmath>
#include <string>

namespace hoist::kernels {
namespace {

Status CheckFactor(const char* op, const char* name, float value, const char* zero_means) {
  if (std::isfinite(value) && value >= 0.0f) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": attention option " + name +
                              " must be finite and >= 0 (0: " + zero_means + "), got " +
                              std::to_string(value));
}

}  // namespace

float AttentionScale(const AttentionOptions& options, int hd) {
  return options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(hd));
}

Status CheckAttentionOptions(const char* op, const AttentionOptions& options) {
  if (options.window < 0) {
    return InvalidArgumentError(std::string(op) +
                                ": attention option window must be >= 0 (0: no window), got " +
                                std::to_string(options.window));
  }
  HOIST_RETURN_IF_ERROR(CheckFactor(op, "scale", options.scale, "1/sqrt(hd)"));
  return CheckFactor(op, "softcap", options.softcap, "no cap");
}

}  // namespace hoist::kernels

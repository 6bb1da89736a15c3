#include "runtime/model/model_config.h"

#include <algorithm>
#include <cctype>

namespace hoist::runtime {
namespace {

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

}  // namespace

const char* ModelFamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kGpt2: return "gpt2";
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kQwen2: return "qwen2";
    case ModelFamily::kQwen3: return "qwen3";
    case ModelFamily::kMistral: return "mistral";
    case ModelFamily::kGemma2: return "gemma2";
  }
  return "unknown";
}

const char* ModelDisplayName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kGpt2: return "GPT-2";
    case ModelFamily::kLlama: return "Llama";
    case ModelFamily::kQwen2: return "Qwen2";
    case ModelFamily::kQwen3: return "Qwen3";
    case ModelFamily::kMistral: return "Mistral";
    case ModelFamily::kGemma2: return "Gemma 2";
  }
  return "unknown";
}

bool ModelFamilyNamed(std::string_view name, ModelFamily* family) {
  for (ModelFamily f : kModelFamilies) {
    if (Lower(std::string(name)) == ModelFamilyName(f)) {
      *family = f;
      return true;
    }
  }
  return false;
}

int ModelConfig::padded_vocab_size() const { return (vocab_size + 127) / 128 * 128; }

const char* CheckpointPolicyName(CheckpointPolicy policy) {
  switch (policy) {
    case CheckpointPolicy::kNone: return "none";
    case CheckpointPolicy::kFull: return "full";
    case CheckpointPolicy::kEveryK: return "every_k";
    case CheckpointPolicy::kSelective: return "selective";
  }
  return "unknown";
}

bool ActivationCheckpointingConfig::Checkpointed(int layer) const {
  switch (policy) {
    case CheckpointPolicy::kFull: return true;
    case CheckpointPolicy::kEveryK: return layer % every_k == 0;
    case CheckpointPolicy::kNone:
    case CheckpointPolicy::kSelective: return false;
  }
  return false;
}

}  // namespace hoist::runtime

// The Llama fixtures of scripts/reference/llama_hf.py (tests/data/llama_hf/) for the tests:
// the model's config, the reference tensors, the checkpoint mapped into the model's units by the
// Hugging Face names, and the token shard.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "runtime/llama.h"
#include "runtime/safetensors.h"

namespace hoist::runtime {

inline const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data/llama_hf";
inline constexpr int kB = 2, kT = 16;

// The fixture's config.json in hoist's names.
inline ModelConfig FixtureConfig(bool tied) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.n_embd = 32;
  m.intermediate_size = 40;
  m.vocab_size = 100;
  m.seq_len = kT;
  m.n_positions = 512;
  m.rope_theta = 500000.0;
  m.rope_scaling.llama3 = true;
  m.rope_scaling.factor = 8.0;
  m.rope_scaling.low_freq_factor = 1.0;
  m.rope_scaling.high_freq_factor = 4.0;
  m.rope_scaling.original_max_position_embeddings = 256;
  m.rms_norm_eps = 1e-5f;
  m.tie_word_embeddings = tied;
  return m;
}

class Tensors {
 public:
  explicit Tensors(const std::string& path) {
    auto file = SafetensorsFile::Open(path);
    HOIST_CHECK(file.ok()) << file.status().ToString();
    file_.emplace(std::move(*file));
  }
  const SafetensorsTensor* Find(const std::string& name) const { return file_->Find(name); }
  std::vector<float> Floats(const std::string& name) const {
    const SafetensorsTensor* t = file_->Find(name);
    HOIST_CHECK(t != nullptr) << name;
    std::vector<float> out(static_cast<size_t>(t->elements()));
    HOIST_CHECK(file_->ReadFloat(*t, 0, t->elements(), out.data()).ok());
    return out;
  }
  std::vector<int32_t> Ints(const std::string& name) const {
    const SafetensorsTensor* t = file_->Find(name);
    HOIST_CHECK(t != nullptr && t->dtype == "I32") << name;
    std::vector<int32_t> out(static_cast<size_t>(t->elements()));
    HOIST_CHECK(file_->ReadBytes(*t, 0, t->end - t->begin, out.data()).ok());
    return out;
  }
  size_t size() const { return file_->tensors().size(); }

 private:
  std::optional<SafetensorsFile> file_;
};

inline int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The checkpoint's tensors in the units of `config`'s layout, by name: every tensor of the file
// used once, each with the shape LlamaHfTensors gives; the padding rows 0.
inline std::vector<float> ReadCheckpoint(const std::string& dir, const ModelConfig& config) {
  const Tensors file(dir + "/model.safetensors");
  const std::vector<LlamaHfTensor> specs = LlamaHfTensors(config);
  const LlamaLayout layout = LlamaLayout::For(config);
  EXPECT_EQ(file.size(), specs.size()) << dir;
  std::vector<float> weights(static_cast<size_t>(layout.total));
  for (const LlamaHfTensor& spec : specs) {
    const SafetensorsTensor* t = file.Find(spec.name);
    EXPECT_NE(t, nullptr) << spec.name;
    if (t == nullptr) continue;
    EXPECT_EQ(t->shape, spec.shape) << spec.name;
    const std::vector<float> values = file.Floats(spec.name);
    std::memcpy(weights.data() + layout.unit_offsets[spec.unit] + spec.offset, values.data(),
                values.size() * sizeof(float));
  }
  return weights;
}

// llm.c's token shard: 256 int32 header (magic, version, count), then uint16 tokens.
inline std::vector<int32_t> ReadShard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 256 * sizeof(int32_t));
  HOIST_CHECK(header[0] == 20240520) << path;
  std::vector<uint16_t> tokens(static_cast<size_t>(header[2]));
  in.read(reinterpret_cast<char*>(tokens.data()),
          static_cast<std::streamsize>(tokens.size() * sizeof(uint16_t)));
  HOIST_CHECK(in.good()) << path;
  return std::vector<int32_t>(tokens.begin(), tokens.end());
}

}  // namespace hoist::runtime

// The Llama fixtures of scripts/reference/llama_hf.py (tests/data/llama_hf/) for the tests:
// the model's config, the reference tensors, the checkpoint mapped into the model's units by the
// Hugging Face names, and the token shard.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/decoder.h"

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

// |got - want| <= rtol * max(|want|, rms(want)); returns the worst such ratio.
inline double ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                          double rtol, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return 1e30;
  double sum = 0;
  for (float w : want) sum += double{w} * w;
  const double rms = std::sqrt(sum / static_cast<double>(want.size()));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err =
        std::abs(double{got[i]} - want[i]) / std::max<double>(std::abs(want[i]), rms);
    worst = std::max(worst, err);
    if (err > rtol) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
      return worst;
    }
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", worst);
  ::testing::Test::RecordProperty(what, text);
  return worst;
}

inline int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The checkpoint's tensors in the units of `config`'s layout, by name: every tensor of the file
// used once, each with the shape DecoderHfTensors gives; the padding rows 0.
inline std::vector<float> ReadCheckpoint(const std::string& dir, const ModelConfig& config) {
  const Tensors file(dir + "/model.safetensors");
  const std::vector<DecoderHfTensor> specs = DecoderHfTensors(config);
  const DecoderLayout layout = DecoderLayout::For(config);
  EXPECT_EQ(file.size(), specs.size()) << dir;
  std::vector<float> weights(static_cast<size_t>(layout.total));
  for (const DecoderHfTensor& spec : specs) {
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

// Trains `model` (its weights loaded) with AdamW as the fixtures' PyTorch runs did (lr 1e-2,
// betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on the 2-D tensors, the backend's multi-tensor
// step), one micro-batch of `tokens` per step in llm.c's order, and expects each step's loss
// within 1e-4 relative of `want`'s. Returns the worst relative error.
inline double ExpectAdamWLosses(DecoderModel& model, const std::vector<int32_t>& tokens,
                                const std::vector<float>& want) {
  const int64_t n = model.num_parameters();
  std::vector<float> mom(static_cast<size_t>(n)), var(static_cast<size_t>(n));
  std::vector<kernels::AdamWTensorRef> refs;
  const std::vector<zero::UnitSpec> units = model.layout().Units();
  for (size_t u = 0; u < units.size(); ++u) {
    const int64_t base = model.layout().unit_offsets[u];
    for (const zero::ParamSegment& seg : units[u].segments) {
      kernels::AdamWTensorRef r;
      r.param = model.params() + base + seg.begin;
      r.m = mom.data() + base + seg.begin;
      r.v = var.data() + base + seg.begin;
      r.grad = model.grads() + base + seg.begin;
      r.n = seg.end - seg.begin;
      r.weight_decay = seg.decay ? 0.1f : 0.0f;
      refs.push_back(r);
    }
  }
  kernels::AdamWStepScalars scalars;
  scalars.lr = 1e-2f;
  scalars.beta1 = 0.9f;
  scalars.beta2 = 0.95f;
  scalars.eps = 1e-8f;
  double worst = 0;
  for (int step = 0; step < static_cast<int>(want.size()); ++step) {
    const int32_t* window = tokens.data() + int64_t{step} * kB * kT;
    HOIST_CHECK_OK(model.ZeroGradients());
    const StatusOr<float> forward = model.Forward(window, window + 1, kB, kT, 1.0f);
    const Status passes = forward.ok() ? model.Backward() : forward.status();
    EXPECT_TRUE(passes.ok()) << passes.ToString();
    if (!passes.ok()) return 1e30;
    const float loss = *forward;
    scalars.step = step + 1;
    EXPECT_TRUE(model.backend()
                    .AdamW(refs, DType::kFloat32, DType::kFloat32, scalars,
                           model.backend().compute_stream())
                    .ok());
    EXPECT_TRUE(model.backend().compute_stream().Synchronize().ok());
    const double err =
        std::abs(double{loss} - want[static_cast<size_t>(step)]) / want[static_cast<size_t>(step)];
    worst = std::max(worst, err);
    EXPECT_LE(err, 1e-4) << "step " << step << ": " << loss << " vs "
                         << want[static_cast<size_t>(step)];
  }
  return worst;
}

}  // namespace hoist::runtime

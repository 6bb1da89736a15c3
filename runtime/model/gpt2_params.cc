// GPT-2's parameters: ParamLayout (where each tensor lives, flat and by unit) and the
// initialisation of a unit's values (runtime/model/gpt2.h).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/model/gpt2.h"  // declares what this file defines
#include "runtime/model/unit_layout.h"
#include "runtime/model/weight_init.h"

namespace hoist::runtime {

namespace {

// The tensors of each unit, in their order within it.
constexpr int kEmbeddingTensors[] = {kWte, kWpe};
constexpr int kBlockTensors[] = {kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB,
                                 kLn2W, kLn2B, kFcW,  kFcB,  kFcProjW,  kFcProjB};
constexpr int kFinalTensors[] = {kLnfW, kLnfB};

}  // namespace

ParamLayout ParamLayout::For(const ModelConfig& m) {
  const int64_t L = m.n_layer, C = m.n_embd, Vp = m.padded_vocab_size(), maxT = m.positions();
  ParamLayout layout;
  layout.n_layer = m.n_layer;
  layout.unit_sizes = {Vp * C, maxT * C, C,         C,     3 * C * C, 3 * C, C * C, C,
                       C,      C,        4 * C * C, 4 * C, C * 4 * C, C,     C,     C};
  int64_t llmc = 0;
  for (int t = 0; t < kNumParamTensors; ++t) {
    layout.sizes[t] = layout.unit_sizes[t] * (PerBlock(t) ? L : 1);
    layout.llmc_offsets[t] = llmc;
    llmc += layout.sizes[t];
  }
  layout.Place(kEmbeddingTensors, kBlockTensors, kFinalTensors);
  return layout;
}

const char* ParamLayout::Name(int tensor) {
  static const char* kNames[kNumParamTensors] = {
      "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};
  return kNames[tensor];
}

bool ParamLayout::Decayed(int tensor) {
  switch (tensor) {
    case kWte:
    case kWpe:
    case kQkvW:
    case kAttProjW:
    case kFcW:
    case kFcProjW: return true;
    default: return false;
  }
}

bool ParamLayout::PerBlock(int tensor) { return tensor >= kLn1W && tensor <= kFcProjB; }

int64_t ParamLayout::FlatIndex(int tensor, int64_t i) const {
  const int64_t slice = unit_sizes[tensor];
  return Offset(tensor, static_cast<int>(i / slice)) + i % slice;
}

std::vector<zero::UnitSpec> ParamLayout::Units() const {
  return LayoutUnits(*this, kEmbeddingTensors, kBlockTensors, kFinalTensors, "final layernorm");
}

void InitializeGpt2Unit(const ModelConfig& config, int unit, uint64_t seed, float* out) {
  InitializeGpt2Range(config, unit, seed, 0, ParamLayout::For(config).unit_size(unit), out);
}

void InitializeGpt2Range(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                         int64_t count, float* out) {
  const ParamLayout layout = ParamLayout::For(config);
  const int L = config.n_layer, C = config.n_embd, V = config.vocab_size;
  const double kStd = 0.02;
  const double residual_std = kStd / std::sqrt(2.0 * L);
  UnitWindow window(out, begin, count);
  const int layer = unit - 1;  // for block units
  auto fill_normal = [&](int tensor, int64_t n, double std) {
    // One stream per (tensor, layer), so any unit can be drawn on its own.
    const uint64_t slice = static_cast<uint64_t>(tensor) * 1000003u +
                           static_cast<uint64_t>(ParamLayout::PerBlock(tensor) ? layer : 0);
    window.Normal(layout.local_offsets[tensor], n, seed ^ (slice * 0x9E3779B97F4A7C15ull), std);
  };
  auto fill_ones = [&](int tensor) {
    window.Fill(layout.local_offsets[tensor], layout.unit_sizes[tensor], 1.0f);
  };
  if (unit == 0) {
    // Only the real vocabulary rows of wte are drawn: padded rows stay 0 and, since no token and
    // no target ever touches them, keep a zero gradient forever.
    fill_normal(kWte, int64_t{V} * C, kStd);
    fill_normal(kWpe, layout.unit_sizes[kWpe], kStd);
  } else if (unit <= L) {
    fill_normal(kQkvW, layout.unit_sizes[kQkvW], kStd);
    fill_normal(kAttProjW, layout.unit_sizes[kAttProjW], residual_std);
    fill_normal(kFcW, layout.unit_sizes[kFcW], kStd);
    fill_normal(kFcProjW, layout.unit_sizes[kFcProjW], residual_std);
    fill_ones(kLn1W);
    fill_ones(kLn2W);
  } else {
    fill_ones(kLnfW);
  }
}

}  // namespace hoist::runtime

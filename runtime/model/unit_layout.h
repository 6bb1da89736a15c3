// A family's tensors laid out over its units (UnitLayout), and those units for the ZeRO engine
// (LayoutUnits).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "zero/partition.h"

namespace hoist::runtime {

// Where each of a family's kTensors tensors sits in the flat (unit-major) weights: unit 0 holds
// the embedding tensors, unit 1 + l block l's slices of the per-block ones, unit L + 1 the final
// ones, each tensor at local_offsets[t] within its unit. A family's layout derives from it, sets
// n_layer and unit_sizes, and calls Place with its three lists of tensors.
template <int kTensors>
struct UnitLayout {
  int n_layer = 0;
  // Elements of the tensor within one unit (one layer's slice for the per-block tensors).
  std::array<int64_t, kTensors> unit_sizes{};
  std::array<int64_t, kTensors> local_offsets{};  // offset of the tensor within its unit
  // num_units() + 1 entries: unit u is [unit_offsets[u], unit_offsets[u + 1]) of the flat buffer.
  std::vector<int64_t> unit_offsets;
  int64_t total = 0;

  int num_units() const { return n_layer + 2; }
  int unit_of(int tensor, int layer = 0) const {
    switch (part_[static_cast<size_t>(tensor)]) {
      case Part::kEmbedding: return 0;
      case Part::kBlock: return 1 + layer;
      case Part::kFinal: break;
    }
    return n_layer + 1;
  }
  int64_t unit_size(int unit) const { return unit_offsets[unit + 1] - unit_offsets[unit]; }
  // Offset in the flat buffer of `layer`'s slice of `tensor`.
  int64_t Offset(int tensor, int layer = 0) const {
    return unit_offsets[static_cast<size_t>(unit_of(tensor, layer))] +
           local_offsets[static_cast<size_t>(tensor)];
  }

 protected:
  // Lays the tensors out from unit_sizes: each unit's tensors in the order listed, every tensor
  // in exactly one list.
  void Place(std::span<const int> embedding, std::span<const int> block,
             std::span<const int> final_tensors) {
    std::array<bool, kTensors> placed{};
    auto place = [&](std::span<const int> tensors, Part part) {
      int64_t offset = 0;
      for (int t : tensors) {
        const auto i = static_cast<size_t>(t);
        HOIST_CHECK(!placed[i]) << "tensor " << t << " placed twice";
        placed[i] = true;
        part_[i] = part;
        local_offsets[i] = offset;
        offset += unit_sizes[i];
      }
      return offset;
    };
    const int64_t first = place(embedding, Part::kEmbedding);
    const int64_t each_block = place(block, Part::kBlock);
    const int64_t last = place(final_tensors, Part::kFinal);
    for (int t = 0; t < kTensors; ++t) {
      HOIST_CHECK(placed[static_cast<size_t>(t)]) << "tensor " << t << " not placed";
    }
    unit_offsets.assign(1, 0);
    unit_offsets.push_back(first);
    for (int l = 0; l < n_layer; ++l) unit_offsets.push_back(unit_offsets.back() + each_block);
    unit_offsets.push_back(unit_offsets.back() + last);
    total = unit_offsets.back();
  }

 private:
  enum class Part : int8_t { kEmbedding, kBlock, kFinal };
  std::array<Part, kTensors> part_{};
};

// The units of a family's layout for the ZeRO engine (zero::UnitSpec), from its tensors' places:
// unit 0 the embedding tensors, unit 1 + l block l's (a block is what a frozen 4-bit base
// quantizes), unit L + 1 the final ones; each unit's tensors in their order within it, adjacent
// tensors of the same weight decay merged into one segment, an empty tensor (a tied head) left
// out. `Layout` is a UnitLayout with a static Decayed(t).
template <typename Layout>
std::vector<zero::UnitSpec> LayoutUnits(const Layout& layout, std::span<const int> embedding,
                                        std::span<const int> block,
                                        std::span<const int> final_tensors,
                                        std::string final_name) {
  std::vector<zero::UnitSpec> units;
  auto add = [&](std::string name, std::span<const int> tensors) {
    zero::UnitSpec unit;
    unit.name = std::move(name);
    for (int t : tensors) {
      if (layout.unit_sizes[t] == 0) continue;
      const int64_t begin = layout.local_offsets[t], end = begin + layout.unit_sizes[t];
      if (!unit.segments.empty() && unit.segments.back().decay == Layout::Decayed(t)) {
        unit.segments.back().end = end;
      } else {
        unit.segments.push_back({begin, end, Layout::Decayed(t)});
      }
      unit.size = end;
    }
    units.push_back(std::move(unit));
  };
  add("embeddings", embedding);
  for (int l = 0; l < layout.n_layer; ++l) {
    add("block " + std::to_string(l), block);
    units.back().quantizable = true;
  }
  add(std::move(final_name), final_tensors);
  return units;
}

}  // namespace hoist::runtime

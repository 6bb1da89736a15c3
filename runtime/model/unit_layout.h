// The units of a family's layout for the ZeRO engine (zero::UnitSpec), from its tensors' places:
// unit 0 the embedding tensors, unit 1 + l block l's (a block is what a frozen 4-bit base
// quantizes), unit L + 1 the final ones; each unit's tensors in their order within it, adjacent
// tensors of the same weight decay merged into one segment, an empty tensor (a tied head) left
// out. `Layout` has n_layer, local_offsets[t], unit_sizes[t] and a static Decayed(t).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "zero/partition.h"

namespace hoist::runtime {

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

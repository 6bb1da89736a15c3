// Renders the memory tracker's numbers for people (the end-of-run table, the progress line) and
// for tools (the JSONL log's `memory`, `peak` and `peak_total` objects, in DESIGN.md's shape
// {place: {category: bytes}}). Pure functions of a snapshot; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/memory_tracker.h"

namespace hoist::runtime {

// {place: {category: bytes}} over every place and category.
nlohmann::json MemoryTableJson(const MemorySnapshot::Table& table);
// {place: bytes}: the largest simultaneous sum over categories of each place.
nlohmann::json PeakTotalJson(const MemorySnapshot& snapshot);
// A table of current and peak bytes by place and category; places never used are left out. It
// ends with the process's peak resident set, which also holds what the tracker cannot see
// (the BLAS library's own buffers, code, the C++ heap of small objects).
std::string FormatMemoryTable(const MemorySnapshot& snapshot);

// The process's peak resident set size in bytes (getrusage), 0 if unknown.
int64_t ProcessPeakResidentBytes();

}  // namespace hoist::runtime

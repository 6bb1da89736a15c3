// The identity of the base weights a LoRA run adapts (model.init_from), recorded in every
// checkpoint's manifest: a checkpoint holds the adapters alone and reads its base from that path
// again on resume and export, so weights replaced there by others of the same shapes would
// otherwise train on, or merge into, the wrong base without a word.
//
// For each file the base is read from (WeightSource::files(): config.json, the index and every
// safetensors shard, or the llm.c file), relative to the base's path: its size; the XXH64 of its
// header (a safetensors file's length word and JSON header, which hold every tensor's name,
// dtype, shape and offsets; none for other files); and the XXH64 of a sample of its data: all of
// it when under 1 MiB, else 64 windows of 16 KiB spread evenly from its first byte to its last.
// A sample rather than whole files because it is computed at every start, resume and export:
// ~1 MiB read per file whatever the base's size, where hashing whole files would read the base
// (14 GB for a 7B model in bf16) once more each time. Other weights differ in every window; an
// edit confined to bytes between the windows is not seen.
//
// Pure functions over files; thread-safe; they block on reads.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/interchange/hf_checkpoint.h"

namespace hoist::runtime {

// {"files": [{"name", "bytes", "header_xxh64" (safetensors only), "data_xxh64"}, ...]} of `base`.
// Errors name the file that could not be read.
StatusOr<nlohmann::json> BaseIdentity(const WeightSource& base,
                                      FileSystem& fs = FileSystem::Posix());

// OK when `current` (BaseIdentity of the base at `base_path` now) is `saved` (the identity the
// checkpoint `checkpoint` recorded). Otherwise FailedPrecondition naming the checkpoint, the path
// and what changed: a file gone or new, its size, its header or its data; `saved` malformed is
// DataLoss naming the manifest field.
Status CheckSameBase(const nlohmann::json& saved, const nlohmann::json& current,
                     const std::string& base_path, const std::string& checkpoint);

// The manifest metadata field that holds the identity.
inline constexpr char kBaseIdentityField[] = "lora_base";

}  // namespace hoist::runtime

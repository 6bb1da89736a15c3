// The run's config beside its checkpoints: stored once per distinct config in the checkpoint
// directory as config_<XXH64 of its text>.json, and named from each step's manifest by that
// checksum, instead of being copied whole into every manifest (a 50 MB config made each
// checkpoint write 1.9 GB of manifest). Manifests written before this hold the config inline
// under metadata.config; nothing reads it to resume, so they resume as they did.
//
// Functions block on disk I/O through `fs` (core/file_system.h); calls for one directory must not
// run concurrently.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/file_system.h"
#include "core/status.h"

namespace hoist::runtime {

// The manifest metadata field that names the stored config.
inline constexpr char kConfigFileField[] = "config_file";

// Stores `text` (the config's compact JSON) in `dir` as config_<16 hex>.json unless a file of
// that name already holds it (else it is written atomically, replacing a damaged one), and
// returns the reference a manifest keeps: {"name": "config_<16 hex>.json", "bytes": n,
// "xxh64": "<16 hex>"}. Errors name the file.
StatusOr<nlohmann::json> StoreRunConfig(const std::string& dir, std::string_view text,
                                        FileSystem& fs = FileSystem::Posix());

// The text of the config `reference` (as StoreRunConfig returned it, read from a manifest) names
// in `dir`, its size and checksum checked: NotFound when the file is gone, DataLoss when the
// reference is malformed or the file holds something else.
StatusOr<std::string> ReadRunConfig(const std::string& dir, const nlohmann::json& reference,
                                    FileSystem& fs = FileSystem::Posix());

}  // namespace hoist::runtime

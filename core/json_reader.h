// The one reader of JSON that comes from outside the process: job configs, Hugging Face
// config.json, tokenizer.json and model.safetensors.index.json, PEFT adapter configs, checkpoint
// manifests, safetensors headers and the JSONL log read back on resume. Every document is bounded
// in size and in how deep its objects and arrays nest, and a key written twice in one object is
// refused (the parser would silently keep the last one).
//
// The depth bound is why this exists: nlohmann's parser accepts 150,000 nested brackets, and the
// tree it builds then overflows the stack of the code that copies, dumps or destroys it. The bound
// is checked on the text before any tree is built.
//
// Stateless functions; safe to call from any thread. Reading a file blocks on it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/file_system.h"
#include "core/status.h"

namespace hoist {

// Real documents nest a handful of levels (a tokenizer.json 5, a job config 4): 64 leaves room.
inline constexpr int kJsonMaxDepth = 64;
// Configs, manifests and adapter configs are kilobytes; 64 MiB is far beyond any real one and
// small enough that the parsed tree (several times the text) fits any host.
inline constexpr int64_t kJsonMaxBytes = int64_t{64} << 20;
// A tokenizer.json holds its whole vocabulary and merges: the largest real ones are ~35 MB.
inline constexpr int64_t kTokenizerJsonMaxBytes = int64_t{256} << 20;

struct JsonLimits {
  int max_depth = kJsonMaxDepth;
  int64_t max_bytes = kJsonMaxBytes;
};

// Why a parse failed, for a caller that treats the kinds differently (a `--set` value that is not
// JSON is read as a string, but one nested too deep is an error).
enum class JsonFault { kNone, kTooLarge, kTooDeep, kNotJson, kDuplicateKey };

// Parses `text` as JSON (RFC 8259). `source` names the document in every error ("<source>: ..."),
// which also names the limit exceeded, or the line and column of a syntax error, or the path of
// a duplicate key. `*fault`, when given, says which kind of failure it was.
StatusOr<nlohmann::json> ParseJson(std::string_view text, std::string_view source,
                                   const JsonLimits& limits = {}, JsonFault* fault = nullptr);

// Reads the regular file `path` and parses it as ParseJson does; a file larger than
// `limits.max_bytes` is refused before it is read.
StatusOr<nlohmann::json> ReadJsonFile(FileSystem& fs, const std::string& path,
                                      const JsonLimits& limits = {});

// "line L, column C" of byte `index` in `text` (1-based), for errors that point into a document.
std::string JsonWhere(std::string_view text, size_t index);

}  // namespace hoist

// JsonlLog: the per-step JSONL log of DESIGN.md (`monitor.jsonl.path`). One JSON object per line,
// flushed after each line so a crash loses at most the line being written and a tool may tail
// the file. `{rank}` in the path is replaced by the rank; a path without it is written by rank 0
// only (other ranks get a disabled log). Owns its file; not thread-safe; Write blocks on I/O.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"

namespace hoist::runtime {

// A per-rank output path: `{rank}` replaced by the rank. A path without `{rank}` belongs to rank
// 0 alone (nullopt on the others), and so does nothing for an empty path (nullopt).
std::optional<std::string> PathForRank(const std::string& path, int rank);

// For a log written by a checkpoint that did not record this rank's log length: the bytes of
// `path`'s log for `rank` up to the end of its last whole record of a step at or before `step`
// (the step records come in order; the scan stops at the first later step, the end record, or a
// broken line). -1 when this rank has no log or the file does not exist. Reads the file.
StatusOr<int64_t> JsonlBytesThroughStep(const std::string& path, int rank, int64_t step);

class JsonlLog {
 public:
  // An empty path gives a disabled log whose Write does nothing. A fresh run (resume_bytes < 0)
  // truncates the file. A resumed run passes the log's size at the checkpoint it resumes from:
  // the lines written after that checkpoint are cut, so the log reads as one uninterrupted run.
  static StatusOr<std::unique_ptr<JsonlLog>> Open(const std::string& path, int rank,
                                                  int64_t resume_bytes = -1);
  ~JsonlLog();
  JsonlLog(const JsonlLog&) = delete;
  JsonlLog& operator=(const JsonlLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }
  Status Write(const nlohmann::json& record);
  // Bytes in the file after the last Write (0 for a disabled log), for checkpoints.
  int64_t bytes() const { return bytes_; }

 private:
  JsonlLog() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace hoist::runtime

#include "runtime/observe/jsonl_log.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "core/json_reader.h"
#include "core/logging.h"
#include "core/posix_error.h"

namespace hoist::runtime {

std::optional<std::string> PathForRank(const std::string& path, int rank) {
  const std::string kRankToken = "{rank}";
  size_t at = path.find(kRankToken);
  if (path.empty() || (at == std::string::npos && rank != 0)) return std::nullopt;
  std::string resolved = path;
  while (at != std::string::npos) {
    resolved.replace(at, kRankToken.size(), std::to_string(rank));
    at = resolved.find(kRankToken);
  }
  return resolved;
}

StatusOr<int64_t> JsonlBytesThroughStep(const std::string& path, int rank, int64_t step) {
  const std::optional<std::string> mine = PathForRank(path, rank);
  if (!mine) return -1;
  std::ifstream in(*mine, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return -1;
    return PosixError("reading the JSONL log (monitor.jsonl.path)", *mine, errno);
  }
  int64_t kept = 0, offset = 0;
  for (std::string line; std::getline(in, line);) {
    // A last line without its newline was cut short by a crash.
    if (in.eof()) break;
    offset += static_cast<int64_t>(line.size()) + 1;
    // A line that does not parse (or nests too deep) ends what a resume keeps, as a torn one does.
    const StatusOr<nlohmann::json> parsed = ParseJson(line, *mine);
    if (!parsed.ok()) break;
    const nlohmann::json& record = *parsed;
    if (!record.is_object() || record.contains("event")) break;
    const auto it = record.find("step");
    if (it == record.end() || !it->is_number_integer() || it->get<int64_t>() > step) break;
    kept = offset;
  }
  return kept;
}

StatusOr<std::unique_ptr<JsonlLog>> JsonlLog::Open(const std::string& path, int rank,
                                                   int64_t resume_bytes) {
  std::unique_ptr<JsonlLog> log(new JsonlLog());
  const std::optional<std::string> mine = PathForRank(path, rank);
  if (!mine) return log;
  const std::string& resolved = *mine;
  log->path_ = resolved;
  if (resume_bytes >= 0) {
    std::error_code error;
    const auto size = std::filesystem::file_size(resolved, error);
    if (error || static_cast<int64_t>(size) < resume_bytes) {
      HOIST_LOG(WARN) << "the JSONL log " << resolved << " is shorter than at the checkpoint ("
                      << resume_bytes << " bytes); appending to what is there";
    } else if (::truncate(resolved.c_str(), resume_bytes) != 0) {
      return PosixError("truncating the JSONL log to the checkpoint", resolved, errno);
    }
  }
  log->file_ = std::fopen(resolved.c_str(), resume_bytes >= 0 ? "a" : "w");
  if (log->file_ == nullptr) {
    return PosixError("opening the JSONL log (monitor.jsonl.path)", resolved, errno);
  }
  log->bytes_ = std::ftell(log->file_);
  if (log->bytes_ < 0) log->bytes_ = 0;
  return log;
}

JsonlLog::~JsonlLog() {
  if (file_ != nullptr) std::fclose(file_);
}

Status JsonlLog::Write(const nlohmann::json& record) {
  if (file_ == nullptr) return Status::Ok();
  std::string line = record.dump();
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return PosixError("writing the JSONL log", path_, errno);
  }
  bytes_ += static_cast<int64_t>(line.size());
  return Status::Ok();
}

}  // namespace hoist::runtime

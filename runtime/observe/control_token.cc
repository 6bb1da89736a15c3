#include "runtime/observe/control_token.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "core/file_system.h"
#include "core/logging.h"
#include "core/posix_error.h"

namespace hoist::runtime {

std::string JobTokenPath(const std::string& checkpoint_dir) {
  if (checkpoint_dir.empty()) return kJobTokenFileName;
  return (std::filesystem::path(checkpoint_dir) / kJobTokenFileName).string();
}

StatusOr<std::string> NewControlToken() {
  unsigned char bytes[32];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("getrandom", "", errno).WithContext("making the control token");
    filled += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  token.reserve(2 * sizeof(bytes));
  for (const unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 0xf]);
  }
  return token;
}

Status WriteTokenFile(const std::string& path, const std::string& token) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) HOIST_RETURN_IF_ERROR(FileSystem::Posix().CreateDirs(parent.string()));
  const std::string temp = UniqueTempPath(path);
  // Created owner-only rather than chmod-ed after: the secret is never in a file others may open.
  // O_EXCL and O_NOFOLLOW: a name someone else planted there is an error, not a file written.
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return PosixError("open", temp, errno);
  Status status = [&]() -> Status {
    // The umask can only take bits away; this makes the mode exactly 0600.
    HOIST_POSIX_CALL(::fchmod(fd, 0600), temp);
    const std::string text = token + "\n";
    size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return PosixError("write", temp, errno);
      written += static_cast<size_t>(n);
    }
    HOIST_POSIX_CALL(::fsync(fd), temp);
    return Status::Ok();
  }();
  if (::close(fd) != 0 && status.ok()) status = PosixError("close", temp, errno);
  if (status.ok()) status = FileSystem::Posix().Rename(temp, path);
  if (!status.ok()) {
    (void)FileSystem::Posix().Remove(temp);
    return status;
  }
  // The rename is what makes the file visible; a crash that forgot it would only mean a job
  // whose token file is missing, so a failed directory sync is not worth failing the start.
  (void)FileSystem::Posix().SyncDir(parent.empty() ? std::string(".") : parent.string());
  return Status::Ok();
}

void RemoveTokenFile(const std::string& path, const std::string& token) {
  StatusOr<std::string> text = ReadFileToString(FileSystem::Posix(), path, 4096);
  if (text.ok() && *text == token + "\n") (void)FileSystem::Posix().Remove(path);
}

StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return PosixError("reading the bearer token", path, errno).WithContext(what);
  }
  StatusOr<std::string> text = ReadFileToString(FileSystem::Posix(), path);
  if (!text.ok()) return text.status().WithContext(what);
  std::string token = std::move(text).value();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) {
    return InvalidArgumentError(what + ": the token file " + path +
                                " is empty; write the bearer token into it (one line)");
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
    HOIST_LOG(WARN) << what << ": the token file " << path << " may be read by other users (mode "
                    << mode << "); chmod 600 it";
  }
  return token;
}

StatusOr<std::string> LoadControlToken(const ControlConfig& config) {
  if (!config.token_file.empty()) return ReadTokenFile(config.token_file, "control.token_file");
  const char* env = std::getenv("HOIST_CONTROL_TOKEN");
  return std::string(env == nullptr ? "" : env);
}

}  // namespace hoist::runtime

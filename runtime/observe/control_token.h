// The control service's bearer token: where a job takes it from (control.token_file, the
// environment), and the per-job token a loopback job makes for itself and leaves in a file that
// only its user can read, where `hoist ctl` finds it (ControlConfig::require_token).
//
// Free functions; thread-safe. The ones that touch files block on them.
#pragma once

#include <string>

#include "core/status.h"
#include "runtime/config/config.h"

namespace hoist::runtime {

// The name of the per-job token file.
inline constexpr char kJobTokenFileName[] = "control.token";

// Where a job writes the token it makes: <checkpoint_dir>/control.token, or control.token in the
// working directory when `checkpoint_dir` is empty. `hoist ctl` derives the same path from the
// job's config.
std::string JobTokenPath(const std::string& checkpoint_dir);

// A fresh token: 32 bytes from the kernel's random source as 64 hex digits.
StatusOr<std::string> NewControlToken();

// Replaces `path` with `token` and a newline so that a reader sees the old file or the new one:
// a temporary beside it, created with mode 0600 (never readable by others, whatever the umask),
// fsynced and renamed over it. Creates the missing parent directories. Errors name the file.
Status WriteTokenFile(const std::string& path, const std::string& token);

// Removes `path` if it still holds `token` (a later job may have replaced it); errors are
// ignored: the file is useless once its job has gone.
void RemoveTokenFile(const std::string& path, const std::string& token);

// The token in `path`, trailing newlines removed; `what` names the file's role in errors and in
// the warning about permissions ("control.token_file", "--token-file"). An empty file is an
// error; a file that group or others may read is served with a warning. Shared with `hoist ctl`.
StatusOr<std::string> ReadTokenFile(const std::string& path, const std::string& what);

// The token configured for the service: the contents of control.token_file when it is set, else
// the environment variable HOIST_CONTROL_TOKEN, else "" (none configured; a loopback job that
// requires a token then makes its own).
StatusOr<std::string> LoadControlToken(const ControlConfig& config);

}  // namespace hoist::runtime

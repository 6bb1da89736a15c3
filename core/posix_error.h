// Turns a failed system call into a Status that names the call, the file it touched and errno's
// meaning, in one place (the foreign-API error rule of STYLE.md). The message goes to users, so
// it names the operation ("open"), never the source statement around it.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace hoist {

// Status for `errno_value` after `what` failed on `path` (path may be empty). ENOSPC and EDQUOT
// map to kResourceExhausted with a hint to free space; ENOENT to kNotFound; others to kIoError.
Status PosixError(const std::string& what, const std::string& path, int errno_value);

// The system call a statement makes: "open" for `fd = ::open(path.c_str(), O_RDONLY)`.
std::string PosixCallName(std::string_view statement);

}  // namespace hoist

// `HOIST_POSIX_CALL(fd = ::open(p, O_RDONLY), p)` returns a PosixError Status naming the call
// ("open on 'p' failed: ...") if the expression's value is negative.
#define HOIST_POSIX_CALL(expr, path)                                                         \
  do {                                                                                       \
    if ((expr) < 0) {                                                                        \
      const int hoist_posix_errno_ = errno;                                                  \
      return ::hoist::PosixError(::hoist::PosixCallName(#expr), (path), hoist_posix_errno_); \
    }                                                                                        \
  } while (0)

#include "core/posix_error.h"

#include <cctype>
#include <cerrno>
#include <cstring>

namespace hoist {

Status PosixError(const std::string& what, const std::string& path, int errno_value) {
  std::string message = what;
  if (!path.empty()) message += " on '" + path + "'";
  message += " failed: ";
  message += std::strerror(errno_value);
  switch (errno_value) {
    case ENOSPC:
    case EDQUOT:
      return ResourceExhaustedError(message +
                                    " (free space on that file system or choose another path)");
    case ENOENT: return NotFoundError(message);
    default: return IoError(message);
  }
}

std::string PosixCallName(std::string_view statement) {
  // The identifier just before the first '(' is the function called; an assignment, a `::` or a
  // dereference in front of it are the caller's business.
  const std::string fallback = "system call";
  size_t end = statement.find('(');
  if (end == std::string_view::npos) return fallback;
  while (end > 0 && statement[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && (std::isalnum(static_cast<unsigned char>(statement[begin - 1])) ||
                       statement[begin - 1] == '_')) {
    --begin;
  }
  if (begin == end || std::isdigit(static_cast<unsigned char>(statement[begin]))) return fallback;
  return std::string(statement.substr(begin, end - begin));
}

}  // namespace hoist

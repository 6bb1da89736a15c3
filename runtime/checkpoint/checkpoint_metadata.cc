#include "runtime/checkpoint/checkpoint_metadata.h"

#include <cmath>
#include <sstream>

namespace hoist::runtime {
namespace {

std::string Shown(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return text.size() > 64 ? text.substr(0, 64) + "..." : text;
}

std::string Format(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

}  // namespace

const nlohmann::json* CheckpointMetadata::Find(const std::string& path) const {
  const nlohmann::json* at = &metadata_;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? dot : dot - begin);
    if (!at->is_object()) return nullptr;
    const auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
    if (dot == std::string::npos) return at;
    begin = dot + 1;
  }
}

Status CheckpointMetadata::Bad(const std::string& path, const std::string& what) const {
  return DataLossError("checkpoint " + step_dir_ + ": manifest field metadata." + path + " " +
                       what +
                       "; the manifest is damaged or was edited: resume from another step "
                       "directory");
}

std::optional<int64_t> IntegerIn(const nlohmann::json& value, int64_t min, int64_t max) {
  if (!value.is_number_integer()) return std::nullopt;
  int64_t number = 0;
  if (value.is_number_unsigned()) {
    const uint64_t unsigned_number = value.get<uint64_t>();
    if (unsigned_number > static_cast<uint64_t>(max)) return std::nullopt;
    number = static_cast<int64_t>(unsigned_number);
  } else {
    number = value.get<int64_t>();
    if (number > max) return std::nullopt;
  }
  if (number < min) return std::nullopt;
  return number;
}

StatusOr<int64_t> CheckpointMetadata::Integer(const std::string& path, int64_t min,
                                              int64_t max) const {
  const nlohmann::json* value = Find(path);
  if (value == nullptr) return Bad(path, "is missing");
  if (!value->is_number_integer()) return Bad(path, "= " + Shown(*value) + " is not an integer");
  const std::optional<int64_t> number = IntegerIn(*value, min, max);
  if (!number) {
    return Bad(path, "= " + Shown(*value) + " is outside [" + std::to_string(min) + ", " +
                         std::to_string(max) + "]");
  }
  return *number;
}

StatusOr<double> CheckpointMetadata::Number(const std::string& path, double min, double max,
                                            bool min_exclusive) const {
  const nlohmann::json* value = Find(path);
  if (value == nullptr) return Bad(path, "is missing");
  if (!value->is_number()) return Bad(path, "= " + Shown(*value) + " is not a number");
  const double number = value->get<double>();
  const bool above = min_exclusive ? number > min : number >= min;
  if (!std::isfinite(number) || !above || number > max) {
    return Bad(path, "= " + Shown(*value) + " is outside " + (min_exclusive ? "(" : "[") +
                         Format(min) + ", " + Format(max) + "]");
  }
  return number;
}

StatusOr<std::optional<double>> CheckpointMetadata::NullableNumber(const std::string& path,
                                                                   double min, double max,
                                                                   bool min_exclusive) const {
  const nlohmann::json* value = Find(path);
  if (value != nullptr && value->is_null()) return std::optional<double>();
  HOIST_ASSIGN_OR_RETURN(double number, Number(path, min, max, min_exclusive));
  return std::optional<double>(number);
}

}  // namespace hoist::runtime

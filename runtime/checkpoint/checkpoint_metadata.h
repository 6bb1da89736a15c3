// CheckpointMetadata: typed, range-checked reads of a checkpoint manifest's "metadata" object,
// the run's counters and hyperparameters that a resume puts back into the trainer. A value that is
// missing, of the wrong type, not finite or out of its range is DataLoss naming the checkpoint
// directory and the field ("metadata.control.lr_override"), so that a damaged or edited manifest
// never trains with the value it holds. Fields are named by dotted paths. Borrows the JSON; cheap
// to copy; const methods are thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"

namespace hoist::runtime {

// `value` as an int64 when it is an integer in [min, max]; nullopt otherwise. nlohmann keeps
// non-negative literals as unsigned, where get<int64_t> would wrap the huge ones.
std::optional<int64_t> IntegerIn(const nlohmann::json& value, int64_t min, int64_t max);

class CheckpointMetadata {
 public:
  CheckpointMetadata(const nlohmann::json& metadata, const std::string& step_dir)
      : metadata_(metadata), step_dir_(step_dir) {}

  // The value at `path`, or nullptr when it (or an object on the way) is not there.
  const nlohmann::json* Find(const std::string& path) const;
  // An integer in [min, max].
  StatusOr<int64_t> Integer(const std::string& path, int64_t min,
                            int64_t max = std::numeric_limits<int64_t>::max()) const;
  // A finite number in [min, max], or in (min, max] when `min_exclusive`.
  StatusOr<double> Number(const std::string& path, double min, double max,
                          bool min_exclusive = false) const;
  // Number's checks, where the value may also be null (nullopt).
  StatusOr<std::optional<double>> NullableNumber(const std::string& path, double min, double max,
                                                 bool min_exclusive = false) const;

  // The DataLoss for field `path` and what is wrong with it.
  Status Bad(const std::string& path, const std::string& what) const;

 private:
  const nlohmann::json& metadata_;
  const std::string& step_dir_;
};

}  // namespace hoist::runtime

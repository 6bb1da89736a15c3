#include "comm/agree.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace hoist::comm {

Status AgreeOnStatus(Communicator& comm, const Status& local) {
  if (comm.world_size() == 1) return local;
  float failed = local.ok() ? 0.0f : 1.0f;
  HOIST_RETURN_IF_ERROR(comm.AllReduce(&failed, 1, DType::kFloat32, ReduceOp::kSum));
  if (failed == 0.0f) return Status::Ok();
  // Someone failed: every rank learns every rank's message. The bytes ride in floats; a gather
  // copies them without arithmetic.
  constexpr int64_t kWords = 128;
  constexpr size_t kBytes = kWords * sizeof(float);
  std::vector<float> mine(kWords, 0.0f);
  std::vector<float> all(static_cast<size_t>(kWords * comm.world_size()), 0.0f);
  const std::string text = local.ok() ? std::string() : local.ToString();
  std::memcpy(mine.data(), text.data(), std::min(text.size(), kBytes - 1));
  HOIST_RETURN_IF_ERROR(comm.AllGather(mine.data(), all.data(), kWords, DType::kFloat32));
  if (!local.ok()) return local;
  for (int r = 0; r < comm.world_size(); ++r) {
    const char* bytes = reinterpret_cast<const char*>(all.data() + r * kWords);
    const std::string message(bytes, strnlen(bytes, kBytes));
    if (!message.empty())
      return UnavailableError("rank " + std::to_string(r) + " failed: " + message);
  }
  return InternalError("a rank reported a failure without a message");
}

}  // namespace hoist::comm

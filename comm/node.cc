#include "comm/node.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace hoist::comm {

StatusOr<NodeCounts> CountRanksPerNode(Communicator& comm) {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  const uint64_t hash = std::hash<std::string>{}(name);
  // Three 16-bit pieces, each exact in a float.
  const float mine[3] = {float(hash & 0xffff), float((hash >> 16) & 0xffff),
                         float((hash >> 32) & 0xffff)};
  const int world = comm.world_size();
  std::vector<float> all(static_cast<size_t>(3 * world));
  HOIST_RETURN_IF_ERROR(comm.AllGather(mine, all.data(), 3, DType::kFloat32));
  auto same_node = [&](int a, int b) {
    return std::equal(all.begin() + 3 * a, all.begin() + 3 * a + 3, all.begin() + 3 * b);
  };
  NodeCounts counts;
  counts.most_on_a_node = 0;
  for (int r = 0; r < world; ++r) {
    int same = 0;
    for (int q = 0; q < world; ++q) same += same_node(r, q) ? 1 : 0;
    counts.most_on_a_node = std::max(counts.most_on_a_node, same);
    if (r == comm.rank()) counts.on_this_node = same;
  }
  return counts;
}

StatusOr<int> CountRanksSharingCpus(Communicator& comm) {
  // A fixed record per rank: the host name's hash and the affinity mask. The all-gather copies
  // bits; float32 elements only size it.
  struct Record {
    uint64_t host = 0;
    cpu_set_t cpus;
  };
  static_assert(sizeof(Record) % sizeof(float) == 0);
  Record mine;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  mine.host = std::hash<std::string>{}(name);
  CPU_ZERO(&mine.cpus);
  if (sched_getaffinity(0, sizeof(mine.cpus), &mine.cpus) != 0) CPU_ZERO(&mine.cpus);
  std::vector<Record> all(static_cast<size_t>(comm.world_size()));
  HOIST_RETURN_IF_ERROR(
      comm.AllGather(&mine, all.data(), sizeof(Record) / sizeof(float), DType::kFloat32)
          .WithContext("comparing the CPUs each rank runs on"));
  int sharing = 0;
  for (const Record& other : all) {
    if (other.host != mine.host) continue;
    cpu_set_t both;
    CPU_AND(&both, &other.cpus, &mine.cpus);
    // An unknown mask (all clear) shares with every rank of the machine.
    const bool unknown = CPU_COUNT(&mine.cpus) == 0 || CPU_COUNT(&other.cpus) == 0;
    if (unknown || CPU_COUNT(&both) > 0) ++sharing;
  }
  return std::max(1, sharing);
}

Status RefuseSharedResource(Communicator& comm, const std::string& mine, const std::string& what) {
  // A fixed record per rank: the name's first bytes, zero-padded. The all-gather copies bits;
  // float32 elements only size it.
  constexpr size_t kBytes = 256;
  constexpr int64_t kWords = kBytes / sizeof(float);
  std::vector<char> all(kBytes * static_cast<size_t>(comm.world_size()));
  char record[kBytes] = {};
  std::memcpy(record, mine.data(), std::min(mine.size(), kBytes - 1));
  HOIST_RETURN_IF_ERROR(comm.AllGather(record, all.data(), kWords, DType::kFloat32)
                            .WithContext("comparing the " + what + " each rank uses"));
  if (record[0] == '\0') return Status::Ok();
  for (int r = 0; r < comm.world_size(); ++r) {
    if (r == comm.rank()) continue;
    if (std::memcmp(all.data() + kBytes * static_cast<size_t>(r), record, kBytes) == 0) {
      return UnavailableError("rank " + std::to_string(comm.rank()) + " and rank " +
                              std::to_string(r) + " would both use " + what + " " + record);
    }
  }
  return Status::Ok();
}

}  // namespace hoist::comm

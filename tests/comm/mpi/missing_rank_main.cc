// Run under mpirun by CTest (tests/comm/mpi/expect_abort.cmake): the last rank creates its
// communicator but never joins the all-reduce. Every other rank must fail within the timeout with
// a message naming the op, itself, the bytes and the missing rank, print "CHECKED", and abort the
// job, so mpirun exits non-zero instead of hanging. The missing rank gives up after 60 s with
// "NOT ENDED", which fails the test too.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/world.h"
#include "core/rank_env.h"

int main() {
  using hoist::DType;
  using hoist::comm::ReduceOp;
  auto env = hoist::DiscoverRankEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "UNEXPECTED: %s\n", env.status().ToString().c_str());
    return 1;
  }
  hoist::comm::WorldOptions options;
  options.timeout_s = 1.0;
  auto comm = hoist::comm::CreateWorldCommunicator(*env, options);
  if (!comm.ok()) {
    std::fprintf(stderr, "UNEXPECTED: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int missing = env->world_size - 1;
  if (env->rank == missing) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::fprintf(stderr, "NOT ENDED: rank %d was still running 60 s later\n", env->rank);
    return 1;
  }
  std::vector<float> buf(10, 1.0f);
  hoist::Status s = (*comm)->AllReduce(buf.data(), 10, DType::kFloat32, ReduceOp::kSum);
  const std::string& m = s.message();
  const std::string me =
      "on rank " + std::to_string(env->rank) + " of " + std::to_string(env->world_size);
  const bool named = s.code() == hoist::StatusCode::kDeadlineExceeded &&
                     m.find("AllReduce(sum, 10 x fp32, 40 bytes)") != std::string::npos &&
                     m.find(me) != std::string::npos &&
                     m.find("did not arrive: " + std::to_string(missing)) != std::string::npos;
  std::fprintf(stderr, "%s rank %d: %s\n", named ? "CHECKED" : "UNEXPECTED", env->rank,
               s.ToString().c_str());
  (*comm)->Abort(s, 3);
  return 1;  // not reached: Abort ends the job
}

#include "comm/world.h"

#include <cstdlib>
#include <string>

#include "comm/shm_communicator.h"
#include "comm/thread_communicator.h"
#ifdef HOIST_HAVE_MPI
#include "comm/mpi_communicator.h"
#endif

namespace hoist::comm {
namespace {

// A one-rank ThreadGroup, owned: every collective is a local copy, run on the group's queue.
class SelfCommunicator : public Communicator {
 public:
  explicit SelfCommunicator(std::unique_ptr<ThreadGroup> group)
      : group_(std::move(group)), comm_(group_->comm(0)) {}

  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status AllReduce(void* buf, int64_t count, DType type, ReduceOp op) override {
    return comm_.AllReduce(buf, count, type, op);
  }
  Status ReduceScatter(const void* send, void* recv, int64_t recv_count, DType type,
                       ReduceOp op) override {
    return comm_.ReduceScatter(send, recv, recv_count, type, op);
  }
  Status AllGather(const void* send, void* recv, int64_t send_count, DType type) override {
    return comm_.AllGather(send, recv, send_count, type);
  }
  Status Broadcast(void* buf, int64_t count, DType type, int root) override {
    return comm_.Broadcast(buf, count, type, root);
  }
  Status Barrier() override { return comm_.Barrier(); }
  CommHandle AllReduceAsync(void* buf, int64_t count, DType type, ReduceOp op) override {
    return comm_.AllReduceAsync(buf, count, type, op);
  }
  CommHandle ReduceScatterAsync(const void* send, void* recv, int64_t recv_count, DType type,
                                ReduceOp op) override {
    return comm_.ReduceScatterAsync(send, recv, recv_count, type, op);
  }
  CommHandle AllGatherAsync(const void* send, void* recv, int64_t send_count, DType type) override {
    return comm_.AllGatherAsync(send, recv, send_count, type);
  }
  CommHandle BroadcastAsync(void* buf, int64_t count, DType type, int root) override {
    return comm_.BroadcastAsync(buf, count, type, root);
  }
  void Abort(const Status& reason, int exit_code) override { comm_.Abort(reason, exit_code); }

 private:
  std::unique_ptr<ThreadGroup> group_;
  Communicator& comm_;
};

bool IsMpiLauncher(const RankEnv& env) {
  return env.source != "hoist launch" && env.source != "none";
}

StatusOr<std::unique_ptr<Communicator>> CreateMpi(const RankEnv& env, double timeout_s) {
#ifdef HOIST_HAVE_MPI
  return CreateMpiCommunicator(env, timeout_s);
#else
  (void)timeout_s;
  return UnimplementedError(
      "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
      " was started by " + env.source +
      ", which needs the MPI backend, but this build of hoist has none: install Open MPI "
      "(scripts/install-deps --mpi) and rebuild with -DHOIST_WITH_MPI=ON, or start the ranks on "
      "one node with `hoist launch -n " +
      std::to_string(env.world_size) + " -- ...`");
#endif
}

StatusOr<std::unique_ptr<Communicator>> CreateShm(const RankEnv& env, double timeout_s) {
  const char* job_id = std::getenv("HOIST_JOB_ID");
  if (job_id == nullptr || *job_id == '\0') {
    return FailedPreconditionError(
        "the shared-memory comm backend needs HOIST_JOB_ID, which `hoist launch` sets for its "
        "ranks; start the job with `hoist launch -n " +
        std::to_string(env.world_size) + " -- ...` (or under mpirun with an MPI build)");
  }
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE")) {
    if (std::string(local) != std::to_string(env.world_size)) {
      return FailedPreconditionError(
          std::string("LOCAL_WORLD_SIZE=") + local +
          " but WORLD_SIZE=" + std::to_string(env.world_size) +
          ": the ranks span nodes, and the shared-memory backend works on one node only; launch "
          "multi-node jobs with mpirun or srun and an MPI build");
    }
  }
  ShmOptions options;
  options.job_id = job_id;
  options.rank = env.rank;
  options.world_size = env.world_size;
  options.timeout_s = timeout_s;
  return CreateShmCommunicator(options);
}

}  // namespace

bool HaveMpiBackend() {
#ifdef HOIST_HAVE_MPI
  return true;
#else
  return false;
#endif
}

StatusOr<std::unique_ptr<Communicator>> CreateSelfCommunicator(double timeout_s) {
  HOIST_ASSIGN_OR_RETURN(auto group, ThreadGroup::Create(1, timeout_s));
  return std::unique_ptr<Communicator>(std::make_unique<SelfCommunicator>(std::move(group)));
}

StatusOr<std::unique_ptr<Communicator>> CreateWorldCommunicator(const RankEnv& env,
                                                                const WorldOptions& options) {
  if (!(options.timeout_s > 0)) {
    return InvalidArgumentError("comm timeout_s must be positive, got " +
                                std::to_string(options.timeout_s));
  }
  if (options.backend == "mpi") return CreateMpi(env, options.timeout_s);
  if (options.backend == "shm") return CreateShm(env, options.timeout_s);
  if (options.backend != "auto") {
    return InvalidArgumentError("comm backend '" + options.backend +
                                "' is not one of auto, mpi, shm");
  }
  if (env.world_size == 1) return CreateSelfCommunicator(options.timeout_s);
  if (IsMpiLauncher(env)) return CreateMpi(env, options.timeout_s);
  return CreateShm(env, options.timeout_s);
}

}  // namespace hoist::comm

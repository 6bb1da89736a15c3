// Bandwidth of hoist's host collectives against the raw MPI calls on the same buffers, in the same
// run: AllReduce, ReduceScatter and AllGather of fp32 from 4 KiB to 64 MiB.
//
// Sizes, algorithm and bus bandwidth are those of nccl-tests (doc/PERFORMANCE.md): S is the whole
// array (for ReduceScatter and AllGather, the per-rank block times the ranks), algbw = S / t,
// busbw = algbw * 2(n-1)/n for AllReduce and * (n-1)/n for the other two. t is the slowest rank's
// mean time per call over a batch; each cell is the median of --repeats batches, with the
// implementations interleaved inside each repeat so that drift of the machine hits them alike.
// Columns: our MPI communicator (blocking call, which runs on the caller's thread when nothing is
// queued), the raw blocking MPI call, and our shared-memory communicator between the same
// processes; the ratios are bandwidth ratios against raw MPI (1.00 = equal, > 1 = faster).
//
//   mpirun -np 4 comm_bench [--repeats N] [--max-bytes B] [--no-shm]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/shm_communicator.h"
#include "comm/world.h"
#include "core/rank_env.h"

#ifdef HOIST_HAVE_MPI
#include <mpi.h>

namespace {

using hoist::DType;
using hoist::comm::Communicator;
using hoist::comm::ReduceOp;
using Clock = std::chrono::steady_clock;

enum class Op { kAllReduce, kReduceScatter, kAllGather };

const char* Name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "AllReduce";
    case Op::kReduceScatter: return "ReduceScatter";
    case Op::kAllGather: return "AllGather";
  }
  return "?";
}

double BusFactor(Op op, int n) {
  return op == Op::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

void Check(const hoist::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "comm_bench: %s: %s\n", what, s.ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

// Mean seconds per call of `call` over `iters` calls, the slowest rank's.
double TimeBatch(const std::function<void()>& call, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) call();
  double mine = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  int64_t max_bytes = int64_t{64} << 20;
  bool with_shm = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--max-bytes" && i + 1 < argc) {
      max_bytes = std::atoll(argv[++i]);
    } else if (arg == "--no-shm") {
      with_shm = false;
    } else {
      std::fprintf(stderr,
                   "usage: mpirun -np N comm_bench [--repeats N] [--max-bytes B] [--no-shm]\n");
      return 2;
    }
  }
  auto env = hoist::DiscoverRankEnv();
  if (!env.ok() || env->world_size < 2 || env->source == "hoist launch") {
    std::fprintf(stderr, "comm_bench: run it under mpirun with 2 or more ranks (%s)\n",
                 env.ok() ? env->source.c_str() : env.status().ToString().c_str());
    return 2;
  }
  hoist::comm::WorldOptions options;
  options.timeout_s = 300;
  options.backend = "mpi";
  auto created = hoist::comm::CreateWorldCommunicator(*env, options);
  Check(created.status(), "creating the MPI communicator");
  std::unique_ptr<Communicator> ours = std::move(created).value();
  const int n = ours->world_size();
  const int rank = ours->rank();

  std::unique_ptr<Communicator> shm;
  if (with_shm) {
    // All ranks must be on one node for the shared-memory backend; the job id comes from rank 0.
    long job = rank == 0 ? static_cast<long>(getpid()) : 0;
    MPI_Bcast(&job, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    hoist::comm::ShmOptions shm_options;
    shm_options.job_id = "comm-bench-" + std::to_string(job);
    shm_options.rank = rank;
    shm_options.world_size = n;
    shm_options.timeout_s = 300;
    auto made = hoist::comm::CreateShmCommunicator(shm_options);
    Check(made.status(), "creating the shared-memory communicator");
    shm = std::move(made).value();
  }
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);

  if (rank == 0) {
    std::printf(
        "comm_bench: %d ranks, fp32, median of %d repeats; times in us, bandwidths in GB/s\n", n,
        repeats);
  }
  for (Op op : {Op::kAllReduce, Op::kReduceScatter, Op::kAllGather}) {
    if (rank == 0) {
      std::printf("\n%s (busbw = algbw * %.3f)\n", Name(op), BusFactor(op, n));
      std::printf("%10s %10s | %9s %9s %9s | %8s %8s %8s | %7s %7s\n", "bytes", "elements",
                  "ours_us", "raw_us", "shm_us", "ours_bus", "raw_bus", "shm_bus", "ours/raw",
                  "shm/raw");
    }
    for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      const int64_t total = bytes / 4;  // elements of the whole array
      const int64_t block = total / n;  // ReduceScatter's recv and AllGather's send count
      const int64_t count = op == Op::kAllReduce ? total : block * n;
      const int64_t size_bytes = count * 4;
      std::vector<float> a(count, 0.0f), b(count, 0.0f);
      std::vector<std::function<void()>> calls;
      switch (op) {
        case Op::kAllReduce:
          calls.push_back([&] {
            Check(ours->AllReduce(a.data(), count, DType::kFloat32, ReduceOp::kSum), "AllReduce");
          });
          calls.push_back([&] {
            MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, raw);
          });
          if (shm)
            calls.push_back([&] {
              Check(shm->AllReduce(a.data(), count, DType::kFloat32, ReduceOp::kSum),
                    "shm AllReduce");
            });
          break;
        case Op::kReduceScatter:
          calls.push_back([&] {
            Check(ours->ReduceScatter(a.data(), b.data(), block, DType::kFloat32, ReduceOp::kSum),
                  "ReduceScatter");
          });
          calls.push_back([&] {
            MPI_Reduce_scatter_block(a.data(), b.data(), static_cast<int>(block), MPI_FLOAT,
                                     MPI_SUM, raw);
          });
          if (shm)
            calls.push_back([&] {
              Check(shm->ReduceScatter(a.data(), b.data(), block, DType::kFloat32, ReduceOp::kSum),
                    "shm ReduceScatter");
            });
          break;
        case Op::kAllGather:
          calls.push_back([&] {
            Check(ours->AllGather(a.data(), b.data(), block, DType::kFloat32), "AllGather");
          });
          calls.push_back([&] {
            MPI_Allgather(a.data(), static_cast<int>(block), MPI_FLOAT, b.data(),
                          static_cast<int>(block), MPI_FLOAT, raw);
          });
          if (shm)
            calls.push_back([&] {
              Check(shm->AllGather(a.data(), b.data(), block, DType::kFloat32), "shm AllGather");
            });
          break;
      }
      // Batch size from a warm-up call of raw MPI: about 30 ms per batch, 2 to 200 calls.
      for (auto& call : calls) call();
      const double probe = TimeBatch(calls[1], 1);
      int iters = static_cast<int>(0.03 / std::max(probe, 1e-7));
      iters = std::clamp(iters, 2, 200);
      MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
      std::vector<std::vector<double>> times(calls.size());
      for (int rep = 0; rep < repeats; ++rep) {
        for (size_t c = 0; c < calls.size(); ++c) times[c].push_back(TimeBatch(calls[c], iters));
      }
      if (rank != 0) continue;
      double t[3] = {0, 0, 0};
      double bus[3] = {0, 0, 0};
      for (size_t c = 0; c < calls.size(); ++c) {
        t[c] = Median(times[c]);
        bus[c] = size_bytes / t[c] * BusFactor(op, n) / 1e9;
      }
      std::printf("%10lld %10lld | %9.1f %9.1f %9.1f | %8.3f %8.3f %8.3f | %7.2f %7.2f\n",
                  static_cast<long long>(size_bytes), static_cast<long long>(count), t[0] * 1e6,
                  t[1] * 1e6, t[2] * 1e6, bus[0], bus[1], bus[2], t[1] / t[0],
                  shm ? t[1] / t[2] : 0.0);
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&raw);
  return 0;
}

#else  // !HOIST_HAVE_MPI

int main() {
  std::fprintf(stderr,
               "comm_bench compares hoist's collectives with raw MPI and needs an MPI build: "
               "scripts/install-deps --mpi, then configure with -DHOIST_WITH_MPI=ON\n");
  return 2;
}

#endif

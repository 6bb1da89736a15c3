// NCCL 1-rank all-reduce throughput next to a device-to-device copy of the same bytes, measured
// in the same run. With one rank an all-reduce moves nothing between GPUs: in place it may be a
// no-op launch, out of place (ReduceScatter with one rank is exactly that) it is a copy, so the
// copy is the ceiling and the ratio shows NCCL's per-call overhead and its copy kernel's speed.
// Prints one line per size; exits non-zero when something fails or no GPU is visible.
//
//   nccl_allreduce_bench [iterations]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/nccl_communicator.h"
#include "comm/thread_communicator.h"
#include "core/cuda/cuda_device.h"
#include "core/cuda/cuda_status.h"
#include "core/cuda/event.h"
#include "core/cuda/stream.h"

namespace hoist::comm {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `issue` (which enqueues on `stream` and returns once it may be timed) warmup + n times
// between two timed events; returns the median milliseconds.
StatusOr<double> TimeOnStream(const CudaStream& stream, int iterations,
                              const std::function<Status()>& issue) {
  HOIST_ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(EventTiming::kEnabled));
  HOIST_ASSIGN_OR_RETURN(CudaEvent end, CudaEvent::Create(EventTiming::kEnabled));
  std::vector<double> ms;
  for (int i = 0; i < iterations + 3; ++i) {
    HOIST_RETURN_IF_ERROR(start.Record(stream));
    HOIST_RETURN_IF_ERROR(issue());
    HOIST_RETURN_IF_ERROR(end.Record(stream));
    HOIST_RETURN_IF_ERROR(end.Synchronize());
    HOIST_ASSIGN_OR_RETURN(float elapsed, CudaEvent::ElapsedMs(start, end));
    if (i >= 3) ms.push_back(elapsed);
  }
  return Median(ms);
}

// Host wall time of the blocking form, polling included.
StatusOr<double> TimeBlocking(int iterations, const std::function<Status()>& call) {
  std::vector<double> ms;
  for (int i = 0; i < iterations + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    HOIST_RETURN_IF_ERROR(call());
    auto t1 = std::chrono::steady_clock::now();
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return Median(ms);
}

double GBps(int64_t bytes, double ms) { return static_cast<double>(bytes) / (ms * 1e6); }

Status Run(int iterations) {
  if (CudaDeviceCount() == 0) {
    return UnavailableError("no CUDA GPU visible (driver " + CudaDriverVersionString() + ")");
  }
  HOIST_ASSIGN_OR_RETURN(auto group, ThreadGroup::Create(1, 60.0));
  HOIST_ASSIGN_OR_RETURN(auto comm, NcclCommunicator::Create(&group->comm(0), NcclOptions{}));
  HOIST_ASSIGN_OR_RETURN(auto device, CudaDevice::Open(comm->device()));
  HOIST_ASSIGN_OR_RETURN(CudaStream copy_stream, CudaStream::Create());
  std::printf(
      "device %s, %d timed iterations after 3 warm-ups, medians; GB/s = buffer bytes / "
      "time (a copy reads and writes each byte: x2 for DRAM traffic)\n",
      device->name().c_str(), iterations);
  std::printf("%10s %12s %12s %12s %12s %12s %10s %10s\n", "bytes", "memcpy_GB/s", "ar_inplace",
              "ar_blocking", "rs_outplace", "ar_us", "ar/memcpy", "rs/memcpy");
  for (int64_t bytes :
       {int64_t{1} << 20, int64_t{16} << 20, int64_t{256} << 20, int64_t{1} << 30}) {
    const int64_t count = bytes / 4;
    HOIST_ASSIGN_OR_RETURN(Buffer a, device->Allocate(bytes, Category::kComm));
    HOIST_ASSIGN_OR_RETURN(Buffer b, device->Allocate(bytes, Category::kComm));
    // Non-zero data: 0x3F3F3F3F is 0.747 as fp32.
    HOIST_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.data(), 0x3F, bytes, copy_stream.get()));
    HOIST_RETURN_IF_ERROR(copy_stream.Synchronize());

    HOIST_ASSIGN_OR_RETURN(
        double copy_ms, TimeOnStream(copy_stream, iterations, [&]() -> Status {
          HOIST_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.data(), a.data(), bytes,
                                                     cudaMemcpyDeviceToDevice, copy_stream.get()));
          return Status::Ok();
        }));
    // The handles are waited for after the timing: the end event is recorded behind each.
    std::vector<CommHandle> pending;
    HOIST_ASSIGN_OR_RETURN(
        double ar_ms, TimeOnStream(comm->stream(), iterations, [&]() {
          pending.push_back(comm->AllReduceAsync(a.data(), count, DType::kFloat32, ReduceOp::kSum));
          return Status::Ok();
        }));
    HOIST_ASSIGN_OR_RETURN(double rs_ms, TimeOnStream(comm->stream(), iterations, [&]() {
                             pending.push_back(comm->ReduceScatterAsync(
                                 a.data(), b.data(), count, DType::kFloat32, ReduceOp::kSum));
                             return Status::Ok();
                           }));
    for (CommHandle& handle : pending) HOIST_RETURN_IF_ERROR(handle->Wait());
    HOIST_ASSIGN_OR_RETURN(double blocking_ms, TimeBlocking(iterations, [&]() {
                             return comm->AllReduce(a.data(), count, DType::kFloat32,
                                                    ReduceOp::kSum);
                           }));
    std::printf("%10lld %12.1f %12.1f %12.1f %12.1f %12.1f %10.3f %10.3f\n",
                static_cast<long long>(bytes), GBps(bytes, copy_ms), GBps(bytes, ar_ms),
                GBps(bytes, blocking_ms), GBps(bytes, rs_ms), ar_ms * 1e3, copy_ms / ar_ms,
                copy_ms / rs_ms);
  }
  return Status::Ok();
}

}  // namespace
}  // namespace hoist::comm

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  hoist::Status status = hoist::comm::Run(iterations);
  if (!status.ok()) {
    std::fprintf(stderr, "nccl_allreduce_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

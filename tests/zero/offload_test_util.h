// What the offload tests share: a scratch directory for the NVMe files, the toy runs with the
// optimizer states or the parameter shards offloaded, a storage fault and the message it must
// produce, and one rank's engine with its parameters offloaded on the threaded test backend.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "offload/fault_injecting_storage.h"
#include "tests/zero/zero_test_util.h"

namespace hoist::zero::zero_test {

// A fresh directory for one test's scratch files, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "hoist-offload-XXXXXX").string();
    HOIST_CHECK(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string File(int rank) const { return path_ + "/rank" + std::to_string(rank) + ".swp"; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline RunOptions Base(int stage, int world, DType type) {
  RunOptions run;
  run.world = world;
  run.zero.stage = stage;
  run.zero.compute_type = type;
  run.zero.comm_type = type;
  run.zero.stage3_param_persistence_threshold = 10;
  run.zero.adam.weight_decay = 0.1f;
  return run;
}

// The same run with the optimizer states in `place`, NVMe files under `dir`.
inline RunOptions Offloaded(RunOptions run, Placement place, const ScratchDir& dir,
                            int64_t sub_group_size = 1000000000, int buffer_count = 4) {
  run.zero.offload_optimizer.place = place;
  run.zero.offload_optimizer.sub_group_size = sub_group_size;
  run.zero.offload_optimizer.buffer_count = buffer_count;
  const std::string root = dir.path();
  run.per_rank = [root](int rank, ZeroOptions& options) {
    options.offload_optimizer.nvme_file = root + "/rank" + std::to_string(rank) + ".swp";
  };
  return run;
}

// Stage 3 with the parameter shards in host memory or on NVMe (units beyond max_in_cpu elements
// in the file), with or without the optimizer states offloaded too.
inline RunOptions ParamsOffloaded(RunOptions run, Placement params, Placement states,
                                  const ScratchDir& dir, int64_t max_in_cpu, int buffer_count) {
  run.zero.offload_param.place = params;
  run.zero.offload_param.max_in_cpu = max_in_cpu;
  run.zero.offload_param.buffer_count = buffer_count;
  run.zero.offload_optimizer.place = states;
  run.zero.offload_optimizer.sub_group_size = 40;
  const std::string root = dir.path();
  run.per_rank = [root](int rank, ZeroOptions& options) {
    options.offload_optimizer.nvme_file = root + "/opt" + std::to_string(rank) + ".swp";
    options.offload_param.nvme_file = root + "/param" + std::to_string(rank) + ".swp";
  };
  return run;
}

// A storage fault and what the failing rank's message must contain.
struct FaultCase {
  const char* name;
  offload::StorageFault fault;
  const char* expect;  // in the failing rank's message
};

// One rank's stage-3 engine in bf16 with its parameter shards in `place` (on NVMe, every shard
// in the file `dir.File(file)`) and the optimizer states on the device, on the test backend
// whose streams are worker threads (an accelerator's stand-in while live_memory is on).
class ParamOffloadedEngine {
 public:
  ParamOffloadedEngine(Placement place, const ScratchDir& dir, int file = 0)
      : units_(ToyUnits()),
        device_(Place::kDevice, &tracker_),
        backend_(&device_, HostStream::Mode::kThreaded) {
    options_ =
        ParamsOffloaded(Base(3, 1, DType::kBFloat16), place, Placement::kDevice, dir, 0, 2).zero;
    options_.offload_param.nvme_file = dir.File(file);
    auto group = comm::ThreadGroup::Create(1, 30.0);
    HOIST_CHECK(group.ok()) << group.status().ToString();
    group_ = std::move(group).value();
    auto engine = ZeroEngine::Create(units_, options_, &group_->comm(0), &backend_);
    status_ = engine.status();
    if (engine.ok()) engine_ = std::move(engine).value();
  }

  // Create's status; the engine exists only where it is ok.
  const Status& status() const { return status_; }
  ZeroEngine& engine() { return *engine_; }
  const ZeroOptions& options() const { return options_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  MemoryTracker& tracker() { return tracker_; }
  const Stream& stream() const { return backend_.compute_stream(); }

  // Unit u's weights as AcquireParams serves them, widened (zeros where it served none).
  std::vector<float> Weights(int u) {
    std::vector<float> w(static_cast<size_t>(units_[static_cast<size_t>(u)].size));
    const void* weights = engine_->AcquireParams(u).value();
    EXPECT_NE(weights, nullptr) << "unit " << u;
    EXPECT_TRUE(stream().Synchronize().ok());
    if (weights != nullptr)
      kernels::cpu::ToFloat(weights, engine_->param_type(), w.data(), w.size());
    engine_->ReleaseParams(u);
    return w;
  }

 private:
  std::vector<UnitSpec> units_;
  std::unique_ptr<comm::ThreadGroup> group_;
  MemoryTracker tracker_;
  CpuDevice device_;
  kernels::CpuBackend backend_;
  ZeroOptions options_;
  Status status_;
  std::unique_ptr<ZeroEngine> engine_;  // last: gone before what it uses
};

}  // namespace hoist::zero::zero_test

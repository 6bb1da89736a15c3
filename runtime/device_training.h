// DeviceTraining: the model and optimizer of a run whose whole step lives on an accelerator (the
// GPU path, runtime/cuda/cuda_training.h), as the trainer sees them. The trainer keeps the loop,
// the data, the schedule, fp16's loss scaler, evaluation, logs, metrics, control and
// checkpoints; a DeviceTraining runs forward, backward, the gradient reduction between ranks and
// the optimizer step, and hands its states over for checkpoints in the CPU engine's stage-0
// layout (fp32 master weights and Adam moments, flat in ParamLayout's unit order), so that a
// checkpoint of either path resumes on the other.
//
// Which jobs can run this way: SupportsDeviceTraining says, naming the first config key that
// needs the CPU path. A DeviceTrainingFactory builds one for a rank; the hoist binary passes the
// CUDA one for --device cuda (and for auto where a GPU is visible and the job allows it).
// Not thread-safe; every call may block on the device. Backward may return before the device has
// finished it (Step waits), so the trainer's phase times show the host's view of an asynchronous
// step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "runtime/config.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {

// The device allocator's figures, as torch.cuda names them (bytes).
struct DeviceMemoryStats {
  int64_t allocated = 0;      // in blocks handed out
  int64_t reserved = 0;       // held from the device, cached blocks included
  int64_t max_allocated = 0;  // peaks since the start
  int64_t max_reserved = 0;
};

class DeviceTraining {
 public:
  virtual ~DeviceTraining() = default;

  // "cuda:0 (NVIDIA H100 80GB HBM3)", for the start line.
  virtual std::string name() const = 0;
  virtual int64_t num_parameters() const = 0;

  // GPT-2's initialisation for `seed` (the CPU model's values).
  virtual Status InitializeWeights(uint64_t seed) = 0;
  virtual Status ZeroGrads() = 0;
  // As Gpt2Model::Forward and Backward, on host token arrays (B,T).
  virtual StatusOr<float> Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                  float dloss) = 0;
  virtual Status Backward() = 0;
  // Averages the gradients over the ranks, then as ZeroEngine::Step: the unscaled norm, clipping
  // to max_norm, AdamW at lr unless the gradients overflowed.
  virtual StatusOr<zero::StepResult> Step(float lr, float loss_scale, float max_norm) = 0;
  // Optimizer steps taken (the schedule's iteration count).
  virtual int64_t step_count() const = 0;
  virtual DeviceMemoryStats memory_stats() const = 0;

  // The states, flat in unit order: state_elements() floats each (blocking copies).
  virtual int64_t state_elements() const = 0;
  virtual Status ReadState(float* master, float* m, float* v) = 0;
  virtual Status RestoreState(const float* master, const float* m, const float* v,
                              int64_t step_count) = 0;
};

// Builds a rank's DeviceTraining: `comm` is the job's host communicator (the factory may form a
// device communicator over it), local_rank picks the device, allocations count in `tracker`.
using DeviceTrainingFactory = std::function<StatusOr<std::unique_ptr<DeviceTraining>>(
    const Config& config, comm::Communicator* comm, int local_rank, MemoryTracker* tracker)>;

// Ok when the job can train through a DeviceTraining; otherwise kUnimplemented naming the key
// that needs the CPU path and what to do. `device` names the device for the message ("cuda").
Status SupportsDeviceTraining(const Config& config, const std::string& device);

}  // namespace hoist::runtime

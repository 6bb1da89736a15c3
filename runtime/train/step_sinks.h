// Where a training step is reported: the trainer takes a step, makes one StepReport of it, and
// hands that to each sink in turn: the progress lines, the JSONL log, the Prometheus metrics and
// the control service's status. A sink only shows what the report says; it decides nothing about
// training. The trainer's sinks, in their order (runtime/train/trainer.cc), run on every rank at
// every step, before the step's checkpoint (the JSONL log's length is part of it).
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "core/memory_tracker.h"
#include "core/phase.h"
#include "core/status.h"
#include "runtime/observe/control.h"
#include "runtime/observe/jsonl_log.h"
#include "runtime/observe/metrics.h"

namespace hoist::runtime {

// What one optimizer step did.
struct StepRecord {
  int64_t step = 0;  // 1-based count of optimizer steps taken
  float loss = 0;    // mean over the whole global batch
  float lr = 0;
  double grad_norm = 0;  // before clipping
  float loss_scale = 1;  // the scale this step's gradients were computed with
  bool skipped = false;  // fp16 overflow: no update this step
  double step_s = 0;
  double tokens_per_s = 0;
  std::array<double, kNumTimedPhases> phase_s{};  // by Phase
  // Of phase_s's backward: recomputing checkpointed activations (activation_checkpointing).
  double recompute_s = 0;
};

// A step as its sinks see it: the record and what the run had around it.
struct StepReport {
  StepRecord record;
  int64_t total_steps = 0;  // train.steps
  int rank = 0;
  MemorySnapshot memory;          // this rank's, right after the step
  std::optional<float> val_loss;  // when this step evaluated
  int64_t skipped_steps = 0;      // of the run so far (fp16 overflows, bf16 non-finite norms)
  bool loss_scaled = false;       // fp16's dynamic loss scaling is on
  bool recompute_timed = false;   // activation_checkpointing.profile: recompute_s is meaningful
  // Totals since the process started: the collectives' bytes (by comm::CollectiveOp) and what
  // offloading moved (by direction, then host or NVMe), as the metrics count them.
  std::array<int64_t, comm::kNumCollectiveOps> comm_bytes{};
  std::array<std::array<int64_t, kNumOffloadTargets>, kNumOffloadDirections> offload_bytes{};

  // The run's last step.
  bool last() const { return record.step == total_steps; }
};

class StepSink {
 public:
  virtual ~StepSink() = default;
  // Shows `report`. An error stops training (a log that cannot be written, a collective that
  // failed).
  virtual Status Take(const StepReport& report) = 0;
};

// The progress lines on `out` (must outlive the sink): the validation loss whenever the step
// evaluated, and every `print_every` steps (0: never), the first and the last, the step's loss,
// learning rate, gradient norm, throughput, time and device memory (and the loss scale with
// fp16).
std::unique_ptr<StepSink> ProgressSink(std::ostream* out, int64_t print_every);

// The JSONL log's step record (`log`, which must outlive the sink; a disabled log takes nothing).
std::unique_ptr<StepSink> JsonlSink(JsonlLog* log);

// The Prometheus metrics of the step and of the memory after it (`exporter` must outlive the
// sink).
std::unique_ptr<StepSink> MetricsSink(MetricsExporter* exporter);

// The control service's status: every rank's memory tables are gathered over `comm` (every rank
// runs this sink: it is a collective), and rank 0 publishes the job's status to `controller`
// (nullptr on the other ranks). Both must outlive the sink.
std::unique_ptr<StepSink> ControlStatusSink(comm::Communicator* comm, JobController* controller);

}  // namespace hoist::runtime

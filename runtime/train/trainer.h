// Trainer: the training loop of one rank of a data-parallel job — its slice of each global batch
// in micro-batches with gradient accumulation, the model's states under the configured ZeRO
// stage and precision (zero/zero_engine.h), fp16's dynamic loss scaling, the global gradient
// norm and clipping, AdamW with the configured schedule, periodic evaluation, the progress line,
// the JSONL log, the Prometheus endpoint (metrics.enabled), and sharded checkpoints to save and
// resume from. N ranks train the job one rank would (the same sequences per step; results equal
// up to the order of floating-point sums).
// Same config, seed and world size give bit-identical losses (for a given thread count), and a
// resumed run continues the exact loss trajectory of the uninterrupted one. Every rank of the
// group runs its own Trainer and they make the same collective calls in the same order. Owns the
// model, the engine and the loaders. Not thread-safe; Run blocks until training ends or fails.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/counting_communicator.h"
#include "comm/split_communicator.h"
#include "comm/staged_communicator.h"
#include "comm/thread_communicator.h"
#include "core/device.h"
#include "core/file_system.h"
#include "core/status.h"
#include "runtime/config/config.h"
#include "runtime/config/lr_schedule.h"
#include "runtime/data/data_loader.h"
#include "runtime/memory/memory_profile.h"
#include "runtime/memory/offload_preflight.h"
#include "runtime/model/model.h"
#include "runtime/observe/control.h"
#include "runtime/observe/control_server.h"
#include "runtime/observe/jsonl_log.h"
#include "runtime/observe/metrics.h"
#include "runtime/train/accelerator.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/step_sinks.h"
#include "zero/quantized_store.h"
#include "zero/zero_engine.h"

namespace hoist::runtime {

struct ResumeSource;  // a checkpoint being resumed from (runtime/train/trainer_checkpoint.cc)

struct TrainerOptions {
  // Resume from the latest checkpoint in config.checkpoint.dir; with none there yet, start fresh
  // (so a restart loop can pass the same flags every time).
  bool resume = false;
  // Resume from this step directory instead (implies resume).
  std::string resume_from;
  // Where the progress lines and the final table go; nullptr keeps quiet.
  std::ostream* out = nullptr;
  // Where this trainer's allocations are counted (the process-wide tracker unless a test wants
  // a run's bytes on their own). Must outlive the trainer.
  MemoryTracker* tracker = &MemoryTracker::Global();
  // This rank's communicator in the data-parallel group (must outlive the trainer); nullptr
  // trains alone.
  comm::Communicator* comm = nullptr;
  // This rank's index among the ranks on its node; the metrics endpoint serves on
  // metrics.port + local_rank.
  int local_rank = 0;
  // Rank 0's job controller, for a caller that drives it in-process (tests); nullptr: the
  // trainer makes its own. Other ranks ignore it. Must outlive the trainer.
  JobController* controller = nullptr;
  // For tests: opens the storage of offloaded states (to wrap it in a fault injector); empty:
  // the io_uring or POSIX storage that `aio` describes.
  offload::StorageFactory offload_storage;
  // For tests: what the host offers the job and offloading (instead of /proc/meminfo and the
  // cgroup), and how nvme_path probes behave.
  std::optional<HostMemory> host_memory;
  NvmeCheckOptions nvme_check;
  // Where checkpoints are written and read (tests inject faults); nullptr: the real one. Must
  // outlive the trainer.
  FileSystem* checkpoint_fs = nullptr;
  // The device the engine and the model compute on (the hoist binary passes the one --device
  // names, runtime/train/device_registry.h); empty: the CPU's (runtime/train/cpu_accelerator.h).
  // Host-side buffers (the batch, the loaders) count as kHost beside a device with memory of its
  // own, as the device's for the CPU.
  AcceleratorFactory accelerator;
};

class Trainer {
 public:
  static StatusOr<std::unique_ptr<Trainer>> Create(const Config& config,
                                                   const TrainerOptions& options);
  ~Trainer();

  // Trains until config.train.steps optimizer steps have been taken, or until the job is
  // stopped (the control service's Stop, or SIGINT/SIGTERM/SIGHUP once InstallStopSignalHandlers
  // ran), which is not an error. Control commands are applied at each step boundary (control.h).
  Status Run();
  // One optimizer step (exposed for tests and benchmarks).
  StatusOr<StepRecord> Step();
  // Mean loss over train.eval_steps validation micro-batches (the same batches every time).
  StatusOr<float> Evaluate();
  Status SaveCheckpoint();

  int64_t step() const { return step_; }
  const std::vector<float>& losses() const { return losses_; }
  Model& model() { return *model_; }
  // The engine of the trained weights: the whole model's, or the adapters' with LoRA.
  zero::ZeroEngine& engine() { return *engine_; }
  // The engine of the base model's weights: the frozen base with LoRA, else engine().
  zero::ZeroEngine& base_engine() { return base_engine_ != nullptr ? *base_engine_ : *engine_; }
  int rank() const { return comm_->rank(); }
  // The Prometheus endpoint; nullptr unless metrics.enabled.
  const MetricsExporter* metrics() const { return metrics_.get(); }
  // Rank 0's job controller; nullptr on the other ranks.
  JobController* controller() const { return control_; }
  // Whether Run ended early on a stop request.
  bool stopped() const { return stopped_; }
  // The signal that stopped the job (SIGTERM, SIGHUP or SIGINT, agreed by every rank), 0 when it
  // was not stopped by one. `hoist train` then exits 128 + that number.
  int stop_signal() const { return stop_signal_; }
  // The learning rate and clipping in force for the next step (after control overrides).
  std::optional<double> lr_override() const { return lr_override_; }
  float gradient_clipping() const { return clip_; }

 private:
  Trainer(const Config& config, const TrainerOptions& options);
  Status Initialize();
  // Checks the host memory and nvme_path that offloading needs (agreed by all ranks) and fills
  // in the engine's offload options.
  FileSystem& checkpoint_fs() const {
    return options_.checkpoint_fs != nullptr ? *options_.checkpoint_fs : FileSystem::Posix();
  }
  Status PrepareOffload(const std::vector<zero::UnitSpec>& units, zero::ZeroOptions* options);
  // Opens the accelerator and builds the engine and the model on its backend.
  Status CreateModel();
  // Opens the accelerator, the communicator the engine's collectives take to its devices, and
  // the device of the host buffers.
  Status OpenAccelerator();
  // The optimizer steps taken.
  int64_t optimizer_steps() const { return engine_->step_count(); }
  // Restores the state saved in `step_dir`; returns the JSONL log's size at that checkpoint. In
  // steps (runtime/train/trainer_checkpoint.cc): open the manifest and check that it is this
  // run's; check the base, the data position, every blob of every shard and the states' new
  // partition, agreed by all ranks; restore the optimizer states; the run's counters; the log's
  // length.
  StatusOr<int64_t> LoadCheckpoint(const std::string& step_dir);
  StatusOr<ResumeSource> OpenResume(const std::string& step_dir);
  Status PrepareResume(ResumeSource* source);
  Status RestoreStates(ResumeSource* source);
  Status RestoreCounters(const ResumeSource& source);
  StatusOr<int64_t> ResumedLogLength(const ResumeSource& source);
  // Sets the weights of a fresh run from model.init_from (a Hugging Face directory or an llm.c
  // file), each rank reading a unit at a time; a rank that fails to read stops every rank.
  Status InitializeFrom(const std::string& path);
  // Sets the base model's weights of a fresh or resumed run: from model.init_from, or drawn from
  // train.seed. With LoRA that is the frozen base, which checkpoints do not hold.
  Status InitializeBase();
  // Writes the base model's weights from `fill` into whichever store holds them.
  Status FillBase(const zero::ZeroEngine::RangeFill& fill);
  // With LoRA, the adapters of a fresh run: from lora.init_from (a PEFT adapter), or PEFT's
  // initialisation drawn from train.seed.
  Status InitializeAdapters();
  Status RunSteps();
  // The sinks every step is reported to (runtime/train/step_sinks.h), in their order.
  void MakeSinks();
  // The report of the step just taken; evaluates when the step is due for it.
  StatusOr<StepReport> Report(const StepRecord& record);
  // The memory profile (monitor.memory_profile): marks the start of a phase of the step being
  // taken, and closes the profile and writes its files once its steps are done (or the run ends).
  void EnterPhase(Phase kind, int block = -1);
  Status FinishMemoryProfile();
  // The step boundary's control exchange, looping while paused. `checkpointed`: this boundary
  // already wrote a checkpoint (due by interval). Returns whether the job stops here.
  StatusOr<bool> HandleControl(bool checkpointed);
  // The step directory of the current step's checkpoint.
  std::string CheckpointPath() const;
  // The job stops on this agreed signal: a checkpoint first where checkpoint.on_signal asks for
  // one and this boundary has none yet. Returns the reason for the log and the end record.
  StatusOr<std::string> StopOnSignal(int signal_number, bool checkpointed);
  // SaveCheckpoint that reports the outcome to the waiting control requests.
  Status CheckpointForControl(const std::vector<uint64_t>& ids, bool already_written);

  Config config_;
  TrainerOptions options_;
  // The trainer's host buffers (the batch): the device's memory where the device computes in
  // the host's (the CPU), else the host's. Made once the device is open.
  std::unique_ptr<CpuDevice> host_device_;
  kernels::Backend* backend_ = nullptr;           // what the engine and the model compute on
  std::unique_ptr<comm::ThreadGroup> own_group_;  // a group of one, when training alone
  // The group's communicator, counting the bytes of each collective for the metrics.
  std::unique_ptr<comm::CountingCommunicator> counting_;
  comm::Communicator* comm_ = nullptr;
  // options.accelerator's: after the host communicator its collectives may be formed over,
  // before everything allocated from its backend.
  Accelerator accelerator_;
  // The engine's collectives between the accelerators' devices, where they stage through host
  // memory.
  std::unique_ptr<comm::StagedCommunicator> staged_;
  // Or the accelerator's own collectives, counted for the metrics, for the device buffers.
  std::unique_ptr<comm::CountingCommunicator> device_counting_;
  std::unique_ptr<comm::SplitCommunicator> split_;
  // What the engine's collectives go through: comm_, the accelerator's or staged_.
  comm::Communicator* engine_comm_ = nullptr;
  std::unique_ptr<zero::ZeroEngine> engine_;
  // LoRA: the frozen base's engine (engine_ then holds the adapters), and the store that joins
  // the two for the model.
  std::unique_ptr<zero::ZeroEngine> base_engine_;
  // Or, with lora.base_quantization "nf4", the frozen base in 4 bits.
  std::unique_ptr<zero::QuantizedStore> quantized_base_;
  std::unique_ptr<zero::JoinedParamStore> joined_store_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::unique_ptr<JsonlLog> log_;
  std::unique_ptr<MemoryProfiler> profiler_;
  std::string profile_path_;                    // with {rank} expanded
  int64_t profile_last_step_ = 0;               // the profile closes after this step
  std::vector<PeakAttribution> profile_peaks_;  // when the profile has been written
  bool evaluating_ = false;                     // Evaluate is running the model
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<MetricsExporter> metrics_;
  Buffer batch_;  // inputs and targets of one micro-batch, (B,T) each
  int64_t step_ = 0;
  std::vector<float> losses_;
  // Per micro-batch of the step, its targets that count in the loss (kept: no allocation a step).
  std::vector<int64_t> step_counted_;
  double train_seconds_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t bf16_skipped_steps_ = 0;
  std::unique_ptr<JobController> own_controller_;
  JobController* control_ = nullptr;  // rank 0 only
  // Declared after the controller: destroyed first, while the controller it serves still exists.
  std::unique_ptr<ControlServer> control_server_;
  std::optional<double> lr_override_;
  // The config.json of the Hugging Face checkpoint the run started from (model.init_from), kept
  // in every checkpoint so that `hoist export` writes it back; null otherwise.
  nlohmann::json hf_config_;
  // A LoRA run's base (model.init_from) as its checkpoints record it
  // (runtime/checkpoint/base_identity.h); null without LoRA or without init_from.
  nlohmann::json base_identity_;
  // Rank 0: the run's config as stored beside its checkpoints
  // (runtime/checkpoint/checkpoint_config.h), once the first one is saved; null before.
  nlohmann::json config_reference_;
  float clip_ = 0;
  bool stopped_ = false;
  int stop_signal_ = 0;
  std::string stop_reason_;
  std::vector<std::unique_ptr<StepSink>> sinks_;
};

}  // namespace hoist::runtime

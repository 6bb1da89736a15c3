#include "runtime/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>

#include "comm/agree.h"
#include "comm/node.h"
#include "comm/sum_over_ranks.h"
#include "core/logging.h"
#include "core/posix_error.h"
#include "offload/open_storage.h"
#include "offload/scratch_file.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/run_identity.h"
#include "runtime/memory/memory_report.h"
#include "runtime/observe/control_server.h"
#include "runtime/train/cpu_accelerator.h"

namespace hoist::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The directory of a memory profile's files exists and takes new files.
Status CheckProfileDirectory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return InvalidArgumentError("monitor.memory_profile.path: the directory '" + dir + "' of '" +
                                path + "' does not exist; create it or choose another path");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return PosixError("checking that the memory profile's directory takes files", dir, errno)
        .WithContext("monitor.memory_profile.path");
  }
  return Status::Ok();
}

// Targets of a micro-batch that count in the loss (a negative one is masked off).
int64_t CountedTargets(const int32_t* targets, int64_t n) {
  return std::count_if(targets, targets + n, [](int32_t target) { return target >= 0; });
}

}  // namespace

Trainer::Trainer(const Config& config, const TrainerOptions& options)
    : config_(config), options_(options) {
  if (!options_.accelerator) options_.accelerator = CpuAccelerator();
}

Trainer::~Trainer() {
  // Requests still waiting (the job failed to start, or Run was never called) end now, before
  // the control server goes.
  if (control_ != nullptr) control_->Shutdown(JobState::kFinished);
}

Status Trainer::PrepareOffload(const std::vector<zero::UnitSpec>& units,
                               zero::ZeroOptions* options) {
  const OffloadOptimizerConfig& optimizer = config_.zero.offload_optimizer;
  const OffloadParamConfig& param = config_.zero.offload_param;
  // cpu_checkpointing's block inputs take pinned host memory too: part of the same check.
  const int64_t activation_pinned =
      ModelActivationFootprint(
          config_.model, static_cast<int>(config_.train_micro_batch_size_per_gpu),
          config_.model.seq_len, config_.precision(), config_.activation_checkpointing)
          .host_pinned;
  const bool offload = optimizer.device != Placement::kDevice || param.device != Placement::kDevice;
  if (!offload && activation_pinned == 0) return Status::Ok();
  const int rank = comm_->rank(), world_size = comm_->world_size();
  OffloadFootprint footprint;
  if (offload) {
    HOIST_ASSIGN_OR_RETURN(footprint, OffloadFootprintPerRank(units, *options, world_size, rank,
                                                              !backend_->OperatesOnHostMemory()));
  }
  footprint.pinned_bytes += activation_pinned;
  HOIST_ASSIGN_OR_RETURN(const comm::NodeCounts nodes, comm::CountRanksPerNode(*comm_));
  const int local_ranks = nodes.on_this_node;
  Status local = CheckHostMemory(footprint, local_ranks, config_.offload.max_host_bytes,
                                 options_.host_memory ? *options_.host_memory : ReadHostMemory());
  // Every local rank's files land under the same paths; one path for both needs the sum.
  const std::string optimizer_key = "zero_optimization.offload_optimizer.nvme_path";
  const std::string param_key = "zero_optimization.offload_param.nvme_path";
  const bool optimizer_nvme = optimizer.device == Placement::kNvme;
  const bool param_nvme = param.device == Placement::kNvme;
  if (local.ok() && optimizer_nvme) {
    const bool shared = param_nvme && param.nvme_path == optimizer.nvme_path;
    local = CheckNvmePath(
        optimizer.nvme_path, optimizer_key,
        local_ranks * (footprint.optimizer_file_bytes + (shared ? footprint.param_file_bytes : 0)),
        options_.nvme_check);
  }
  if (local.ok() && param_nvme && !(optimizer_nvme && param.nvme_path == optimizer.nvme_path)) {
    local = CheckNvmePath(param.nvme_path, param_key, local_ranks * footprint.param_file_bytes,
                          options_.nvme_check);
  }
  // Every rank refuses together, each saying why.
  HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, local));
  if (!offload) return Status::Ok();

  auto scratch = [&](const std::string& dir, const char* what) {
    return offload::ScratchFilePath(dir, rank, what);
  };
  offload::StorageFactory open = options_.offload_storage;
  if (!open) {
    offload::BlockStorageOptions storage;
    storage.block_size_bytes = config_.aio.block_size;
    storage.queue_depth = static_cast<int>(config_.aio.queue_depth);
    open = [storage](const std::string& path, int64_t bytes) {
      return offload::OpenBlockStorage(path, bytes, storage);
    };
  }
  if (optimizer_nvme) {
    options->offload_optimizer.nvme_file = scratch(optimizer.nvme_path, "optimizer");
    options->offload_optimizer.open_storage = open;
  }
  if (param_nvme) {
    options->offload_param.nvme_file = scratch(param.nvme_path, "params");
    options->offload_param.open_storage = open;
  }
  if (rank == 0) {
    HOIST_LOG(INFO) << "offload: optimizer states on " << OffloadDeviceName(optimizer.device)
                    << ", parameters on " << OffloadDeviceName(param.device) << "; per rank "
                    << FormatBytes(footprint.pinned_bytes) << " pinned, "
                    << FormatBytes(footprint.host_bytes) << " pageable, "
                    << FormatBytes(footprint.optimizer_file_bytes + footprint.param_file_bytes)
                    << " on disk";
  }
  return Status::Ok();
}

Status Trainer::OpenAccelerator() {
  // One rank without its device stops every rank, each saying why.
  StatusOr<Accelerator> opened =
      options_.accelerator(config_, comm_, options_.local_rank, options_.tracker);
  HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, opened.status()));
  accelerator_ = std::move(opened).value();
  HOIST_CHECK(accelerator_.backend != nullptr) << "an accelerator without a backend";
  backend_ = accelerator_.backend.get();
  host_device_ = std::make_unique<CpuDevice>(
      accelerator_.in_host_memory ? Place::kDevice : Place::kHost, options_.tracker);
  if (accelerator_.in_host_memory) {
    // The device's buffers are host memory, which the job's communicator reaches.
    HOIST_CHECK(accelerator_.collectives == nullptr && accelerator_.staging == nullptr)
        << "a device in host memory with collectives of its own";
    return Status::Ok();
  }
  if (accelerator_.collectives != nullptr) {
    // Counted apart from the host's, for the metrics. The engine's host scalars (the gradient
    // norm, agreements on status) go to the host communicator: the device one cannot read them.
    device_counting_ = std::make_unique<comm::CountingCommunicator>(accelerator_.collectives.get());
    split_ = std::make_unique<comm::SplitCommunicator>(device_counting_.get(), comm_, backend_);
    engine_comm_ = split_.get();
  } else {
    HOIST_CHECK(accelerator_.staging != nullptr) << "an accelerator without a way to its peers";
    staged_ =
        std::make_unique<comm::StagedCommunicator>(comm_, backend_, accelerator_.staging.get());
    engine_comm_ = staged_.get();
    if (comm_->world_size() > 1 && comm_->rank() == 0) {
      HOIST_LOG(INFO) << "the ranks' collectives go through host memory (no device "
                         "communicator between them)";
    }
  }
  if (comm_->rank() == 0) HOIST_LOG(INFO) << "training on " << backend_->name();
  return Status::Ok();
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Config& config,
                                                   const TrainerOptions& options) {
  std::unique_ptr<Trainer> trainer(new Trainer(config, options));
  HOIST_RETURN_IF_ERROR(trainer->Initialize());
  return trainer;
}

Status Trainer::Initialize() {
  const int B = static_cast<int>(config_.train_micro_batch_size_per_gpu);
  const int T = config_.model.seq_len;
  comm::Communicator* group = options_.comm;
  if (group == nullptr) {
    HOIST_ASSIGN_OR_RETURN(own_group_, comm::ThreadGroup::Create(1, config_.comm.timeout_s));
    group = &own_group_->comm(0);
  }
  counting_ = std::make_unique<comm::CountingCommunicator>(group);
  comm_ = counting_.get();
  const int rank = comm_->rank(), world_size = comm_->world_size();
  clip_ = config_.gradient_clipping;
  const int64_t expected_world =
      config_.train_batch_size /
      (config_.train_micro_batch_size_per_gpu * config_.gradient_accumulation_steps);
  if (expected_world != world_size) {
    return FailedPreconditionError("the config's batch sizes were resolved for " +
                                   std::to_string(expected_world) + " ranks but the job has " +
                                   std::to_string(world_size));
  }
  // The profile starts before anything is allocated, so that set-up's peaks are in it too. A
  // directory that cannot take its files stops every rank now, not one rank steps later.
  if (!config_.monitor.memory_profile_path.empty()) {
    Status writable = Status::Ok();
    if (const auto path = PathForRank(config_.monitor.memory_profile_path, rank)) {
      profile_path_ = *path;
      writable = CheckProfileDirectory(profile_path_);
      profiler_ = std::make_unique<MemoryProfiler>(*options_.tracker);
      profiler_->Enter("set-up");
    }
    HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, writable));
  }
  // Before anything heavy, so that a port in use fails the start at once.
  if (config_.metrics.enabled) {
    HOIST_ASSIGN_OR_RETURN(metrics_,
                           MetricsExporter::Start(config_.metrics, rank, options_.local_rank));
    HOIST_LOG(INFO) << "metrics: serving " << metrics_->url();
  }
  // The data before the controller: with train.epochs it decides how many steps the job runs.
  HOIST_ASSIGN_OR_RETURN(train_loader_,
                         DataLoader::Open(config_.data.train, Split::kTrain, B, T, rank, world_size,
                                          config_.model.vocab_size, options_.tracker,
                                          static_cast<int>(config_.gradient_accumulation_steps),
                                          DataOrder{config_.data.shuffle, config_.train.seed}));
  if (config_.train.epochs > 0) {
    config_.train.steps = config_.train.epochs * train_loader_->steps_per_epoch();
  }
  if (rank == 0 && (train_loader_->shuffled() || config_.train.epochs > 0)) {
    HOIST_LOG(INFO) << "data: " << config_.data.train << ", " << train_loader_->steps_per_epoch()
                    << " optimizer steps an epoch"
                    << (train_loader_->shuffled() ? ", the documents in a new order each epoch"
                                                  : "")
                    << (config_.train.epochs > 0
                            ? "; train.epochs " + std::to_string(config_.train.epochs) + ": " +
                                  std::to_string(config_.train.steps) + " steps"
                            : std::string());
  }
  if (rank == 0) {
    control_ = options_.controller;
    if (control_ == nullptr) {
      own_controller_ = std::make_unique<JobController>(config_.train.steps, world_size,
                                                        !config_.checkpoint.dir.empty());
      control_ = own_controller_.get();
    }
    if (config_.control.enabled) {
      ControlServerOptions control_options;
      control_options.job_token_path = JobTokenPath(config_.checkpoint.dir);
      HOIST_ASSIGN_OR_RETURN(control_server_,
                             ControlServer::Start(config_.control, control_, control_options));
      const std::string& token_path = control_server_->job_token_path();
      HOIST_LOG(INFO) << "control: serving " << control_server_->address()
                      << (control_server_->tls() ? " (TLS" : " (plaintext")
                      << (!token_path.empty() ? ", token in " + token_path + ")"
                          : control_server_->requires_token()
                              ? std::string(", token required)")
                              : std::string(", no token: any user of this machine may steer it)"));
    }
  }
  HOIST_RETURN_IF_ERROR(CreateModel());
  if (config_.precision() == DType::kFloat16) {
    scaler_ = std::make_unique<LossScaler>(config_.fp16);
  }
  HOIST_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::Create(LrScheduleParamsOf(config_)));
  schedule_ = std::make_unique<LrSchedule>(std::move(schedule));
  if (config_.train.eval_interval > 0 && !config_.data.val.empty()) {
    HOIST_ASSIGN_OR_RETURN(val_loader_, DataLoader::Open(config_.data.val, Split::kVal, B, T, rank,
                                                         world_size, config_.model.vocab_size,
                                                         options_.tracker, 1, DataOrder{false, 0}));
  }
  HOIST_ASSIGN_OR_RETURN(
      batch_,
      host_device_->Allocate(int64_t{2} * B * T * int64_t{sizeof(int32_t)}, Category::kActivation));

  std::string resume_dir = options_.resume_from;
  if (resume_dir.empty() && options_.resume) {
    if (config_.checkpoint.dir.empty()) {
      return InvalidArgumentError("--resume needs checkpoint.dir in the config");
    }
    StatusOr<std::string> latest = FindLatestCheckpoint(config_.checkpoint.dir, checkpoint_fs());
    if (latest.ok()) {
      resume_dir = *latest;
    } else if (latest.status().code() == StatusCode::kNotFound) {
      // A restart loop resumes with the same command line every time, the first one included.
      HOIST_LOG(INFO) << "no checkpoint in " << config_.checkpoint.dir << " yet; starting fresh";
    } else {
      return latest.status();
    }
  }
  int64_t log_bytes = -1;
  // A LoRA checkpoint holds the adapters alone: the frozen base comes from where it came from.
  const bool lora = config_.model.lora.enabled();
  if (resume_dir.empty() || lora) HOIST_RETURN_IF_ERROR(InitializeBase());
  if (!resume_dir.empty()) {
    HOIST_ASSIGN_OR_RETURN(log_bytes, LoadCheckpoint(resume_dir));
  } else if (lora) {
    HOIST_RETURN_IF_ERROR(InitializeAdapters());
  }
  HOIST_ASSIGN_OR_RETURN(log_, JsonlLog::Open(config_.monitor.jsonl_path, rank, log_bytes));
  profile_last_step_ = step_ + config_.monitor.memory_profile_steps;  // counted from the start
  if (metrics_ != nullptr) {
    metrics_->RecordMemory(options_.tracker->Snapshot());
    metrics_->RecordPaused(false);
  }
  if (control_ != nullptr) {
    JobStatus status;
    status.step = step_;
    control_->Publish(status);
    control_->SetHyperparams(lr_override_, clip_);
  }
  MakeSinks();
  return Status::Ok();
}

StatusOr<StepRecord> Trainer::Step() {
  const auto start = Clock::now();
  const int B = static_cast<int>(config_.train_micro_batch_size_per_gpu);
  const int T = config_.model.seq_len;
  const int64_t accumulation = config_.gradient_accumulation_steps;
  int32_t* inputs = batch_.as<int32_t>();
  int32_t* targets = inputs + int64_t{B} * T;

  StepRecord record;
  record.step = step_ + 1;
  record.loss_scale = scaler_ != nullptr ? scaler_->scale() : 1.0f;
  HOIST_RETURN_IF_ERROR(engine_->ZeroGrads());
  double loss_sum = 0.0;
  auto& phase_s = record.phase_s;
  const double recompute_before = model_->recompute_seconds();
  Status data = Status::Ok();
  // Every target counts (token shards): each micro-batch's mean loss weighs 1/accumulation, its
  // gradient averaged over the ranks. With loss masks (prepared shards) the loss is the mean over
  // the counted targets of the whole global batch (transformers' num_items_in_batch, averaged
  // across devices): a micro-batch's mean weighs its share of them, so they are counted first,
  // on every rank, before the first forward pass (the loader then reads the step again).
  const bool masked = train_loader_->masked();
  std::vector<int64_t>& counted = step_counted_;
  counted.assign(static_cast<size_t>(accumulation), int64_t{B} * T);
  int64_t global_counted = 0;
  if (masked) {
    const auto t0 = Clock::now();
    const LoaderState step_start = train_loader_->state();
    int64_t local = 0;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      if (Status read = train_loader_->Next(inputs, targets); data.ok()) data = read;
      counted[static_cast<size_t>(micro)] = CountedTargets(targets, int64_t{B} * T);
      local += counted[static_cast<size_t>(micro)];
    }
    HOIST_RETURN_IF_ERROR(train_loader_->Restore(step_start));
    // A shard one rank could not read stops every rank before any pass.
    HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, data));
    HOIST_ASSIGN_OR_RETURN(global_counted, comm::SumOverRanks(*comm_, local));
    if (global_counted == 0) {
      return FailedPreconditionError(
          "step " + std::to_string(record.step) +
          ": no target of the global batch counts in the loss (every loss mask of its windows "
          "is 0); use longer sequences or a larger batch, or prepare the data with fewer "
          "tokens masked");
    }
    phase_s[int(Phase::kData)] += SecondsSince(t0);
  }
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    const auto t0 = Clock::now();
    if (Status read = train_loader_->Next(inputs, targets); data.ok()) data = read;
    const auto t1 = Clock::now();
    // A micro-batch with no counted target still runs its passes, its gradient zero.
    const int64_t share = counted[static_cast<size_t>(micro)];
    const float dloss =
        !masked ? record.loss_scale / static_cast<float>(accumulation)
        : share > 0
            ? static_cast<float>(static_cast<double>(record.loss_scale) * comm_->world_size() *
                                 static_cast<double>(share) / static_cast<double>(global_counted))
            : record.loss_scale;
    // The adapters' dropout masks: each sequence's drawn from (seed, step, its place in the
    // step's global batch), the same whether the run was resumed, on any number of ranks.
    model_->set_lora_seed(
        config_.train.seed ^ (static_cast<uint64_t>(record.step) * 0x9E3779B97F4A7C15ull),
        (micro * comm_->world_size() + comm_->rank()) * int64_t{B});
    const StatusOr<float> loss = model_->Forward(inputs, targets, B, T, dloss);
    const auto t2 = Clock::now();
    // The last micro-batch's gradients are final as the backward reduces them: an offloaded
    // optimizer's come down to the host during it.
    engine_->SetAccumulationBoundary(micro + 1 == accumulation);
    Status passes = loss.status();
    if (passes.ok()) {
      loss_sum += masked ? static_cast<double>(*loss) * static_cast<double>(share) : *loss;
      passes = model_->Backward();
    }
    // The reductions the backward left for the compute stream to wait on, waited for within the
    // timeout before the next forward pass reads its loss off that stream (and before a failed
    // pass's error is returned, so that nothing is in flight after it).
    HOIST_RETURN_IF_ERROR(engine_->Settle());
    HOIST_RETURN_IF_ERROR(passes);
    HOIST_RETURN_IF_ERROR(engine_->status());
    if (joined_store_ != nullptr) HOIST_RETURN_IF_ERROR(joined_store_->status());
    phase_s[int(Phase::kData)] += std::chrono::duration<double>(t1 - t0).count();
    phase_s[int(Phase::kForward)] += std::chrono::duration<double>(t2 - t1).count();
    phase_s[int(Phase::kBackward)] += SecondsSince(t2);
  }
  record.recompute_s = model_->recompute_seconds() - recompute_before;
  EnterPhase(Phase::kReduce);
  const auto reduce_start = Clock::now();
  // A shard that one rank could not read (truncated while training) stops every rank here.
  HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, data));
  // A frozen base's shard that could not be read from NVMe was served as zeros: the step is void.
  if (base_engine_ != nullptr) HOIST_RETURN_IF_ERROR(base_engine_->AgreeOnDeferredErrors());
  // The loss of the whole global batch: every rank's mean, averaged over the ranks; with loss
  // masks, the sum over its counted targets over their count.
  if (masked) {
    HOIST_ASSIGN_OR_RETURN(const double sum, comm::SumOverRanks(*comm_, loss_sum));
    record.loss =
        global_counted > 0 ? static_cast<float>(sum / static_cast<double>(global_counted)) : 0.0f;
  } else {
    float loss = static_cast<float>(loss_sum / static_cast<double>(accumulation));
    HOIST_RETURN_IF_ERROR(comm_->AllReduce(&loss, 1, DType::kFloat32, comm::ReduceOp::kAvg));
    record.loss = loss;
  }
  if (!std::isfinite(record.loss) && scaler_ == nullptr) {
    return FailedPreconditionError("the loss became " + std::to_string(record.loss) + " at step " +
                                   std::to_string(record.step) +
                                   "; lower optimizer.params.lr or enable gradient_clipping");
  }
  // DeepSpeed steps its scheduler after each optimizer step, so the k-th step (0-based) runs at
  // the scheduler's iteration k - 1; a skipped step does not advance it.
  // A learning rate set through the control service replaces the schedule.
  record.lr = lr_override_ ? static_cast<float>(*lr_override_)
                           : static_cast<float>(schedule_->LrAt(optimizer_steps() - 1));
  const double loss_reduce_s = SecondsSince(reduce_start);
  // The engine finishes the reduction and steps; with offload the step is the host's or NVMe's.
  const bool offloaded = engine_->options().offload_optimizer.place != Placement::kDevice;
  EnterPhase(offloaded ? Phase::kOffload : Phase::kOptimizer);
  HOIST_ASSIGN_OR_RETURN(zero::StepResult result,
                         engine_->Step(record.lr, record.loss_scale, clip_));
  record.grad_norm = result.grad_norm;
  phase_s[int(Phase::kReduce)] = loss_reduce_s + result.reduce_s;
  phase_s[int(Phase::kOptimizer)] = result.optimizer_s;
  if (scaler_ != nullptr) {
    HOIST_ASSIGN_OR_RETURN(record.skipped, scaler_->Update(result.overflow));
  } else if (result.overflow && config_.precision() == DType::kBFloat16) {
    // bf16 has fp32's range: an inf or NaN here is a rare spike, skipped as DeepSpeed's bf16
    // optimizer does (check_grad_overflow), on every rank alike.
    record.skipped = true;
    ++bf16_skipped_steps_;
    if (comm_->rank() == 0) {
      HOIST_LOG(WARN) << "step " << record.step << ": the gradient holds inf or NaN; skipped";
    }
  } else if (result.overflow) {
    return FailedPreconditionError("the gradient became inf or NaN at step " +
                                   std::to_string(record.step) +
                                   "; lower optimizer.params.lr or enable gradient_clipping");
  }

  ++step_;
  if (profiler_ != nullptr && step_ >= profile_last_step_) {
    HOIST_RETURN_IF_ERROR(FinishMemoryProfile());
  }
  record.step_s = SecondsSince(start);
  const int64_t tokens = config_.train_batch_size * T;
  record.tokens_per_s = static_cast<double>(tokens) / record.step_s;
  tokens_seen_ += tokens;
  train_seconds_ += record.step_s;
  losses_.push_back(record.loss);
  return record;
}

StatusOr<float> Trainer::Evaluate() {
  if (val_loader_ == nullptr) return FailedPreconditionError("no validation data (data.val)");
  const int B = static_cast<int>(config_.train_micro_batch_size_per_gpu);
  const int T = config_.model.seq_len;
  int32_t* inputs = batch_.as<int32_t>();
  int32_t* targets = inputs + int64_t{B} * T;
  val_loader_->Reset();
  // The model's phases during evaluation belong to no step: one phase of their own.
  if (profiler_ != nullptr) profiler_->Enter("evaluation after step " + std::to_string(step_));
  evaluating_ = true;
  struct Done {
    bool* flag;
    ~Done() { *flag = false; }
  } done{&evaluating_};
  double sum = 0.0;
  int64_t counted = 0;  // with loss masks: the targets that count, over which the mean is
  const bool masked = val_loader_->masked();
  const int64_t steps = std::max<int64_t>(1, config_.train.eval_steps);
  Status data = Status::Ok();
  for (int64_t i = 0; i < steps; ++i) {
    if (Status read = val_loader_->Next(inputs, targets); data.ok()) data = read;
    const int64_t share = masked ? CountedTargets(targets, int64_t{B} * T) : 0;
    HOIST_ASSIGN_OR_RETURN(const float loss, model_->Forward(inputs, targets, B, T));
    sum += masked ? static_cast<double>(loss) * static_cast<double>(share) : loss;
    counted += share;
    HOIST_RETURN_IF_ERROR(engine_->status());
    if (joined_store_ != nullptr) HOIST_RETURN_IF_ERROR(joined_store_->status());
  }
  // A parameter shard that could not be read was served as zeros: no loss from it.
  HOIST_RETURN_IF_ERROR(engine_->AgreeOnDeferredErrors());
  if (base_engine_ != nullptr) HOIST_RETURN_IF_ERROR(base_engine_->AgreeOnDeferredErrors());
  HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, data));
  if (masked) {
    HOIST_ASSIGN_OR_RETURN(const double total, comm::SumOverRanks(*comm_, sum));
    HOIST_ASSIGN_OR_RETURN(const int64_t targets_counted, comm::SumOverRanks(*comm_, counted));
    if (targets_counted == 0) {
      return FailedPreconditionError(
          "the validation batches hold no target that counts in the loss (every loss mask of "
          "their windows is 0); raise train.eval_steps or prepare the held-out data with fewer "
          "tokens masked");
    }
    return static_cast<float>(total / static_cast<double>(targets_counted));
  }
  float loss = static_cast<float>(sum / static_cast<double>(steps));
  HOIST_RETURN_IF_ERROR(comm_->AllReduce(&loss, 1, DType::kFloat32, comm::ReduceOp::kAvg));
  return loss;
}

void Trainer::MakeSinks() {
  sinks_.clear();
  if (options_.out != nullptr)
    sinks_.push_back(ProgressSink(options_.out, config_.steps_per_print));
  sinks_.push_back(JsonlSink(log_.get()));
  if (metrics_ != nullptr) sinks_.push_back(MetricsSink(metrics_.get()));
  sinks_.push_back(ControlStatusSink(comm_, control_));
}

StatusOr<StepReport> Trainer::Report(const StepRecord& record) {
  StepReport report;
  report.record = record;
  report.total_steps = config_.train.steps;
  report.rank = comm_->rank();
  report.memory = options_.tracker->Snapshot();
  if (val_loader_ != nullptr && (step_ % config_.train.eval_interval == 0 || report.last())) {
    HOIST_ASSIGN_OR_RETURN(report.val_loss, Evaluate());
  }
  report.skipped_steps = scaler_ != nullptr ? scaler_->skipped_steps() : bf16_skipped_steps_;
  report.loss_scaled = scaler_ != nullptr;
  report.recompute_timed = config_.activation_checkpointing.profile;
  for (int op = 0; op < comm::kNumCollectiveOps; ++op) {
    const auto collective = static_cast<comm::CollectiveOp>(op);
    report.comm_bytes[op] = counting_->bytes(collective) +
                            (device_counting_ != nullptr ? device_counting_->bytes(collective) : 0);
  }
  const zero::OffloadStats offload = engine_->offload_stats();
  report.offload_bytes[0][0] = offload.from_host_bytes;  // read from host memory
  report.offload_bytes[1][0] = offload.to_host_bytes;
  report.offload_bytes[0][1] = offload.nvme_read_bytes;
  report.offload_bytes[1][1] = offload.nvme_write_bytes;
  return report;
}

Status Trainer::Run() {
  if (control_ != nullptr) control_->SetState(JobState::kRunning);
  const Status status = RunSteps();
  if (control_ != nullptr) {
    control_->Shutdown(status.ok() ? JobState::kFinished : JobState::kFailed);
  }
  return status;
}

Status Trainer::RunSteps() {
  const int64_t total = config_.train.steps;
  std::ostream* out = options_.out;
  const int rank = comm_->rank();
  if (out != nullptr) {
    *out << "hoist: training " << ModelDisplayName(config_.model.family) << " ("
         << config_.model.n_layer << " layers, " << config_.model.n_embd << " channels, "
         << model_->num_parameters() << " parameters) for " << total << " steps of "
         << config_.train_batch_size << " x " << config_.model.seq_len << " tokens on "
         << comm_->world_size() << (comm_->world_size() == 1 ? " rank" : " ranks")
         << ", ZeRO stage " << config_.zero.stage << ", " << DTypeName(config_.precision())
         << (accelerator_.in_host_memory ? std::string() : ", on " + backend_->name())
         << ", from step " << step_ << "\n";
  }
  while (step_ < total) {
    HOIST_ASSIGN_OR_RETURN(StepRecord record, Step());
    const bool last = step_ == total;
    HOIST_ASSIGN_OR_RETURN(const StepReport report, Report(record));
    for (const std::unique_ptr<StepSink>& sink : sinks_) {
      HOIST_RETURN_IF_ERROR(sink->Take(report));
    }
    const int64_t interval = config_.checkpoint.interval_steps;
    const bool checkpoint_due =
        !config_.checkpoint.dir.empty() && ((interval > 0 && step_ % interval == 0) || last);
    if (checkpoint_due) HOIST_RETURN_IF_ERROR(SaveCheckpoint());
    HOIST_ASSIGN_OR_RETURN(const bool stop, HandleControl(checkpoint_due));
    if (stop) {
      stopped_ = true;
      break;
    }
  }

  HOIST_RETURN_IF_ERROR(FinishMemoryProfile());
  const MemorySnapshot memory = options_.tracker->Snapshot();
  nlohmann::json end = {{"event", "end"},
                        {"rank", rank},
                        {"steps", step_},
                        {"tokens", tokens_seen_},
                        {"train_s", train_seconds_},
                        {"final_loss", losses_.empty() ? 0.0f : losses_.back()},
                        {"memory", MemoryTableJson(memory.current)},
                        {"peak", MemoryTableJson(memory.peak)},
                        {"peak_total", PeakTotalJson(memory)},
                        {"peak_rss", ProcessPeakResidentBytes()}};
  end["skipped_steps"] = scaler_ != nullptr ? scaler_->skipped_steps() : bf16_skipped_steps_;
  if (accelerator_.memory_stats) {
    // The device allocator's view: reserved includes its cache, which the tables above omit.
    const DeviceMemoryStats cache = accelerator_.memory_stats();
    end["device_allocator"] = {{"name", backend_->name()},
                               {"allocated", cache.allocated},
                               {"reserved", cache.reserved},
                               {"max_allocated", cache.max_allocated},
                               {"max_reserved", cache.max_reserved}};
  }
  if (stopped_) end["stopped"] = stop_reason_;
  if (!profile_peaks_.empty()) {
    nlohmann::json phases = nlohmann::json::object();
    for (const PeakAttribution& peak : profile_peaks_) {
      phases[PlaceName(peak.place)] = {{"bytes", peak.bytes}, {"phase", peak.description}};
    }
    end["peak_phase"] = std::move(phases);
  }
  HOIST_RETURN_IF_ERROR(log_->Write(end));
  if (out != nullptr) {
    if (stopped_) {
      *out << "hoist: stopped at step " << step_ << " of " << total << " (" << stop_reason_
           << ")\n";
    }
    *out << "hoist: done, " << step_ << " steps, " << tokens_seen_ << " tokens in "
         << train_seconds_ << " s\n\nmemory by place and category (rank " << rank << " of "
         << comm_->world_size() << "):\n"
         << FormatMemoryTable(memory);
    for (const PeakAttribution& peak : profile_peaks_) {
      *out << PeakSentence(peak);
      const int64_t run_peak = memory.peak_total[int(peak.place)];
      if (peak.bytes < run_peak) {
        *out << " (in the profiled steps; the run's peak was " << FormatBytes(run_peak) << ")";
      }
      *out << "\n";
    }
    if (log_->enabled()) *out << "JSONL log: " << log_->path() << "\n";
  }
  return Status::Ok();
}

void Trainer::EnterPhase(Phase kind, int block) {
  if (profiler_ != nullptr && !evaluating_) profiler_->Enter(step_ + 1, kind, block);
}

Status Trainer::FinishMemoryProfile() {
  if (profiler_ == nullptr) return Status::Ok();
  profiler_->Finish();
  std::string svg = profile_path_;
  const size_t slash = svg.find_last_of('/');
  const size_t dot = svg.find_last_of('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash)) svg.resize(dot);
  svg += ".svg";
  if (svg == profile_path_) svg += ".svg";  // the trace itself was named *.svg
  profile_peaks_ = profiler_->Peaks();
  // The directory was checked at the start; a write that fails now (a full disk) costs the
  // profile, not the training.
  Status written = profiler_->WriteChromeTrace(profile_path_);
  if (written.ok()) written = profiler_->WriteSvg(svg);
  profiler_.reset();
  if (!written.ok()) {
    HOIST_LOG(WARN) << "the memory profile was not written: " << written.message();
    return Status::Ok();
  }
  HOIST_LOG(INFO) << "memory profile: " << profile_path_ << " (Chrome trace; open in Perfetto) and "
                  << svg;
  return Status::Ok();
}

std::string Trainer::CheckpointPath() const {
  return config_.checkpoint.dir + "/" + CheckpointStepDirName(step_);
}

Status Trainer::CheckpointForControl(const std::vector<uint64_t>& ids, bool already_written) {
  Status saved = already_written ? Status::Ok() : SaveCheckpoint();
  const std::string path = CheckpointPath();
  if (!saved.ok() && comm_->rank() == 0) {
    HOIST_LOG(WARN) << "the requested checkpoint failed; training goes on: " << saved.message();
  }
  if (control_ != nullptr) {
    if (saved.ok()) control_->SetLastCheckpoint(path);
    for (uint64_t id : ids) control_->Complete(id, saved, saved.ok() ? path : "");
  }
  return saved;
}

StatusOr<std::string> Trainer::StopOnSignal(int signal_number, bool checkpointed) {
  // A scheduler preempting the job sends SIGTERM and kills it a grace period later: what was
  // trained since the last checkpoint is kept now, and the exit code says the job did not finish.
  stop_signal_ = signal_number;
  const char* name = StopSignalName(signal_number);
  std::string reason = std::string("stopped by ") + name + " (exit code " +
                       std::to_string(128 + signal_number) + ")";
  if (config_.checkpoint.dir.empty() || !config_.checkpoint.on_signal) return reason;
  if (!checkpointed) {
    HOIST_RETURN_IF_ERROR(SaveCheckpoint().WithContext(std::string("checkpointing on ") + name +
                                                       " (checkpoint.on_signal)"));
  }
  if (control_ != nullptr) control_->SetLastCheckpoint(CheckpointPath());
  return reason + "; checkpoint " + CheckpointPath();
}

StatusOr<bool> Trainer::HandleControl(bool checkpointed) {
  if (checkpointed && control_ != nullptr) {
    control_->SetLastCheckpoint(CheckpointPath());
  }
  // While paused, rank 0 renews the exchange at least this often, so that the other ranks,
  // waiting in it, stay well inside comm.timeout_s.
  const auto heartbeat = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(1.0, config_.comm.timeout_s / 4)));
  bool paused = false;
  for (;;) {
    ControlCommands mine;
    if (control_ != nullptr) mine = control_->TakeCommands();
    HOIST_ASSIGN_OR_RETURN(AgreedCommands agreed,
                           ExchangeCommands(*comm_, mine, StopSignalNumber()));
    const ControlCommands& c = agreed.commands;
    if (c.lr || c.gradient_clipping) {
      if (c.lr) lr_override_ = *c.lr;
      if (c.gradient_clipping) clip_ = static_cast<float>(*c.gradient_clipping);
      if (comm_->rank() == 0) {
        HOIST_LOG(INFO) << "control: from step " << step_ + 1 << " lr "
                        << (lr_override_ ? std::to_string(*lr_override_) : "from the schedule")
                        << ", gradient_clipping " << clip_;
      }
      if (control_ != nullptr) {
        control_->SetHyperparams(lr_override_, clip_);
        for (uint64_t id : c.update_ids) control_->Complete(id, Status::Ok());
      }
    }
    if (c.checkpoint || c.stop_checkpoint) {
      // A failed checkpoint is the requester's answer; the job goes on (every rank agreed on the
      // failure inside SaveCheckpoint), except for a stop, which does not stop without it.
      const Status saved = CheckpointForControl(c.checkpoint_ids, checkpointed);
      checkpointed = checkpointed || saved.ok();
      if (!saved.ok() && c.stop_checkpoint) continue;
    }
    if (c.stop || agreed.signalled) {
      if (c.stop) {
        stop_reason_ = "stopped by the control service";
      } else {
        HOIST_ASSIGN_OR_RETURN(stop_reason_, StopOnSignal(agreed.signal_number, checkpointed));
      }
      if (comm_->rank() == 0)
        HOIST_LOG(INFO) << "control: " << stop_reason_ << " after step " << step_;
      if (control_ != nullptr) control_->SetState(JobState::kStopping);
      return true;
    }
    if (c.pause && !paused) {
      paused = true;
      if (comm_->rank() == 0) HOIST_LOG(INFO) << "control: paused after step " << step_;
      if (control_ != nullptr) control_->SetState(JobState::kPaused);
      if (metrics_ != nullptr) metrics_->RecordPaused(true);
    } else if (c.resume && paused) {
      paused = false;
      if (comm_->rank() == 0) HOIST_LOG(INFO) << "control: resumed at step " << step_;
      if (control_ != nullptr) control_->SetState(JobState::kRunning);
      if (metrics_ != nullptr) metrics_->RecordPaused(false);
    }
    if (!paused) return false;
    if (control_ != nullptr) control_->WaitForCommand(Clock::now() + heartbeat);
  }
}

}  // namespace hoist::runtime

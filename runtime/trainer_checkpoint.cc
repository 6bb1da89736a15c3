// The trainer's checkpoints: each rank's shard of the model states, the data position and the
// run's counters saved at a step boundary, and a job restored from them on the same trajectory.
// With the optimizer states on NVMe the shard is written and read a sub-group at a time.
#include <algorithm>
#include <limits>
#include <optional>

#include "comm/agree.h"
#include "core/logging.h"
#include "runtime/checkpoint.h"
#include "runtime/checkpoint_metadata.h"
#include "runtime/run_identity.h"
#include "runtime/trainer.h"

namespace hoist::runtime {
namespace {

// This rank's JSONL log length at the step; older checkpoints have only rank 0's, in the manifest.
constexpr char kJsonlBytesBlob[] = "jsonl_bytes";

}  // namespace

Status Trainer::SaveCheckpoint() {
  const std::string& dir = config_.checkpoint.dir;
  const int rank = comm_->rank(), world_size = comm_->world_size();
  const LoaderState loader = train_loader_->state();
  const int64_t loader_words[2] = {loader.shard_index, loader.position};
  // Each rank's own JSONL log length: with `{rank}` in the path the ranks' logs differ.
  const int64_t log_bytes = log_->bytes();
  std::vector<CheckpointBlob> blobs = {
      {"train_loader", loader_words, int64_t{sizeof(loader_words)}},
      {kJsonlBytesBlob, &log_bytes, int64_t{sizeof(log_bytes)}}};
  // Stage 0 keeps the whole optimizer state on every rank: rank 0 writes it for all. Otherwise
  // each rank writes the shard it owns.
  std::vector<float> master, m, v;
  StreamedBlobs streamed;
  const bool on_nvme = engine_->states_on_nvme();
  if (on_nvme) {
    // Too large, perhaps, to hold in memory: written a sub-group at a time as they are read.
    const int64_t bytes = engine_->state_elements() * int64_t{sizeof(float)};
    streamed.names = {"master", "adam_m", "adam_v"};
    streamed.bytes = {bytes, bytes, bytes};
    streamed.produce = [this](const StreamedBlobs::Emit& emit) {
      return engine_->ReadStateInPieces(
          [&](int64_t, int64_t count, float* master, float* m, float* v) {
            const int64_t piece = count * int64_t{sizeof(float)};
            HOIST_RETURN_IF_ERROR(emit(0, master, piece));
            HOIST_RETURN_IF_ERROR(emit(1, m, piece));
            return emit(2, v, piece);
          });
    };
  } else if (config_.zero.stage > 0 || rank == 0) {
    const int64_t elements = engine_->state_elements();
    master.resize(static_cast<size_t>(elements));
    m.resize(static_cast<size_t>(elements));
    v.resize(static_cast<size_t>(elements));
    HOIST_RETURN_IF_ERROR(engine_->ReadState(master.data(), m.data(), v.data()));
    const int64_t bytes = elements * int64_t{sizeof(float)};
    blobs.push_back({"master", master.data(), bytes});
    blobs.push_back({"adam_m", m.data(), bytes});
    blobs.push_back({"adam_v", v.data(), bytes});
  }
  Status written = WriteRankShard(dir, step_, rank, blobs, streamed, checkpoint_fs());
  // Every rank learns whether every shard was written before rank 0 commits.
  float failures = written.ok() ? 0.0f : 1.0f;
  HOIST_RETURN_IF_ERROR(comm_->AllReduce(&failures, 1, DType::kFloat32, comm::ReduceOp::kSum));
  HOIST_RETURN_IF_ERROR(written);
  if (failures > 0) {
    return UnavailableError("checkpoint of step " + std::to_string(step_) + " in " + dir + ": " +
                            std::to_string(static_cast<int>(failures)) +
                            " other rank(s) failed to write their shard (see their logs); the "
                            "previous checkpoint is kept");
  }
  Status committed = Status::Ok();
  if (rank == 0) {
    nlohmann::json metadata = {{"step", step_},
                               {"optimizer_step_count", optimizer_steps()},
                               {"loss", losses_.empty() ? 0.0f : losses_.back()},
                               {"tokens", tokens_seen_},
                               {"train_s", train_seconds_},
                               {"jsonl_bytes", log_->bytes()},
                               {"zero_stage", config_.zero.stage},
                               {"run", RunIdentity(config_)},
                               {"config", config_.raw}};
    // Hyperparameters set through the control service hold after a resume.
    metadata["control"] = {{"lr_override", nullptr}, {"gradient_clipping", clip_}};
    if (hf_config_.is_object()) metadata["hf_config"] = hf_config_;
    if (lr_override_) metadata["control"]["lr_override"] = *lr_override_;
    if (scaler_ != nullptr) {
      const LossScalerState state = scaler_->state();
      metadata["loss_scaler"] = {{"scale", state.scale},
                                 {"hysteresis_left", state.hysteresis_left},
                                 {"clean_steps", state.clean_steps},
                                 {"skipped_steps", state.skipped_steps}};
    }
    committed = CommitCheckpoint(dir, step_, world_size, metadata, checkpoint_fs());
    if (committed.ok() && config_.checkpoint.keep_last > 0) {
      committed =
          PruneCheckpoints(dir, static_cast<int>(config_.checkpoint.keep_last), checkpoint_fs());
    }
  }
  failures = committed.ok() ? 0.0f : 1.0f;
  HOIST_RETURN_IF_ERROR(comm_->AllReduce(&failures, 1, DType::kFloat32, comm::ReduceOp::kSum));
  HOIST_RETURN_IF_ERROR(committed);
  if (failures > 0) {
    return UnavailableError("rank 0 failed to commit the checkpoint of step " +
                            std::to_string(step_) + " in " + dir + " (see its log)");
  }
  if (rank == 0) HOIST_LOG(INFO) << "saved checkpoint of step " << step_ << " in " << dir;
  return Status::Ok();
}

StatusOr<int64_t> Trainer::LoadCheckpoint(const std::string& step_dir) {
  const int rank = comm_->rank(), world_size = comm_->world_size();
  HOIST_ASSIGN_OR_RETURN(CheckpointReader reader,
                         CheckpointReader::Open(step_dir, rank, checkpoint_fs()));
  if (reader.world_size() != world_size) {
    return FailedPreconditionError(
        "checkpoint " + step_dir + " was written by " + std::to_string(reader.world_size()) +
        " ranks; resume it with the same number of ranks (this job has " +
        std::to_string(world_size) + ")");
  }
  const nlohmann::json& metadata = reader.metadata();
  if (!metadata.contains("run")) {
    return DataLossError("checkpoint " + step_dir + " has no run identity in its manifest");
  }
  HOIST_RETURN_IF_ERROR(CheckSameRun(metadata["run"], config_, step_dir));
  // Every value read from the manifest is range-checked before it steers training.
  const CheckpointMetadata fields(metadata, step_dir);
  HOIST_ASSIGN_OR_RETURN(int64_t saved_stage, fields.Integer("zero_stage", 0, 3));
  if (saved_stage != config_.zero.stage) {
    return FailedPreconditionError(
        "checkpoint " + step_dir + " was written with ZeRO stage " + std::to_string(saved_stage) +
        " but the job has stage " + std::to_string(config_.zero.stage) +
        "; resume with zero_optimization.stage " + std::to_string(saved_stage));
  }
  const int64_t elements = engine_->state_elements();
  const int64_t bytes = elements * int64_t{sizeof(float)};
  // Skipped steps do not count: at most one optimizer step per step.
  HOIST_ASSIGN_OR_RETURN(int64_t optimizer_steps,
                         fields.Integer("optimizer_step_count", 0, reader.step()));
  std::vector<float> master, m, v;
  const bool on_nvme = engine_->states_on_nvme();
  if (on_nvme) {
    // Straight from the shard file to the NVMe states, a sub-group at a time (no stage 0 here:
    // its states cannot be offloaded).
    // The restore is collective: a rank whose shard fails to open or read says so inside it,
    // so that every rank stops together.
    std::vector<BlobReader> blobs;
    Status opened = Status::Ok();
    for (const char* name : {"master", "adam_m", "adam_v"}) {
      StatusOr<BlobReader> blob = reader.OpenBlob(name, bytes);
      if (!blob.ok()) {
        opened = blob.status();
        break;
      }
      blobs.push_back(std::move(blob).value());
    }
    int64_t loader_words[2];
    if (opened.ok()) opened = reader.Read("train_loader", loader_words, sizeof(loader_words));
    if (opened.ok()) {
      opened = train_loader_->Restore(LoaderState{loader_words[0], loader_words[1]});
    }
    HOIST_RETURN_IF_ERROR(engine_->RestoreStateInPieces(
        [&](int64_t, int64_t count, float* master_piece, float* m_piece, float* v_piece) {
          HOIST_RETURN_IF_ERROR(opened);
          const int64_t piece = count * int64_t{sizeof(float)};
          HOIST_RETURN_IF_ERROR(blobs[0].Read(master_piece, piece));
          HOIST_RETURN_IF_ERROR(blobs[1].Read(m_piece, piece));
          return blobs[2].Read(v_piece, piece);
        },
        optimizer_steps));
    // The checksums are known only now: every rank stops if any rank's blobs were damaged.
    Status intact = Status::Ok();
    for (const BlobReader& blob : blobs) {
      if (intact.ok()) intact = blob.Finish();
    }
    HOIST_RETURN_IF_ERROR(comm::AgreeOnStatus(*comm_, intact));
  } else {
    master.resize(static_cast<size_t>(elements));
    m.resize(master.size());
    v.resize(master.size());
    // Stage 0's states are whole and were written by rank 0 alone.
    std::optional<CheckpointReader> rank0;
    if (config_.zero.stage == 0 && rank != 0) {
      HOIST_ASSIGN_OR_RETURN(CheckpointReader opened,
                             CheckpointReader::Open(step_dir, 0, checkpoint_fs()));
      rank0.emplace(std::move(opened));
    }
    const CheckpointReader& states = rank0 ? *rank0 : reader;
    HOIST_RETURN_IF_ERROR(states.Read("master", master.data(), bytes));
    HOIST_RETURN_IF_ERROR(states.Read("adam_m", m.data(), bytes));
    HOIST_RETURN_IF_ERROR(states.Read("adam_v", v.data(), bytes));
  }
  if (!on_nvme) {
    int64_t loader_words[2];
    HOIST_RETURN_IF_ERROR(reader.Read("train_loader", loader_words, sizeof(loader_words)));
    HOIST_RETURN_IF_ERROR(train_loader_->Restore(LoaderState{loader_words[0], loader_words[1]}));
    HOIST_RETURN_IF_ERROR(
        engine_->RestoreState(master.data(), m.data(), v.data(), optimizer_steps));
  }
  if (scaler_ != nullptr) {
    if (!metadata.contains("loss_scaler")) {
      return FailedPreconditionError("checkpoint " + step_dir +
                                     " has no fp16 loss scaler state; it was written by a job "
                                     "without fp16, resume with the same precision");
    }
    LossScalerState state;
    HOIST_ASSIGN_OR_RETURN(
        double scale, fields.Number("loss_scaler.scale", 0.0, std::numeric_limits<float>::max(),
                                    /*min_exclusive=*/true));
    HOIST_ASSIGN_OR_RETURN(int64_t hysteresis, fields.Integer("loss_scaler.hysteresis_left", 1,
                                                              std::numeric_limits<int>::max()));
    HOIST_ASSIGN_OR_RETURN(state.clean_steps, fields.Integer("loss_scaler.clean_steps", 0));
    HOIST_ASSIGN_OR_RETURN(state.skipped_steps,
                           fields.Integer("loss_scaler.skipped_steps", 0, reader.step()));
    state.scale = static_cast<float>(scale);
    state.hysteresis_left = static_cast<int>(hysteresis);
    HOIST_RETURN_IF_ERROR(scaler_->Restore(state));
  }
  if (metadata.contains("control")) {
    // The ranges hoist ctl set accepts; both are applied as floats.
    HOIST_ASSIGN_OR_RETURN(std::optional<double> lr,
                           fields.NullableNumber("control.lr_override", 0.0, 10.0,
                                                 /*min_exclusive=*/true));
    if (lr && !(static_cast<float>(*lr) > 0.0f)) {
      return fields.Bad("control.lr_override",
                        "= " + std::to_string(*lr) + " rounds to 0 as the float it trains with");
    }
    HOIST_ASSIGN_OR_RETURN(double clip, fields.Number("control.gradient_clipping", 0.0,
                                                      std::numeric_limits<float>::max()));
    lr_override_ = lr;
    clip_ = static_cast<float>(clip);
  }
  if (metadata.contains("hf_config") && metadata["hf_config"].is_object()) {
    hf_config_ = metadata["hf_config"];
  }
  step_ = reader.step();
  HOIST_ASSIGN_OR_RETURN(tokens_seen_, fields.Integer("tokens", 0));
  HOIST_ASSIGN_OR_RETURN(int64_t log_bytes, fields.Integer("jsonl_bytes", 0));
  if (std::any_of(reader.blobs().begin(), reader.blobs().end(),
                  [](const ShardBlobEntry& blob) { return blob.name == kJsonlBytesBlob; })) {
    HOIST_RETURN_IF_ERROR(reader.Read(kJsonlBytesBlob, &log_bytes, sizeof(log_bytes)));
    if (log_bytes < 0) {
      return DataLossError("checkpoint " + step_dir + ": rank " + std::to_string(rank) +
                           "'s shard holds a negative JSONL log length (" +
                           std::to_string(log_bytes) + "); resume from another step directory");
    }
  } else if (rank != 0) {
    // Written before each rank kept its own length: rank 0's would cut this rank's log anywhere.
    HOIST_ASSIGN_OR_RETURN(log_bytes,
                           JsonlBytesThroughStep(config_.monitor.jsonl_path, rank, reader.step()));
  }
  if (metadata.contains("train_s")) {
    HOIST_ASSIGN_OR_RETURN(train_seconds_,
                           fields.Number("train_s", 0.0, std::numeric_limits<double>::max()));
  }
  if (rank == 0) HOIST_LOG(INFO) << "resumed from " << step_dir << " at step " << step_;
  return log_bytes;
}

}  // namespace hoist::runtime

// The trainer's checkpoints: each rank's shard of the model states, the data position and the
// run's counters saved at a step boundary, and a job restored from them on the same trajectory,
// on any number of ranks, ZeRO stage and optimizer placement. With the optimizer states on NVMe
// the shard is written and read a sub-group at a time.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/agree.h"
#include "core/check.h"
#include "core/logging.h"
#include "runtime/checkpoint/base_identity.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_config.h"
#include "runtime/checkpoint/checkpoint_metadata.h"
#include "runtime/checkpoint/checkpoint_reshard.h"
#include "runtime/checkpoint/run_identity.h"
#include "runtime/train/trainer.h"

namespace hoist::runtime {
namespace {

// This rank's JSONL log length at the step; older checkpoints have only rank 0's, in the manifest.
constexpr char kJsonlBytesBlob[] = "jsonl_bytes";

// The optimizer states' blobs, whose checksums the restore checks as it reads them (or
// StateReshard::VerifyShare before it reads their ranges).
bool IsStateBlob(const std::string& name) {
  return name == "master" || name == "adam_m" || name == "adam_v";
}

// Checks the checksum of every blob of `shard` but the states'.
Status VerifyOtherBlobs(const CheckpointReader& shard) {
  for (const ShardBlobEntry& blob : shard.blobs()) {
    if (!IsStateBlob(blob.name)) HOIST_RETURN_IF_ERROR(shard.Verify(blob.name, blob.bytes));
  }
  return Status::Ok();
}

}  // namespace

Status Trainer::SaveCheckpoint() {
  const std::string& dir = config_.checkpoint.dir;
  const int rank = comm_->rank(), world_size = comm_->world_size();
  const LoaderState loader = train_loader_->state();
  const int64_t loader_words[4] = {loader.shard_index, loader.position, loader.epoch,
                                   train_loader_->shuffled() ? 1 : 0};
  // Each rank's own JSONL log length: with `{rank}` in the path the ranks' logs differ.
  const int64_t log_bytes = log_->bytes();
  std::vector<CheckpointBlob> blobs = {
      {"train_loader", loader_words, int64_t{sizeof(loader_words)}},
      {kJsonlBytesBlob, &log_bytes, int64_t{sizeof(log_bytes)}}};
  // Stage 0 keeps the whole optimizer state on every rank: rank 0 writes it for all. Otherwise
  // each rank writes the shard it owns.
  StreamedBlobs streamed;
  if (config_.zero.stage > 0 || rank == 0) {
    // Written as the engine hands the states out: from NVMe a sub-group at a time (too large,
    // perhaps, to hold in memory), else the shard in one piece.
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
                               {"run", RunIdentity(config_)}};
    // Hyperparameters set through the control service hold after a resume.
    metadata["control"] = {{"lr_override", nullptr}, {"gradient_clipping", clip_}};
    if (hf_config_.is_object()) metadata["hf_config"] = hf_config_;
    if (base_identity_.is_object()) metadata[kBaseIdentityField] = base_identity_;
    if (lr_override_) metadata["control"]["lr_override"] = *lr_override_;
    if (scaler_ != nullptr) {
      const LossScalerState state = scaler_->state();
      metadata["loss_scaler"] = {{"scale", state.scale},
                                 {"hysteresis_left", state.hysteresis_left},
                                 {"clean_steps", state.clean_steps},
                                 {"skipped_steps", state.skipped_steps}};
    }
    // The config once per run beside the steps, named by its checksum from each manifest.
    if (config_reference_.is_null()) {
      const std::string text = config_.raw != nullptr ? config_.raw->dump() : std::string("{}");
      StatusOr<nlohmann::json> stored = StoreRunConfig(dir, text, checkpoint_fs());
      if (stored.ok()) {
        config_reference_ = std::move(stored).value();
      } else {
        committed = stored.status();
      }
    }
    metadata[kConfigFileField] = config_reference_;
    if (committed.ok()) {
      committed = CommitCheckpoint(dir, step_, world_size, metadata, checkpoint_fs());
    }
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

// A checkpoint being resumed from: its manifest (in rank 0's shard, which every checkpoint has),
// this rank's own shard where the saved job had this rank, and how the saved optimizer states
// map onto this job's partition.
struct ResumeSource {
  ResumeSource(std::string dir_in, CheckpointReader first_in)
      : dir(std::move(dir_in)), first(std::move(first_in)) {}

  std::string dir;
  CheckpointReader first;
  std::optional<CheckpointReader> own;
  int saved_world = 0;
  int64_t saved_stage = 0;
  int64_t optimizer_steps = 0;  // skipped steps do not count
  // The states' partition is a function of the model (pinned by the run identity) and of how
  // many ranks they were split over. The same split reads each shard whole; another one (another
  // world size, or stage 0 against 1-3) reads the ranges of the saved shards that overlap this
  // rank's, after the saved shards' checksums were checked (StateReshard).
  bool same_partition = true;
  std::optional<StateReshard> reshard;

  const nlohmann::json& metadata() const { return first.metadata(); }
  CheckpointMetadata fields() const { return CheckpointMetadata(first.metadata(), dir); }
  // This rank's shard: rank 0's is `first`; null where the saved job had fewer ranks.
  const CheckpointReader* mine(int rank) const {
    return rank == 0 ? &first : (own ? &*own : nullptr);
  }
};

StatusOr<int64_t> Trainer::LoadCheckpoint(const std::string& step_dir) {
  HOIST_ASSIGN_OR_RETURN(ResumeSource source, OpenResume(step_dir));
  HOIST_RETURN_IF_ERROR(PrepareResume(&source));
  HOIST_RETURN_IF_ERROR(RestoreStates(&source));
  HOIST_RETURN_IF_ERROR(RestoreCounters(source));
  HOIST_ASSIGN_OR_RETURN(const int64_t log_bytes, ResumedLogLength(source));
  if (comm_->rank() == 0) {
    HOIST_LOG(INFO) << "resumed from " << step_dir << " at step " << step_;
    if (!source.same_partition) {
      HOIST_LOG(INFO) << "  written by " << source.saved_world << " rank(s) at ZeRO stage "
                      << source.saved_stage << "; its states were repartitioned for "
                      << comm_->world_size() << " rank(s) at stage " << config_.zero.stage;
    }
  }
  return log_bytes;
}

StatusOr<ResumeSource> Trainer::OpenResume(const std::string& step_dir) {
  HOIST_ASSIGN_OR_RETURN(CheckpointReader first,
                         CheckpointReader::Open(step_dir, 0, checkpoint_fs()));
  ResumeSource source(step_dir, std::move(first));
  source.saved_world = source.first.world_size();
  const nlohmann::json& metadata = source.metadata();
  if (!metadata.contains("run")) {
    return DataLossError("checkpoint " + step_dir + " has no run identity in its manifest");
  }
  HOIST_RETURN_IF_ERROR(CheckSameRun(metadata["run"], config_, step_dir, source.saved_world));
  // Every value read from the manifest is range-checked before it steers training.
  const CheckpointMetadata fields = source.fields();
  HOIST_ASSIGN_OR_RETURN(source.saved_stage, fields.Integer("zero_stage", 0, 3));
  // At most one optimizer step per step.
  HOIST_ASSIGN_OR_RETURN(source.optimizer_steps,
                         fields.Integer("optimizer_step_count", 0, source.first.step()));
  source.same_partition =
      StatePartitionWorld(source.saved_world, static_cast<int>(source.saved_stage)) ==
      engine_->state_plan().world_size();
  return source;
}

Status Trainer::PrepareResume(ResumeSource* source) {
  const int rank = comm_->rank(), world_size = comm_->world_size();
  const nlohmann::json& metadata = source->metadata();
  const std::string& step_dir = source->dir;
  // What this rank checks and reads before the collective restore; every rank stops if one fails.
  Status prepared = Status::Ok();
  // A LoRA checkpoint holds the adapters alone: the base read again from model.init_from must be
  // the one they were trained on. Each rank read it itself (nodes may keep their own copy), so
  // one rank may find another base, or fail to read it: the ranks agree on the result below
  // rather than that rank returning alone while the others wait in the collective.
  if (base_identity_.is_object()) {
    if (metadata.contains(kBaseIdentityField)) {
      prepared = CheckSameBase(metadata[kBaseIdentityField], base_identity_,
                               config_.model.init_from, step_dir);
    } else if (rank == 0) {
      HOIST_LOG(WARN) << "checkpoint " << step_dir
                      << " was written before checkpoints recorded the identity of their LoRA "
                         "base; resuming on the base at "
                      << config_.model.init_from
                      << " (model.init_from) without checking that it is the one the adapters "
                         "were trained on";
    }
  }
  // Shard, position, epoch and whether the documents were shuffled; checkpoints written before
  // the epoch was kept have the first two (and read their data in order).
  int64_t loader_words[4] = {0, 0, 0, 0};
  if (prepared.ok()) {
    int64_t bytes = 4 * int64_t{sizeof(int64_t)};
    for (const ShardBlobEntry& blob : source->first.blobs()) {
      if (blob.name == "train_loader" && blob.bytes == 2 * int64_t{sizeof(int64_t)}) {
        bytes = blob.bytes;
      }
    }
    prepared = source->first.Read("train_loader", loader_words, bytes);
  }
  if (prepared.ok() && (loader_words[3] != 0) != train_loader_->shuffled()) {
    // A position in one order is no position in the other.
    prepared = FailedPreconditionError(
        "checkpoint " + step_dir + " was written by a job that read its data " +
        (loader_words[3] != 0 ? "with the documents shuffled" : "in order") +
        ", and this job reads it " + (train_loader_->shuffled() ? "shuffled" : "in order") +
        "; resume with data.shuffle " + (loader_words[3] != 0 ? "true" : "false"));
  }
  if (prepared.ok()) {
    // The data position is global: the same sequence of global batches continues on any split.
    prepared =
        train_loader_->Restore(LoaderState{loader_words[0], loader_words[1], loader_words[2]});
  }
  if (prepared.ok() && rank != 0 && rank < source->saved_world) {
    StatusOr<CheckpointReader> opened = CheckpointReader::Open(step_dir, rank, checkpoint_fs());
    if (opened.ok()) {
      source->own.emplace(std::move(opened).value());
    } else {
      prepared = opened.status();
    }
  }
  const CheckpointReader* mine = source->mine(rank);
  // Every blob of every saved shard is checked on resume, whoever reads it, on any world size:
  // the states' by the restore, the others here, rank r taking the saved shards r,
  // r + world_size, ..., so that a damaged blob no rank reads (another rank's data position or
  // log length) stops the job, named, instead of resuming from it.
  for (int k = rank; prepared.ok() && k < source->saved_world; k += world_size) {
    if (k == 0 || k == rank) {
      prepared = VerifyOtherBlobs(k == 0 ? source->first : *mine);
      continue;
    }
    StatusOr<CheckpointReader> shard = CheckpointReader::Open(step_dir, k, checkpoint_fs());
    prepared = shard.ok() ? VerifyOtherBlobs(*shard) : shard.status();
  }
  if (prepared.ok() && !source->same_partition) {
    StatusOr<StateReshard> created =
        StateReshard::Create(step_dir, source->saved_world, static_cast<int>(source->saved_stage),
                             engine_->state_plan(), checkpoint_fs());
    if (created.ok()) {
      source->reshard.emplace(std::move(created).value());
      prepared = source->reshard->VerifyShare(rank, world_size);
    } else {
      prepared = created.status();
    }
  }
  return comm::AgreeOnStatus(*comm_, prepared);
}

Status Trainer::RestoreStates(ResumeSource* source) {
  const int64_t elements = engine_->state_elements();
  const int64_t bytes = elements * int64_t{sizeof(float)};
  std::optional<StateReshard>& reshard = source->reshard;
  // The same partition: states whole in rank 0's shard (one partition of all), else each rank's.
  const CheckpointReader* states =
      engine_->state_plan().world_size() == 1 ? &source->first : source->mine(comm_->rank());
  HOIST_CHECK(reshard || states != nullptr) << "the same partition, so the same world size";

  // Straight into the states as the engine takes them: on NVMe a sub-group at a time, else the
  // shard in one piece. The restore is collective: a rank whose shard fails to read says so
  // inside it, so that every rank stops together.
  std::vector<BlobReader> blobs;
  Status opened = Status::Ok();
  for (const char* name : {"master", "adam_m", "adam_v"}) {
    if (reshard || !opened.ok()) break;
    StatusOr<BlobReader> blob = states->OpenBlob(name, bytes);
    if (!blob.ok()) {
      opened = blob.status();
    } else {
      blobs.push_back(std::move(blob).value());
    }
  }
  HOIST_RETURN_IF_ERROR(engine_->RestoreStateInPieces(
      [&](int64_t begin, int64_t count, float* master_piece, float* m_piece, float* v_piece) {
        if (reshard) return reshard->Fill(begin, count, master_piece, m_piece, v_piece);
        HOIST_RETURN_IF_ERROR(opened);
        const int64_t piece = count * int64_t{sizeof(float)};
        HOIST_RETURN_IF_ERROR(blobs[0].Read(master_piece, piece));
        HOIST_RETURN_IF_ERROR(blobs[1].Read(m_piece, piece));
        return blobs[2].Read(v_piece, piece);
      },
      source->optimizer_steps));
  // The checksums are known only now: every rank stops if any rank's blobs were damaged.
  Status intact = Status::Ok();
  for (const BlobReader& blob : blobs) {
    if (intact.ok()) intact = blob.Finish();
  }
  return comm::AgreeOnStatus(*comm_, intact);
}

Status Trainer::RestoreCounters(const ResumeSource& source) {
  const nlohmann::json& metadata = source.metadata();
  const CheckpointMetadata fields = source.fields();
  if (scaler_ != nullptr) {
    if (!metadata.contains("loss_scaler")) {
      return FailedPreconditionError("checkpoint " + source.dir +
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
                           fields.Integer("loss_scaler.skipped_steps", 0, source.first.step()));
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
  step_ = source.first.step();
  HOIST_ASSIGN_OR_RETURN(tokens_seen_, fields.Integer("tokens", 0));
  if (metadata.contains("train_s")) {
    HOIST_ASSIGN_OR_RETURN(train_seconds_,
                           fields.Number("train_s", 0.0, std::numeric_limits<double>::max()));
  }
  return Status::Ok();
}

StatusOr<int64_t> Trainer::ResumedLogLength(const ResumeSource& source) {
  const int rank = comm_->rank();
  HOIST_ASSIGN_OR_RETURN(int64_t log_bytes, source.fields().Integer("jsonl_bytes", 0));
  const CheckpointReader* mine = source.mine(rank);
  if (mine != nullptr &&
      std::any_of(mine->blobs().begin(), mine->blobs().end(),
                  [](const ShardBlobEntry& blob) { return blob.name == kJsonlBytesBlob; })) {
    HOIST_RETURN_IF_ERROR(mine->Read(kJsonlBytesBlob, &log_bytes, sizeof(log_bytes)));
    if (log_bytes < 0) {
      return DataLossError("checkpoint " + source.dir + ": rank " + std::to_string(rank) +
                           "'s shard holds a negative JSONL log length (" +
                           std::to_string(log_bytes) + "); resume from another step directory");
    }
  } else if (rank != 0) {
    // Written before each rank kept its own length (rank 0's would cut this rank's log anywhere),
    // or by a job without this rank: the log, if any, is cut after its record of the step.
    HOIST_ASSIGN_OR_RETURN(
        log_bytes, JsonlBytesThroughStep(config_.monitor.jsonl_path, rank, source.first.step()));
  }
  return log_bytes;
}

}  // namespace hoist::runtime

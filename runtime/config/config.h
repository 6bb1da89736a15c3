// The job config: one strict JSON file with DeepSpeed's keys (names, meanings and defaults) plus
// hoist's own sections (model, data, train, checkpoint, monitor, comm, metrics, control, offload),
// and `--set a.b=v` overrides.
//
// Parsing is strict so that a typo never trains the wrong job: an unknown key, a wrong type, a
// non-integral number for an integer key, a Hugging Face "auto" placeholder, or a DeepSpeed
// training-math feature this build lacks (ZeRO++ quantisation, fp16 master weights, partial
// optimizer offload, ...) is an error naming the key path
// (`optimizer.params.betas[1]`) and what to do. fp16 (with loss scaling), bf16, ZeRO stages 0-3
// and ZeRO-Offload / ZeRO-Infinity (zero_optimization.offload_optimizer and offload_param to cpu
// or nvme, with the `aio` queue settings) and activation_checkpointing are read into Fp16Config,
// Bf16Config, ZeroConfig, AioConfig and ActivationCheckpointingConfig. DeepSpeed keys that do not
// change the training math (wall_clock_breakdown, tensorboard,
// zero_optimization.round_robin_gradients, ...) are accepted with one WARN notice each. JSON null
// means "not set" (the default applies).
//
// Config is a plain value type; ParseConfig and LoadConfig are pure functions of their inputs
// (apart from the notices they log and LoadConfig's file read) and are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/placement.h"
#include "core/status.h"
#include "core/tunables.h"
#include "runtime/model/model_config.h"

namespace hoist::runtime {

// `optimizer` {type, params {lr, betas [b1, b2], eps, weight_decay}}.
struct OptimizerConfig {
  // "AdamW", "Adam" or "AdamW8bit"; the input is matched case-insensitively and stored in this
  // spelling ("adamw_8bit" and "adamw_bnb_8bit", Hugging Face's names, are AdamW8bit too).
  // "Adam" means AdamW (decoupled weight decay), as in DeepSpeed. AdamW8bit is bitsandbytes'
  // block-wise 8-bit AdamW (zero::AdamWParams::eight_bit).
  std::string type = "AdamW";
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  // DeepSpeed's default (FusedAdam and DeepSpeedCPUAdam), not torch.optim.AdamW's 0.01, so that
  // a DeepSpeed config without the key trains the same job here.
  float weight_decay = 0.0f;
  // AdamW8bit: parameter units smaller than this keep 32-bit moments (bitsandbytes' default).
  int64_t min_8bit_size = 4096;
};

// `scheduler` {type, params}: DeepSpeed's warmup schedules. Which params are valid depends on
// the type (WarmupLR: warmup_*; WarmupDecayLR: those + total_num_steps; WarmupCosineLR:
// total_num_steps, warmup_min_ratio, warmup_num_steps, cos_min_ratio, warmup_type).
struct SchedulerConfig {
  // "" (no section: constant lr), "WarmupLR", "WarmupDecayLR" or "WarmupCosineLR" (input
  // matched case-insensitively, stored in this spelling).
  std::string type;
  float warmup_min_lr = 0;
  std::optional<float> warmup_max_lr;  // unset: the optimizer's lr
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" or "linear"
  int64_t total_num_steps = 0;      // set and > warmup_num_steps for Decay and Cosine
  float warmup_min_ratio = 0;       // Cosine: warmup starts at this fraction of lr
  float cos_min_ratio = 1e-4f;      // Cosine: the decay ends at this fraction of lr
};

// `data`: a path or glob of llm.c token shards or of prepared shards (documents with loss masks,
// runtime/data/prepared_shard.h); "builtin:demo" is the embedded demo corpus.
// `train` has no default: a DeepSpeed config names its data in the training script, so a
// default here would quietly train such a config on the demo corpus.
struct DataConfig {
  std::string train;  // required, non-empty
  std::string val;    // empty: no validation (then train.eval_interval must be 0)
  // Prepared shards' documents in a new order each epoch, drawn from train.seed (see
  // runtime/data/data_loader.h). Unset: yes for prepared shards; true with token shards is an
  // error (they hold no documents).
  std::optional<bool> shuffle;
};

// `train`: the run's length, seed and evaluation cadence.
struct TrainConfig {
  // Resolved: > 0 (0 in the file means scheduler total_num_steps), except with `epochs`, when the
  // trainer sets it from the data: epochs x the optimizer steps an epoch holds.
  int64_t steps = 0;
  int64_t epochs = 0;  // > 0: passes over data.train (then train.steps is not given)
  uint64_t seed = 1337;
  int64_t eval_interval = 0;  // 0: no periodic evaluation
  int64_t eval_steps = 10;    // > 0
};

// `checkpoint` {dir, interval_steps, keep_last, on_signal}.
struct CheckpointConfig {
  std::string dir;             // empty: no checkpoints
  int64_t interval_steps = 0;  // 0: none periodically (needs a dir when > 0)
  // In [0, INT_MAX]. After each save, the step directories beyond the newest keep_last are
  // deleted; 0 keeps every checkpoint.
  int64_t keep_last = 0;
  // On SIGINT, SIGTERM (a scheduler's preemption) or SIGHUP (a closed terminal), save a checkpoint
  // at the step boundary where the job stops (with a dir; the process then exits 128 + the signal
  // number).
  bool on_signal = true;
};

// `monitor` {jsonl {path}}.
struct MonitorConfig {
  std::string jsonl_path;  // empty: no JSONL log; "{rank}" is expanded by the writer
  // `memory_profile {path, steps}`: the memory tracker's bytes at every phase boundary of the
  // first `steps` steps (and of the set-up before them), as a Chrome trace at `path` and an SVG
  // beside it (path with its extension replaced by .svg). "{rank}" is expanded; a path without
  // it is written by rank 0 alone. Empty: no profile.
  std::string memory_profile_path;
  int64_t memory_profile_steps = 2;  // >= 1
};

// `fp16`: fp16 mixed precision with loss scaling, as DeepSpeed's fp16 section and its
// DynamicLossScaler define it (runtime/train/loss_scaler.h). The dynamic-scaling keys are validated
// when the section is enabled with loss_scale 0.
struct Fp16Config {
  bool enabled = false;
  float loss_scale = 0;          // 0: dynamic; > 0: static scale (finite)
  int initial_scale_power = 16;  // dynamic scale starts at 2^initial_scale_power; in [-126, 127]
  int64_t loss_scale_window = 1000;  // clean steps before the dynamic scale doubles; > 0
  // Of the overflows since the last refill, the first hysteresis-1 keep the scale and later
  // ones halve it; >= 1.
  int hysteresis = 2;
  // true: every step without overflow refills the hysteresis budget; false: only a doubling does.
  bool consecutive_hysteresis = false;
  float min_loss_scale = 1;  // the dynamic scale never goes below it; > 0 (finite)
};

// `bf16` (or its legacy name `bfloat16`): bf16 mixed precision, no loss scaling.
struct Bf16Config {
  bool enabled = false;
};

// `zero_optimization.offload_optimizer` (ZeRO-Offload / ZeRO-Infinity): each rank's optimizer
// shard (fp32 master weights and both Adam moments) lives in host memory (cpu) or in a scratch
// file under nvme_path (nvme), and the AdamW step runs on the CPU. Needs stage 1, 2 or 3. The
// legacy `cpu_offload: true` means device cpu.
struct OffloadOptimizerConfig {
  Placement device = Placement::kDevice;
  std::string nvme_path;   // required (non-empty) for nvme
  bool pin_memory = true;  // host buffers page-locked (within RLIMIT_MEMLOCK)
  // nvme: how many sub-groups' (master, m, v) the swapper holds in host memory at once; 1 runs
  // read, update and write one after another, 2 overlaps reading the next sub-group with the
  // update, 3 or more also overlaps writing the previous one. >= 1.
  int64_t buffer_count = tunables::kOptimizerBufferCount.default_value;
  // DeepSpeed initialises the NVMe states in place of a CPU staging copy; hoist always writes
  // them straight to the file, so both values behave the same (accepted, read, no effect).
  bool fast_init = false;
  // The share of the optimizer offloaded, in (0, 1] (DeepSpeed's ratio): below 1 the leading
  // units of each rank's shard keep their states on the device and are updated there
  // (zero::OptimizerOffload::ratio). device cpu only (AdamW and AdamW8bit).
  double ratio = 1.0;
};

// `zero_optimization.offload_param` (stage 3 only): each rank's compute-type parameter shards
// live in host memory (cpu) or in a scratch file under nvme_path (nvme) and are brought in one
// unit ahead of use. The legacy `cpu_offload_param: true` means device cpu.
struct OffloadParamConfig {
  Placement device = Placement::kDevice;
  std::string nvme_path;  // required (non-empty) for nvme
  bool pin_memory = true;
  // core/tunables.h says what each counts.
  int64_t buffer_count = tunables::kParamBufferCount.default_value;
  int64_t buffer_size = tunables::kParamBufferSize.default_value;
  int64_t max_in_cpu = tunables::kParamMaxInCpu.default_value;
};

// `zero_optimization`: the ZeRO stage and its tuning, with DeepSpeed's defaults (the tunables'
// defaults, ranges and meanings are in core/tunables.h). Sizes count elements, not bytes.
struct ZeroConfig {
  int stage = 0;  // 0 off, 1 optimizer states, 2 + gradients, 3 + parameters partitioned
  int64_t reduce_bucket_size = tunables::kReduceBucketSize.default_value;
  int64_t allgather_bucket_size = tunables::kAllgatherBucketSize.default_value;
  // Overlap gradient reduction with backward. DeepSpeed's rule, kept here: unset means true for
  // stage 3 and false otherwise.
  bool overlap_comm = false;
  bool contiguous_gradients = true;  // read and noticed; hoist's buckets are always contiguous
  bool reduce_scatter = true;        // false: stages 1-2 all-reduce gradients instead
  // Stage 3 (`stage3_` prefix optional in the file, as in DeepSpeed):
  int64_t stage3_prefetch_bucket_size = tunables::kPrefetchBucketSize.default_value;
  int64_t stage3_param_persistence_threshold = tunables::kParamPersistenceThreshold.default_value;
  int64_t stage3_max_live_parameters = tunables::kMaxLiveParameters.default_value;
  int64_t sub_group_size = tunables::kSubGroupSize.default_value;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
};

// `aio`: the NVMe queue. block_size and queue_depth shape hoist's io_uring requests;
// intra_op_parallelism, single_submit and overlap_events tune DeepSpeed's libaio threads and are
// read, checked and noticed (hoist's queue has no such threads). use_gds is refused.
struct AioConfig {
  int64_t block_size = 1048576;      // bytes; a positive multiple of 4096
  int64_t queue_depth = 8;           // in [1, 4096]
  int64_t intra_op_parallelism = 1;  // >= 1
  bool single_submit = false;
  bool overlap_events = true;
};

// `offload`, hoist's own section: limits on what offloading may take from the host.
struct OffloadConfig {
  // The host bytes (pageable and pinned) all ranks on one node may use for offloaded states and
  // their buffers; 0 means no cap beyond MemAvailable and the cgroup limit. >= 0.
  int64_t max_host_bytes = 0;
};

// `comm`, hoist's own section: how the ranks talk.
struct CommConfig {
  // A collective that does not finish within this many seconds aborts the job. In (0, 1e9].
  double timeout_s = 600;
  std::string backend = "auto";  // "auto", "mpi" or "shm" (input matched case-insensitively)
};

// `metrics`, hoist's own section: the Prometheus endpoint every rank serves
// (runtime/observe/metrics.h). Off by default, unlike most of hoist: it opens a listening port per
// rank, which a user who did not ask for it would not expect, and two jobs on one node (or a test
// suite running in parallel) would then collide on the same ports and fail to start.
struct MetricsConfig {
  bool enabled = false;
  // An IPv4 or IPv6 address literal (no host names); the default serves this machine only.
  std::string bind = "127.0.0.1";
  // In [0, 65535]. Each rank serves on port + its local rank (the sum must stay <= 65535); 0
  // gives every rank an ephemeral port of the system's choosing (for tests).
  int port = 9400;
};

// `control.tls`: PEM files for the control service's TLS. cert and key are given together;
// client_ca (optional, needs cert and key) makes the server require and verify client
// certificates signed by it.
struct ControlTlsConfig {
  std::string cert;
  std::string key;
  std::string client_ca;
};

// `control`, hoist's own section: the gRPC JobControl service that rank 0 serves
// (runtime/observe/control_server.h). Off by default for the same reasons as metrics: a listening
// port nobody asked for, and collisions between jobs on one machine.
//
// Security rules (DESIGN.md, Control): the default bind serves this machine only. Binding any
// other address (not in 127.0.0.0/8 and not ::1) needs tls.cert and tls.key, refused here when
// missing, and a bearer token from token_file or the environment variable HOIST_CONTROL_TOKEN,
// which the server checks when it starts (the environment and the file are read there, not
// here, so that parsing stays a pure function of the text). The token is never a config value:
// a config is saved in checkpoints and printed, and `--set` shows up in `ps`.
struct ControlConfig {
  bool enabled = false;
  // An IPv4 or IPv6 address literal (no host names).
  std::string bind = "127.0.0.1";
  // In [0, 65535]; 0 lets the system choose (for tests).
  int port = 7070;
  ControlTlsConfig tls;
  // A file holding the bearer token (one line; a trailing newline is ignored). Empty: the token
  // comes from HOIST_CONTROL_TOKEN, if set.
  std::string token_file;
  // Whether calls need a bearer token on a loopback bind too (any other bind always needs one).
  // Any user of a machine can reach its loopback ports, so by default a loopback job with no
  // token configured makes one of its own and writes it, mode 0600, to JobTokenPath (runtime/
  // control_token.h: <checkpoint.dir>/control.token), where `hoist ctl` reads it. false serves
  // a loopback bind to every local user without a token; it is refused with token_file set and
  // on any other bind.
  bool require_token = true;

  // Whether `bind` is a loopback address (127.0.0.0/8 or ::1); false for anything unparsable.
  bool loopback() const;
};

// What `hoist ctl` needs from a job's config: how to reach the control service and where the job
// leaves its token.
struct ControlClientSettings {
  ControlConfig control;
  std::string checkpoint_dir;  // checkpoint.dir
};

// Besides each key's own rule, ParseConfig refuses a model and micro-batch whose largest
// activation or parameter tensor (per layer) holds 2^31 or more elements, because the CPU
// kernels take and multiply sizes as int: micro*seq_len*4*n_embd, micro*seq_len*padded_vocab,
// micro*n_head*seq_len^2, padded_vocab*n_embd and 4*n_embd^2 must each be < 2^31.
struct Config {
  // DeepSpeed's batch rule, resolved for the world size: all > 0 and
  // train_batch_size == train_micro_batch_size_per_gpu * gradient_accumulation_steps * world.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  float gradient_clipping = 1.0f;  // DeepSpeed's current default; 0 disables clipping
  // Deliberately not DeepSpeed's default: DeepSpeed's code default is None (no periodic
  // print), hoist prints progress every 10 steps unless told otherwise. 0 (or JSON null, which
  // is DeepSpeed's None) disables periodic printing.
  int64_t steps_per_print = 10;
  ModelConfig model;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  DataConfig data;
  TrainConfig train;
  CheckpointConfig checkpoint;
  MonitorConfig monitor;
  Fp16Config fp16;  // fp16 and bf16 are never both enabled
  Bf16Config bf16;
  ZeroConfig zero;
  CommConfig comm;
  MetricsConfig metrics;
  ControlConfig control;
  AioConfig aio;
  ActivationCheckpointingConfig activation_checkpointing;
  OffloadConfig offload;
  // DeepSpeed's top-level communication_data_type ("fp32", "fp16" or "bf16", any case): the
  // type gradients are reduced in. Unset: the compute precision().
  DType communication_data_type = DType::kFloat32;
  // The effective JSON after overrides (stored beside the checkpoints), never null after
  // ParseConfig. Copies of a Config share it: for a large config the parsed tree is many times
  // the file's size, and a job copies its Config (the trainer, the planner's candidates).
  std::shared_ptr<const nlohmann::json> raw;
  // The notices logged for accepted-but-ignored DeepSpeed keys, one line each.
  std::vector<std::string> notices;

  // fp16.enabled -> kFloat16, bf16.enabled -> kBFloat16, else kFloat32.
  DType precision() const;
};

// Parses `text` (strict JSON) with the dotted overrides ("a.b=v"; v is JSON if it parses as
// JSON, else a string) applied, for `world_size` (> 0) data-parallel ranks. `source_name`
// (usually the file path) prefixes error messages.
StatusOr<Config> ParseConfig(std::string_view text, const std::vector<std::string>& overrides,
                             int world_size, std::string_view source_name);

// ParseConfig without logging the notices (Config::notices still holds them): for callers that
// parse many variants of a config whose notices were already logged once, such as the memory
// planner (runtime/memory/memory_plan.h).
StatusOr<Config> ParseConfigQuietly(std::string_view text,
                                    const std::vector<std::string>& overrides, int world_size,
                                    std::string_view source_name);

// Reads `path`, then ParseConfig. An empty path means the embedded demo config
// (examples/demo.json). Blocks on the file read.
StatusOr<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides,
                            int world_size);

// The `control` section (with ParseConfig's checks of it) and checkpoint.dir of the config at
// `path` (empty: the embedded demo config), without the rest of ParseConfig's rules: the batch
// sizes, for one, resolve only for the job's world size, which a client does not know. Blocks on
// the file read.
StatusOr<ControlClientSettings> LoadControlClientSettings(const std::string& path);

}  // namespace hoist::runtime

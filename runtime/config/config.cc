#include "runtime/config/config.h"

#include <arpa/inet.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

#include "core/file_system.h"
#include "core/logging.h"
#include "runtime/config/config_deepspeed.h"
#include "runtime/config/config_deepspeed_keys.h"
#include "runtime/config/config_model.h"
#include "runtime/config/config_optimizer.h"
#include "runtime/config/config_reader.h"
#include "runtime/config/lr_schedule.h"

extern const unsigned char kDemoConfig[];
extern const size_t kDemoConfig_size;

namespace hoist::runtime {
namespace {

using config_internal::ClosestMatch;
using config_internal::ErrorSource;
using config_internal::Lower;
using config_internal::Section;
using nlohmann::json;

constexpr std::string_view kHoistTopLevelKeys[] = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "steps_per_print",
    "optimizer",
    "scheduler",
    "model",
    "lora",
    "data",
    "train",
    "checkpoint",
    "monitor",
    "comm",
    "metrics",
    "control",
    "offload",
};

std::string Num(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}
std::string Num(int64_t value) { return std::to_string(value); }

// `text` matched case-insensitively against `canonical`; "" when none matches.
std::string Canonical(std::string_view text, const std::vector<std::string_view>& canonical) {
  for (std::string_view name : canonical) {
    if (Lower(name) == Lower(text)) return std::string(name);
  }
  return "";
}

Status ReadData(const Section& top, DataConfig* data) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("data"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"train", "val", "shuffle"}));
  HOIST_RETURN_IF_ERROR(s.String("train", &data->train));
  HOIST_RETURN_IF_ERROR(s.String("val", &data->val));
  if (s.Has("shuffle")) {
    bool shuffle = true;
    HOIST_RETURN_IF_ERROR(s.Bool("shuffle", &shuffle));
    data->shuffle = shuffle;
  }
  if (data->train.empty()) {
    return s.Invalid("train",
                     "must be set to a token shard path or glob (or \"builtin:demo\" for the "
                     "embedded corpus)");
  }
  return Status::Ok();
}

Status ReadTrain(const Section& top, TrainConfig* train) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("train"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"steps", "epochs", "seed", "eval_interval", "eval_steps"}));
  HOIST_RETURN_IF_ERROR(s.Int("steps", &train->steps));
  HOIST_RETURN_IF_ERROR(s.Int("epochs", &train->epochs));
  if (train->epochs < 0) return s.Invalid("epochs", "must be >= 0, found " + Num(train->epochs));
  if (train->epochs > 0 && train->steps > 0) {
    return s.Invalid("epochs", "and train.steps are both set; give one of them");
  }
  HOIST_RETURN_IF_ERROR(s.UInt("seed", &train->seed));
  HOIST_RETURN_IF_ERROR(s.Int("eval_interval", &train->eval_interval));
  HOIST_RETURN_IF_ERROR(s.Int("eval_steps", &train->eval_steps));
  if (train->steps < 0) return s.Invalid("steps", "must be >= 0, found " + Num(train->steps));
  if (train->eval_interval < 0) {
    return s.Invalid("eval_interval",
                     "must be >= 0 (0: no evaluation), found " + Num(train->eval_interval));
  }
  if (train->eval_steps <= 0) {
    return s.Invalid("eval_steps", "must be > 0, found " + Num(train->eval_steps));
  }
  return Status::Ok();
}

Status ReadCheckpoint(const Section& top, CheckpointConfig* ckpt,
                      std::vector<std::string>* notices) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("checkpoint"));
  // DeepSpeed's own `checkpoint` section shares the name; its keys tune how DeepSpeed saves.
  std::vector<std::string_view> allowed = {"dir", "interval_steps", "keep_last", "on_signal"};
  const auto& deepspeed_keys = config_internal::DeepSpeedCheckpointKeys();
  allowed.insert(allowed.end(), deepspeed_keys.begin(), deepspeed_keys.end());
  HOIST_RETURN_IF_ERROR(s.AllowOnly(allowed));
  HOIST_RETURN_IF_ERROR(config_internal::CheckDeepSpeedCheckpointKeys(s, notices));
  HOIST_RETURN_IF_ERROR(s.String("dir", &ckpt->dir));
  HOIST_RETURN_IF_ERROR(s.Int("interval_steps", &ckpt->interval_steps));
  HOIST_RETURN_IF_ERROR(s.Int("keep_last", &ckpt->keep_last));
  HOIST_RETURN_IF_ERROR(s.Bool("on_signal", &ckpt->on_signal));
  if (ckpt->interval_steps < 0) {
    return s.Invalid("interval_steps", "must be >= 0, found " + Num(ckpt->interval_steps));
  }
  // The pruning that acts on it counts checkpoints in int.
  if (ckpt->keep_last < 0 || ckpt->keep_last > std::numeric_limits<int>::max()) {
    return s.Invalid("keep_last",
                     "must be in [0, " + Num(int64_t{std::numeric_limits<int>::max()}) +
                         "] (0 keeps every checkpoint), found " + Num(ckpt->keep_last));
  }
  if (ckpt->interval_steps > 0 && ckpt->dir.empty()) {
    return s.Invalid("interval_steps", "is " + Num(ckpt->interval_steps) +
                                           " but checkpoint.dir is empty; set the directory "
                                           "to save into, or set interval_steps to 0");
  }
  return Status::Ok();
}

Status ReadMonitor(const Section& top, MonitorConfig* monitor) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("monitor"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"jsonl", "memory_profile"}));
  HOIST_ASSIGN_OR_RETURN(Section jsonl, s.Child("jsonl"));
  HOIST_RETURN_IF_ERROR(jsonl.AllowOnly({"path"}));
  HOIST_RETURN_IF_ERROR(jsonl.String("path", &monitor->jsonl_path));
  HOIST_ASSIGN_OR_RETURN(Section profile, s.Child("memory_profile"));
  HOIST_RETURN_IF_ERROR(profile.AllowOnly({"path", "steps"}));
  HOIST_RETURN_IF_ERROR(profile.String("path", &monitor->memory_profile_path));
  HOIST_RETURN_IF_ERROR(profile.Int("steps", &monitor->memory_profile_steps));
  if (monitor->memory_profile_steps < 1) {
    return profile.Invalid("steps", "must be >= 1 (the steps to profile from the start), found " +
                                        std::to_string(monitor->memory_profile_steps));
  }
  return Status::Ok();
}

Status ReadComm(const Section& top, CommConfig* comm) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("comm"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"timeout_s", "backend"}));
  HOIST_RETURN_IF_ERROR(s.Double("timeout_s", &comm->timeout_s));
  // The upper bound keeps the timeout in nanoseconds well inside int64.
  if (!(comm->timeout_s > 0 && comm->timeout_s <= 1e9)) {
    return s.Invalid("timeout_s", "must be in (0, 1e9] seconds, found " + Num(comm->timeout_s));
  }
  std::string backend = comm->backend;
  HOIST_RETURN_IF_ERROR(s.String("backend", &backend));
  const std::vector<std::string_view> kBackends = {"auto", "mpi", "shm"};
  comm->backend = Canonical(backend, kBackends);
  if (comm->backend.empty()) {
    std::string message = "unknown backend \"" + backend + "\";";
    std::string_view guess = ClosestMatch(Lower(backend), kBackends);
    if (!guess.empty()) message += " did you mean \"" + std::string(guess) + "\"?";
    return s.Invalid("backend", message + " hoist supports \"auto\", \"mpi\" and \"shm\"");
  }
  return Status::Ok();
}

// Refuses anything but an IPv4 or IPv6 literal: the servers take address literals only, so a host
// name is refused at parse time rather than failing on rank 0 at startup.
Status CheckAddressLiteral(const Section& s, const std::string& bind) {
  unsigned char address[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, bind.c_str(), address) == 1 ||
      inet_pton(AF_INET6, bind.c_str(), address) == 1) {
    return Status::Ok();
  }
  std::string message =
      "must be an IPv4 or IPv6 address such as \"127.0.0.1\" (this machine "
      "only), \"0.0.0.0\" (every interface) or \"::1\", found \"" +
      bind + "\"";
  if (Lower(bind) == "localhost") message += "; did you mean \"127.0.0.1\"?";
  return s.Invalid("bind", message);
}

Status ReadControl(const Section& top, ControlConfig* control) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("control"));
  // Said without the usual "--set ..." attribution, which would repeat the secret.
  if (s.Find("token") != nullptr) {
    return InvalidArgumentError(
        "control.token: the bearer token is never a config value (a config is saved in "
        "checkpoints, and --set shows in the process list); write it into a file named by "
        "control.token_file, or set the environment variable HOIST_CONTROL_TOKEN");
  }
  HOIST_RETURN_IF_ERROR(
      s.AllowOnly({"enabled", "bind", "port", "tls", "token_file", "require_token"}));
  HOIST_RETURN_IF_ERROR(s.Bool("enabled", &control->enabled));
  HOIST_RETURN_IF_ERROR(s.String("bind", &control->bind));
  HOIST_RETURN_IF_ERROR(s.Int("port", &control->port));
  HOIST_RETURN_IF_ERROR(s.String("token_file", &control->token_file));
  HOIST_RETURN_IF_ERROR(s.Bool("require_token", &control->require_token));
  HOIST_ASSIGN_OR_RETURN(Section tls, s.Child("tls"));
  HOIST_RETURN_IF_ERROR(tls.AllowOnly({"cert", "key", "client_ca"}));
  HOIST_RETURN_IF_ERROR(tls.String("cert", &control->tls.cert));
  HOIST_RETURN_IF_ERROR(tls.String("key", &control->tls.key));
  HOIST_RETURN_IF_ERROR(tls.String("client_ca", &control->tls.client_ca));
  if (control->port < 0 || control->port > 65535) {
    return s.Invalid("port", "must be in [0, 65535] (0: a port of the system's choosing), found " +
                                 Num(int64_t{control->port}));
  }
  HOIST_RETURN_IF_ERROR(CheckAddressLiteral(s, control->bind));
  const ControlTlsConfig& t = control->tls;
  if (t.cert.empty() != t.key.empty()) {
    return tls.Invalid(t.cert.empty() ? "cert" : "key",
                       "is not set but control.tls." +
                           std::string(t.cert.empty() ? "key" : "cert") +
                           " is; TLS needs both the certificate chain (tls.cert) and its private "
                           "key (tls.key), as PEM files");
  }
  if (!t.client_ca.empty() && t.cert.empty()) {
    return tls.Invalid("client_ca",
                       "needs control.tls.cert and control.tls.key: client certificates are only "
                       "checked over TLS");
  }
  // A disabled service serves nothing, so only an enabled one is held to the exposure rule.
  if (control->enabled && !control->loopback() && t.cert.empty()) {
    return s.Invalid("bind",
                     "is \"" + control->bind +
                         "\", which other machines can reach, so the control service needs TLS "
                         "and a bearer token there: set control.tls.cert and control.tls.key "
                         "(PEM files) and control.token_file (or the environment variable "
                         "HOIST_CONTROL_TOKEN); or bind \"127.0.0.1\" and reach it through an "
                         "SSH tunnel");
  }
  if (!control->require_token && !control->token_file.empty()) {
    return s.Invalid("require_token",
                     "is false but control.token_file is set; remove token_file to serve "
                     "without a token, or require_token to serve with the token in the file");
  }
  if (control->enabled && !control->require_token && !control->loopback()) {
    return s.Invalid("require_token",
                     "is false but control.bind is \"" + control->bind +
                         "\", which other machines can reach: a token is always required "
                         "there; remove require_token, or bind \"127.0.0.1\"");
  }
  return Status::Ok();
}

Status ReadOffloadLimits(const Section& top, OffloadConfig* offload) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("offload"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"max_host_bytes"}));
  HOIST_RETURN_IF_ERROR(s.Int("max_host_bytes", &offload->max_host_bytes));
  if (offload->max_host_bytes < 0) {
    return s.Invalid("max_host_bytes",
                     "must be >= 0 bytes (0: no cap), found " + Num(offload->max_host_bytes));
  }
  return Status::Ok();
}

Status ReadMetrics(const Section& top, MetricsConfig* metrics) {
  HOIST_ASSIGN_OR_RETURN(Section s, top.Child("metrics"));
  HOIST_RETURN_IF_ERROR(s.AllowOnly({"enabled", "bind", "port"}));
  HOIST_RETURN_IF_ERROR(s.Bool("enabled", &metrics->enabled));
  HOIST_RETURN_IF_ERROR(s.String("bind", &metrics->bind));
  HOIST_RETURN_IF_ERROR(s.Int("port", &metrics->port));
  if (metrics->port < 0 || metrics->port > 65535) {
    return s.Invalid("port", "must be in [0, 65535] (0: an ephemeral port per rank), found " +
                                 Num(int64_t{metrics->port}));
  }
  return CheckAddressLiteral(s, metrics->bind);
}

std::string BatchNumbers(std::optional<int64_t> tbs, std::optional<int64_t> mbs,
                         std::optional<int64_t> gas, int world_size) {
  auto show = [](std::optional<int64_t> v) { return v ? std::to_string(*v) : "unset"; };
  return "(train_batch_size " + show(tbs) + ", train_micro_batch_size_per_gpu " + show(mbs) +
         ", gradient_accumulation_steps " + show(gas) + ", world size " +
         std::to_string(world_size) + ")";
}

// DeepSpeed's rule: train_batch_size = micro * accumulation * world; any two give the third,
// train_batch_size or micro alone imply one accumulation step.
Status ResolveBatch(const Section& top, int world_size, Config* config) {
  std::optional<int64_t> tbs, mbs, gas;
  for (auto [key, slot] :
       {std::pair{"train_batch_size", &tbs}, std::pair{"train_micro_batch_size_per_gpu", &mbs},
        std::pair{"gradient_accumulation_steps", &gas}}) {
    if (!top.Has(key)) continue;
    int64_t value = 0;
    HOIST_RETURN_IF_ERROR(top.Int(key, &value));
    if (value <= 0) return top.Invalid(key, "must be > 0, found " + std::to_string(value));
    *slot = value;
  }
  const std::string numbers = BatchNumbers(tbs, mbs, gas, world_size);
  const int64_t world = world_size;
  if (!tbs && !mbs) {
    return top.errors().Invalid("",
                                "either train_batch_size or train_micro_batch_size_per_gpu must "
                                "be set " +
                                    numbers);
  }
  if (tbs && !mbs && !gas) gas = 1;
  if (mbs && !tbs && !gas) gas = 1;
  if (!tbs) {
    int64_t product = 0;
    if (__builtin_mul_overflow(*mbs, *gas, &product) ||
        __builtin_mul_overflow(product, world, &product)) {
      return top.errors().Invalid("", "the global batch size overflows " + numbers);
    }
    tbs = product;
  } else if (!mbs || !gas) {
    const int64_t known = (mbs ? *mbs : *gas) * world;
    const char* derived = mbs ? "gradient_accumulation_steps" : "train_micro_batch_size_per_gpu";
    if (*tbs % known != 0) {
      return top.errors().Invalid(
          "",
          "train_batch_size is not divisible by " +
              std::string(mbs ? "train_micro_batch_size_per_gpu" : "gradient_accumulation_steps") +
              " x world size, so " + derived + " cannot be derived " + numbers);
    }
    (mbs ? gas : mbs) = *tbs / known;
  }
  if (*tbs != *mbs * *gas * world) {
    return top.errors().Invalid("",
                                "train_batch_size must equal train_micro_batch_size_per_gpu x "
                                "gradient_accumulation_steps x world size, but " +
                                    std::to_string(*tbs) + " != " + std::to_string(*mbs) + " x " +
                                    std::to_string(*gas) + " x " + std::to_string(world) + " " +
                                    numbers +
                                    "; fix one of them, or leave one out to have it derived");
  }
  config->train_batch_size = *tbs;
  config->train_micro_batch_size_per_gpu = *mbs;
  config->gradient_accumulation_steps = *gas;
  return Status::Ok();
}

// The CPU kernels take sizes as int and index with int products of them, so every tensor the
// trainer allocates per layer (and each weight matrix) must hold fewer than 2^31 elements.
Status CheckKernelSizes(const ErrorSource& errors, const Config& config) {
  const ModelConfig& m = config.model;
  struct Factor {
    std::string_view name;
    int64_t value;
  };
  struct Product {
    std::string_view what;
    std::vector<Factor> factors;
  };
  const Factor micro{"train_micro_batch_size_per_gpu", config.train_micro_batch_size_per_gpu};
  const Factor seq{"model.seq_len", m.seq_len};
  const Factor four{"4", 4};
  const Factor embd{"model.n_embd", m.n_embd};
  const Factor vocab{"model.vocab_size padded to a multiple of 128", m.padded_vocab_size()};
  const Factor heads{"model.n_head", m.n_head};
  const Product products[] = {
      {"the MLP activations of one layer", {micro, seq, four, embd}},
      {"the logits", {micro, seq, vocab}},
      {"the attention probabilities of one layer", {micro, heads, seq, seq}},
      {"the token embedding (and output projection) weights", {vocab, embd}},
      {"the MLP weight matrix of one layer", {four, embd, embd}},
  };
  constexpr int64_t kLimit = int64_t{1} << 31;
  for (const Product& product : products) {
    int64_t total = 1;
    bool overflow = false;
    std::string names, values;
    for (const Factor& f : product.factors) {
      overflow = overflow || __builtin_mul_overflow(total, f.value, &total);
      names += (names.empty() ? "" : " x ") + std::string(f.name);
      values += (values.empty() ? "" : " x ") + std::to_string(f.value);
    }
    if (overflow || total >= kLimit) {
      return errors.Invalid(
          "", names + " = " + values + " = " +
                  (overflow ? std::string("2^63 or more") : std::to_string(total)) + " elements (" +
                  std::string(product.what) +
                  "), which must be < 2^31 (2147483648) because the CPU kernels index with int; "
                  "reduce one of these keys");
    }
  }
  return Status::Ok();
}

Status ReadTopLevel(const Section& top, Config* config, std::vector<std::string>* notices) {
  if (!top.Has("gradient_clipping")) {
    notices->push_back(
        "gradient_clipping: not set; gradients are clipped to a global norm of " +
        Num(static_cast<double>(config->gradient_clipping)) +
        " (DeepSpeed's default since 0.19.3; earlier releases did not clip); set it to choose, "
        "or to 0 to turn clipping off");
  }
  HOIST_RETURN_IF_ERROR(top.Float("gradient_clipping", &config->gradient_clipping));
  if (!(config->gradient_clipping >= 0)) {
    return top.Invalid("gradient_clipping", "must be >= 0 (0 disables clipping), found " +
                                                Num(config->gradient_clipping));
  }
  // JSON null is DeepSpeed's None: no periodic print.
  const json* print = top.Find("steps_per_print");
  if (print != nullptr && print->is_null()) config->steps_per_print = 0;
  HOIST_RETURN_IF_ERROR(top.Int("steps_per_print", &config->steps_per_print));
  if (config->steps_per_print < 0) {
    return top.Invalid("steps_per_print", "must be >= 0 (0 disables periodic printing), found " +
                                              Num(config->steps_per_print));
  }
  return Status::Ok();
}

}  // namespace

bool ControlConfig::loopback() const {
  in_addr v4{};
  if (inet_pton(AF_INET, bind.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, bind.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

DType Config::precision() const {
  if (fp16.enabled) return DType::kFloat16;
  if (bf16.enabled) return DType::kBFloat16;
  return DType::kFloat32;
}

namespace {

StatusOr<Config> Parse(std::string_view text, const std::vector<std::string>& overrides,
                       int world_size, std::string_view source_name, bool log_notices) {
  HOIST_CHECK_GT(world_size, 0);
  HOIST_ASSIGN_OR_RETURN(json root, config_internal::ParseConfigJson(text, source_name));
  ErrorSource errors{std::string(source_name)};
  for (const std::string& override_text : overrides) {
    HOIST_RETURN_IF_ERROR(config_internal::ApplyOverride(override_text, &root, &errors));
  }
  if (!root.is_object()) {
    return errors.Invalid(
        "", "the config must be a JSON object ({...}), found " + std::string(root.type_name()));
  }

  Config config;
  Section top(&root, "", &errors);
  std::vector<std::string_view> allowed(std::begin(kHoistTopLevelKeys),
                                        std::end(kHoistTopLevelKeys));
  const auto& deepspeed_keys = config_internal::DeepSpeedOnlyKeys();
  allowed.insert(allowed.end(), deepspeed_keys.begin(), deepspeed_keys.end());
  HOIST_RETURN_IF_ERROR(top.AllowOnly(allowed));
  HOIST_RETURN_IF_ERROR(config_internal::CheckDeepSpeedOnlyKeys(top, &config.notices));

  HOIST_RETURN_IF_ERROR(ResolveBatch(top, world_size, &config));
  HOIST_RETURN_IF_ERROR(ReadTopLevel(top, &config, &config.notices));
  HOIST_RETURN_IF_ERROR(config_internal::ReadModel(top, &config.model, &config.notices));
  HOIST_RETURN_IF_ERROR(config_internal::ReadLora(top, &config.model));
  HOIST_RETURN_IF_ERROR(config_internal::ReadOptimizer(top, &config.optimizer, &config.notices));
  HOIST_RETURN_IF_ERROR(
      config_internal::ReadScheduler(top, config.optimizer, &config.scheduler, &config.notices));
  HOIST_RETURN_IF_ERROR(ReadData(top, &config.data));
  HOIST_RETURN_IF_ERROR(ReadTrain(top, &config.train));
  HOIST_RETURN_IF_ERROR(ReadCheckpoint(top, &config.checkpoint, &config.notices));
  HOIST_RETURN_IF_ERROR(ReadMonitor(top, &config.monitor));
  HOIST_RETURN_IF_ERROR(config_internal::ReadPrecision(top, &config, &config.notices));
  HOIST_RETURN_IF_ERROR(config_internal::ReadZero(top, &config.zero, &config.notices));
  HOIST_RETURN_IF_ERROR(config_internal::ReadAio(top, &config.aio, &config.notices));
  HOIST_RETURN_IF_ERROR(config_internal::ReadActivationCheckpointing(
      top, &config.activation_checkpointing, &config.notices));
  HOIST_RETURN_IF_ERROR(ReadComm(top, &config.comm));
  HOIST_RETURN_IF_ERROR(ReadMetrics(top, &config.metrics));
  HOIST_RETURN_IF_ERROR(ReadControl(top, &config.control));
  HOIST_RETURN_IF_ERROR(ReadOffloadLimits(top, &config.offload));

  if (config.train.steps == 0 && config.train.epochs == 0) {
    if (config.scheduler.total_num_steps <= 0) {
      return errors.Invalid("train.steps",
                            "must be set to the number of optimizer steps to run (or set "
                            "train.epochs, or scheduler.params.total_num_steps, which it then "
                            "defaults to)");
    }
    config.train.steps = config.scheduler.total_num_steps;
  }
  if (config.train.eval_interval > 0 && config.data.val.empty()) {
    return errors.Invalid("train.eval_interval",
                          "is " + Num(config.train.eval_interval) +
                              " but data.val is not set, so there is nothing to evaluate on; set "
                              "data.val to a token shard path or glob (or \"builtin:demo\"), or "
                              "set train.eval_interval to 0");
  }
  HOIST_RETURN_IF_ERROR(CheckKernelSizes(errors, config));
  // The schedule's own checks, the ones the trainer runs, here too: `hoist estimate` and `plan`
  // refuse what `train` would, naming the file.
  if (StatusOr<LrSchedule> schedule = LrSchedule::Create(LrScheduleParamsOf(config));
      !schedule.ok()) {
    return errors.Invalid("", schedule.status().message());
  }

  for (std::string& notice : config.notices) {
    notice = std::string(source_name) + ": " + notice;
    if (log_notices) HOIST_LOG(WARN) << notice;
  }
  config.raw = std::make_shared<const json>(std::move(root));
  return config;
}

}  // namespace

StatusOr<Config> ParseConfig(std::string_view text, const std::vector<std::string>& overrides,
                             int world_size, std::string_view source_name) {
  return Parse(text, overrides, world_size, source_name, /*log_notices=*/true);
}

StatusOr<Config> ParseConfigQuietly(std::string_view text,
                                    const std::vector<std::string>& overrides, int world_size,
                                    std::string_view source_name) {
  return Parse(text, overrides, world_size, source_name, /*log_notices=*/false);
}

namespace {

constexpr char kDemoConfigName[] = "the built-in demo config (examples/demo.json)";

// The text of the config at `path`; the embedded demo config for an empty path.
StatusOr<std::string> ConfigText(const std::string& path) {
  if (path.empty()) {
    return std::string(reinterpret_cast<const char*>(kDemoConfig), kDemoConfig_size);
  }
  StatusOr<std::string> text = ReadFileToString(FileSystem::Posix(), path, kJsonMaxBytes);
  if (!text.ok()) return text.status().WithContext("cannot load the job config");
  return text;
}

}  // namespace

StatusOr<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides,
                            int world_size) {
  HOIST_ASSIGN_OR_RETURN(const std::string text, ConfigText(path));
  return ParseConfig(text, overrides, world_size, path.empty() ? kDemoConfigName : path);
}

StatusOr<ControlClientSettings> LoadControlClientSettings(const std::string& path) {
  HOIST_ASSIGN_OR_RETURN(const std::string text, ConfigText(path));
  const std::string source_name = path.empty() ? kDemoConfigName : path;
  HOIST_ASSIGN_OR_RETURN(json root, config_internal::ParseConfigJson(text, source_name));
  ErrorSource errors{source_name};
  if (!root.is_object()) {
    return errors.Invalid(
        "", "the config must be a JSON object ({...}), found " + std::string(root.type_name()));
  }
  Section top(&root, "", &errors);
  ControlClientSettings settings;
  HOIST_RETURN_IF_ERROR(ReadControl(top, &settings.control));
  HOIST_ASSIGN_OR_RETURN(Section checkpoint, top.Child("checkpoint"));
  HOIST_RETURN_IF_ERROR(checkpoint.String("dir", &settings.checkpoint_dir));
  return settings;
}

}  // namespace hoist::runtime

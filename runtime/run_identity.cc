#include "runtime/run_identity.h"

#include <string>
#include <utility>

namespace hoist::runtime {

nlohmann::json RunIdentity(const Config& config) {
  const ModelConfig& m = config.model;
  nlohmann::json identity = {
      {"model.n_layer", m.n_layer},
      {"model.n_head", m.n_head},
      {"model.n_embd", m.n_embd},
      {"model.vocab_size", m.vocab_size},
      {"model.seq_len", m.seq_len},
      {"data.train", config.data.train},
      {"train_micro_batch_size_per_gpu", config.train_micro_batch_size_per_gpu},
      {"gradient_accumulation_steps", config.gradient_accumulation_steps}};
  // Only where it differs from seq_len, so that checkpoints written before the key existed match.
  if (m.n_positions != 0) identity["model.n_positions"] = m.n_positions;
  return identity;
}

Status CheckSameRun(const nlohmann::json& saved, const Config& config, const std::string& dir) {
  if (!saved.is_object()) {
    return DataLossError("checkpoint " + dir + " has no run identity in its manifest metadata");
  }
  const nlohmann::json expected = RunIdentity(config);
  for (const auto& [key, value] : expected.items()) {
    if (!saved.contains(key) || saved[key] != value) {
      return FailedPreconditionError(
          "checkpoint " + dir + " was written with " + key + " = " +
          (saved.contains(key) ? saved[key].dump() : std::string("(missing)")) +
          " but the job has " + value.dump() +
          "; resume with the settings the checkpoint was written with");
    }
  }
  return Status::Ok();
}

StatusOr<ModelConfig> ModelFromRunIdentity(const nlohmann::json& saved, const std::string& dir) {
  ModelConfig m;
  const std::pair<const char*, int*> fields[] = {{"model.n_layer", &m.n_layer},
                                                 {"model.n_head", &m.n_head},
                                                 {"model.n_embd", &m.n_embd},
                                                 {"model.vocab_size", &m.vocab_size},
                                                 {"model.seq_len", &m.seq_len}};
  for (const auto& [key, value] : fields) {
    if (!saved.is_object() || !saved.contains(key) || !saved[key].is_number_integer() ||
        saved[key].get<int64_t>() <= 0 || saved[key].get<int64_t>() > (int64_t{1} << 30)) {
      return DataLossError("checkpoint " + dir + ": manifest metadata.run." + key +
                           " is missing or not a positive integer");
    }
    *value = saved[key].get<int>();
  }
  if (saved.is_object() && saved.contains("model.n_positions")) {
    const nlohmann::json& positions = saved["model.n_positions"];
    if (!positions.is_number_integer() || positions.get<int64_t>() < m.seq_len ||
        positions.get<int64_t>() > (int64_t{1} << 30)) {
      return DataLossError("checkpoint " + dir +
                           ": manifest metadata.run.model.n_positions is not an integer >= "
                           "model.seq_len");
    }
    m.n_positions = positions.get<int>();
  }
  if (m.n_embd % m.n_head != 0) {
    return DataLossError("checkpoint " + dir + ": manifest metadata.run has model.n_embd " +
                         std::to_string(m.n_embd) + " not divisible by model.n_head " +
                         std::to_string(m.n_head));
  }
  return m;
}

}  // namespace hoist::runtime

#include "runtime/interchange/hf_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "core/json_reader.h"
#include "kernels/cpu/convert.h"
#include "runtime/interchange/export_staging.h"
#include "runtime/interchange/hf_config.h"
#include "runtime/interchange/llmc_checkpoint.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/gpt2_weights.h"
#include "runtime/model/model.h"
#include "runtime/model/model_family.h"

namespace hoist::runtime {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Transposes a (rows, cols) row-major matrix into (cols, rows).
void Transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
}

// The safetensors files an export writes: model.safetensors, or model-NNNNN-of-NNNNN.safetensors.
bool IsExportedWeightsFile(std::string_view name) {
  if (name == "model.safetensors") return true;
  constexpr std::string_view kPattern = "model-#####-of-#####.safetensors";
  if (name.size() != kPattern.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool digit = name[i] >= '0' && name[i] <= '9';
    if (kPattern[i] == '#' ? !digit : name[i] != kPattern[i]) return false;
  }
  return true;
}

// How a family's checkpoints name their tensors beyond the list of HfTensorPlaces.
struct Names {
  std::string optional_prefix;  // may be missing from every name (GPT-2 saved from GPT2Model)
  // Tensors a file may hold that are not parameters hoist keeps: GPT-2's attention-mask buffers
  // of old files, Llama's rotary buffers of old files, and a tied head written anyway.
  bool Ignored(const std::string& name, const ModelConfig& model) const {
    if (name == "lm_head.weight" && model.tie_word_embeddings) return true;
    if (model.family == ModelFamily::kGpt2) {
      return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
    }
    return name.ends_with(".rotary_emb.inv_freq");
  }
};

Names NamesOf(ModelFamily family) {
  return family == ModelFamily::kGpt2 ? Names{"transformer."} : Names{};
}

// A Hugging Face directory.
class HfSource final : public WeightSource {
 public:
  static StatusOr<std::unique_ptr<WeightSource>> Open(const std::string& dir, FileSystem& fs);
  const std::string& path() const override { return dir_; }
  const ModelConfig& model() const override { return model_; }
  const nlohmann::json& hf_config() const override { return config_; }
  Status FillRange(int unit, int64_t begin, int64_t count, float* out) const override;
  std::vector<std::string> files() const override { return file_paths_; }

 private:
  struct Place {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
    HfTensorPlace spec;
  };
  // Elements [first, first + count) of the place's tensor in hoist's layout into `out`; an
  // element that is not finite is an error naming the tensor.
  Status FillTensor(const Place& place, int64_t first, int64_t count, float* out) const;
  // The same without the check.
  Status ReadTensorRange(const Place& place, int64_t first, int64_t count, float* out) const;

  std::string dir_;
  ModelConfig model_;
  std::vector<int64_t> unit_offsets_;  // ModelUnits(model_): unit u is [u, u + 1)
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<Place> places_;            // HfTensorPlaces order
  std::vector<std::string> file_paths_;  // config.json, the index if any, the safetensors
};

StatusOr<std::unique_ptr<WeightSource>> HfSource::Open(const std::string& dir, FileSystem& fs) {
  auto source = std::make_unique<HfSource>();
  source->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  StatusOr<nlohmann::json> config = ReadJsonFile(fs, config_path);
  if (!config.ok()) {
    return Status(config.status().code(), "Hugging Face checkpoint " + dir +
                                              ": its config.json could not be read (" +
                                              config.status().message() +
                                              "); a checkpoint directory holds config.json "
                                              "next to its safetensors");
  }
  source->config_ = std::move(config).value();
  if (!source->config_.is_object()) {
    return InvalidArgumentError(config_path + " is not a JSON object");
  }
  HOIST_ASSIGN_OR_RETURN(source->model_, ModelConfigFromHf(source->config_, config_path));
  source->unit_offsets_ = {0};
  for (const zero::UnitSpec& unit : ModelUnits(source->model_)) {
    source->unit_offsets_.push_back(source->unit_offsets_.back() + unit.size);
  }
  const Names names_of = NamesOf(source->model_.family);

  // The files: the index's shards, or the one model.safetensors.
  std::map<std::string, std::string> weight_map;  // tensor -> file name
  const std::string index_path = dir + "/model.safetensors.index.json";
  StatusOr<FileInfo> index_info = fs.Stat(index_path);
  std::vector<std::string> names;
  if (index_info.ok()) {
    StatusOr<nlohmann::json> read = ReadJsonFile(fs, index_path);
    if (!read.ok()) {
      return DataLossError(read.status().message() +
                           "; the index is damaged: save the checkpoint again");
    }
    nlohmann::json index = std::move(read).value();
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return DataLossError(index_path + " has no weight_map object; the index is damaged");
    }
    std::set<std::string> unique;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      const std::string file_name = file.is_string() ? file.get<std::string>() : std::string();
      if (file_name.empty() || file_name == "." || file_name == ".." ||
          file_name.find('/') != std::string::npos) {
        return DataLossError(index_path + ": weight_map[\"" + tensor +
                             "\"] is not a file name in the directory");
      }
      weight_map[tensor] = file.get<std::string>();
      unique.insert(file.get<std::string>());
    }
    names.assign(unique.begin(), unique.end());
  } else {
    names.push_back("model.safetensors");
  }
  source->file_paths_.push_back(config_path);
  if (index_info.ok()) source->file_paths_.push_back(index_path);
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const std::string& name : names) {
    source->file_paths_.push_back(dir + "/" + name);
    HOIST_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(dir + "/" + name, fs));
    source->files_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
    by_file[name] = source->files_.back().get();
  }

  // Every tensor the model needs, where the index says (or in any file), with its shape.
  std::set<std::pair<const SafetensorsFile*, std::string>> used;
  for (HfTensorPlace& spec : HfTensorPlaces(source->model_)) {
    Place place;
    std::string found_name;
    std::vector<std::string> candidates = {spec.name};
    if (!names_of.optional_prefix.empty() && spec.name.starts_with(names_of.optional_prefix)) {
      candidates.push_back(spec.name.substr(names_of.optional_prefix.size()));
    }
    for (const std::string& candidate : candidates) {
      for (const auto& file : source->files_) {
        if (!weight_map.empty()) {
          auto it = weight_map.find(candidate);
          if (it == weight_map.end() || by_file[it->second] != file.get()) continue;
        }
        if (const SafetensorsTensor* t = file->Find(candidate)) {
          place.file = file.get();
          place.tensor = t;
          found_name = candidate;
          break;
        }
      }
      if (place.tensor != nullptr) break;
    }
    if (place.tensor == nullptr && !weight_map.empty()) {
      // In a shard the index does not send it to: the index and the shards are of two saves.
      for (const std::string& candidate : candidates) {
        for (const auto& file : source->files_) {
          if (file->Find(candidate) == nullptr) continue;
          auto it = weight_map.find(candidate);
          return DataLossError(
              index_path + " maps tensor \"" + candidate + "\" to " +
              (it == weight_map.end() ? std::string("no file") : it->second) + " but " +
              file->path() +
              " holds it: the index and the shards are from different saves; save or "
              "download the checkpoint again");
        }
      }
    }
    if (place.tensor == nullptr) {
      return InvalidArgumentError(
          "Hugging Face checkpoint " + dir + " has no tensor \"" + spec.name + "\"" +
          (names_of.optional_prefix.empty()
               ? std::string()
               : " (nor without the \"" + names_of.optional_prefix + "\" prefix)") +
          ", which the " + ModelFamilyName(source->model_.family) +
          " model of its config.json needs");
    }
    if (place.tensor->shape != spec.shape) {
      return InvalidArgumentError("Hugging Face checkpoint " + place.file->path() + ": tensor \"" +
                                  found_name + "\" has shape " + ShapeText(place.tensor->shape) +
                                  " but its config.json implies " + ShapeText(spec.shape));
    }
    const std::string& dtype = place.tensor->dtype;
    if (dtype != "F32" && dtype != "BF16" && dtype != "F16") {
      return InvalidArgumentError("Hugging Face checkpoint " + place.file->path() + ": tensor \"" +
                                  found_name + "\" is " + dtype +
                                  "; hoist reads weights stored as F32, BF16 or F16");
    }
    used.insert({place.file, found_name});
    place.spec = std::move(spec);
    source->places_.push_back(std::move(place));
  }
  // Nothing else: a tensor hoist would drop is a different model, not noise. The tied head and
  // old files' attention masks are the exceptions.
  for (const auto& file : source->files_) {
    for (const SafetensorsTensor& t : file->tensors()) {
      if (used.count({file.get(), t.name})) continue;
      if (names_of.Ignored(t.name, source->model_)) continue;
      if (auto it = weight_map.find(t.name);
          it != weight_map.end() && by_file[it->second] != file.get()) {
        return DataLossError(file->path() + " holds tensor \"" + t.name + "\", which " +
                             index_path + " maps to " + it->second +
                             ": a tensor in two shards; save or download the checkpoint again");
      }
      return InvalidArgumentError("Hugging Face checkpoint " + file->path() + " holds tensor \"" +
                                  t.name + "\", which hoist's " +
                                  ModelFamilyName(source->model_.family) +
                                  " has no place for: it is not the model its config.json "
                                  "describes");
    }
  }
  return std::unique_ptr<WeightSource>(std::move(source));
}

Status HfSource::FillTensor(const Place& place, int64_t first, int64_t count, float* out) const {
  HOIST_RETURN_IF_ERROR(ReadTensorRange(place, first, count, out));
  // An inf or NaN weight makes the first loss NaN, which would read as a learning rate too high:
  // name the tensor that holds it instead.
  const float* bad = std::find_if(out, out + count, [](float x) { return !std::isfinite(x); });
  if (bad == out + count) return Status::Ok();
  return InvalidArgumentError("Hugging Face checkpoint " + place.file->path() + ": tensor \"" +
                              place.tensor->name + "\" holds " + std::to_string(*bad) +
                              " (element " + std::to_string(first + (bad - out)) +
                              " as hoist lays it out); weights must be finite: the file is "
                              "damaged or the run that wrote it diverged");
}

Status HfSource::ReadTensorRange(const Place& place, int64_t first, int64_t count,
                                 float* out) const {
  if (!place.spec.transposed) return place.file->ReadFloat(*place.tensor, first, count, out);
  // Stored (in, out): hoist's rows are the file's columns. The rows the range touches are read
  // as a run of every stored row and transposed, so a range costs its own size, not the tensor's.
  const int64_t in = place.spec.shape[0], out_features = place.spec.shape[1];
  const int64_t row_lo = first / in, row_hi = (first + count + in - 1) / in;
  const int64_t rows = row_hi - row_lo;
  std::vector<float> run(static_cast<size_t>(rows)), block(static_cast<size_t>(rows * in));
  for (int64_t c = 0; c < in; ++c) {
    HOIST_RETURN_IF_ERROR(
        place.file->ReadFloat(*place.tensor, c * out_features + row_lo, rows, run.data()));
    for (int64_t r = 0; r < rows; ++r)
      block[static_cast<size_t>(r * in + c)] = run[static_cast<size_t>(r)];
  }
  std::copy_n(block.begin() + (first - row_lo * in), count, out);
  return Status::Ok();
}

Status HfSource::FillRange(int unit, int64_t begin, int64_t count, float* out) const {
  if (unit < 0 || unit + 1 >= static_cast<int>(unit_offsets_.size()) || begin < 0 || count < 0) {
    return InvalidArgumentError("unit " + std::to_string(unit) + " [" + std::to_string(begin) +
                                ", +" + std::to_string(count) + ") is outside the model");
  }
  // The embedding's and the head's padding rows, and a partition's padding, stay 0.
  std::fill(out, out + count, 0.0f);
  const int64_t end = begin + count;
  for (const Place& place : places_) {
    if (place.spec.unit != unit) continue;
    const int64_t lo = std::max(begin, place.spec.offset);
    const int64_t hi = std::min(end, place.spec.offset + place.tensor->elements());
    if (lo >= hi) continue;
    HOIST_RETURN_IF_ERROR(FillTensor(place, lo - place.spec.offset, hi - lo, out + (lo - begin)));
  }
  return Status::Ok();
}

}  // namespace

std::vector<HfTensorPlace> HfTensorPlaces(const ModelConfig& model) {
  return FamilyOf(model.family).hf_tensors(model);
}

Status WeightSource::FillUnit(int unit, float* out) const {
  const std::vector<zero::UnitSpec> units = ModelUnits(model());
  if (unit < 0 || unit >= static_cast<int>(units.size())) {
    return InvalidArgumentError("unit " + std::to_string(unit) + " is outside the model");
  }
  return FillRange(unit, 0, units[static_cast<size_t>(unit)].size, out);
}

StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(const std::string& path, FileSystem& fs) {
  HOIST_ASSIGN_OR_RETURN(FileInfo info, fs.Stat(path));
  if (info.type == FileType::kDirectory) return HfSource::Open(path, fs);
  return OpenLlmcCheckpoint(path, fs);
}

Status WriteHfCheckpoint(const std::string& out_dir, const ModelConfig& model, const float* weights,
                         const HfExportOptions& options, FileSystem& fs) {
  std::vector<int64_t> unit_offsets = {0};
  for (const zero::UnitSpec& unit : ModelUnits(model)) {
    unit_offsets.push_back(unit_offsets.back() + unit.size);
  }
  const std::vector<HfTensorPlace> specs = HfTensorPlaces(model);
  const std::string dtype = SafetensorsDTypeName(options.dtype);
  const int64_t size_of = static_cast<int64_t>(DTypeSize(options.dtype));

  // Each tensor's bytes, produced from the flat weights (transposed back for Conv1D, wte without
  // its padding rows), rounded to the export type a block at a time.
  auto output = [&](const HfTensorPlace& spec) {
    SafetensorsOutput out;
    out.name = spec.name;
    out.dtype = dtype;
    out.shape = spec.shape;
    out.produce = [&, spec](const SafetensorsOutput::Emit& emit) -> Status {
      const float* src = weights + unit_offsets[static_cast<size_t>(spec.unit)] + spec.offset;
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      std::vector<float> stored;
      if (spec.transposed) {
        stored.resize(static_cast<size_t>(n));
        // hoist's (out, in) = (shape[1], shape[0]) back to (in, out).
        Transpose(src, spec.shape[1], spec.shape[0], stored.data());
        src = stored.data();
      }
      if (options.dtype == DType::kFloat32) return emit(src, n * size_of);
      constexpr int64_t kBlock = int64_t{1} << 16;
      std::vector<uint16_t> narrow(static_cast<size_t>(std::min(n, kBlock)));
      for (int64_t done = 0; done < n; done += kBlock) {
        const int64_t piece = std::min(kBlock, n - done);
        kernels::cpu::FromFloat(src + done, narrow.data(), options.dtype, piece);
        HOIST_RETURN_IF_ERROR(emit(narrow.data(), piece * size_of));
      }
      return Status::Ok();
    };
    return out;
  };

  // Shards as save_pretrained cuts them: tensors in state_dict order, a new file when the next
  // tensor would take the current one past the limit.
  std::vector<std::vector<const HfTensorPlace*>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0, total_parameters = 0;
  for (const HfTensorPlace& spec : specs) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    const int64_t bytes = n * size_of;
    if (options.max_shard_bytes > 0 && !shards.back().empty() &&
        shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&spec);
    shard_bytes += bytes;
    total_bytes += bytes;
    total_parameters += n;
  }
  // Written beside out_dir and swapped in whole (runtime/interchange/export_staging.h).
  HOIST_ASSIGN_OR_RETURN(StagedExportDir staged, StagedExportDir::Begin(out_dir, fs));
  const std::string& dir = staged.path();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string name = "model.safetensors";
    if (shards.size() > 1) {
      char buffer[64];
      std::snprintf(buffer, sizeof(buffer), "model-%05zu-of-%05zu.safetensors", s + 1,
                    shards.size());
      name = buffer;
    }
    std::vector<SafetensorsOutput> outputs;
    for (const HfTensorPlace* spec : shards[s]) {
      outputs.push_back(output(*spec));
      weight_map[spec->name] = name;
    }
    SortSafetensorsOutputs(&outputs);
    HOIST_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + name, std::move(outputs), metadata, fs));
  }
  const std::string config = HfConfigText(model, options.dtype, options.base_config);
  const std::string_view config_pieces[] = {config};
  HOIST_RETURN_IF_ERROR(WriteFileAtomically(fs, dir + "/config.json", config_pieces));
  if (shards.size() > 1) {
    const nlohmann::json index = {
        {"metadata", {{"total_parameters", total_parameters}, {"total_size", total_bytes}}},
        {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    const std::string_view pieces[] = {text};
    HOIST_RETURN_IF_ERROR(WriteFileAtomically(fs, dir + "/model.safetensors.index.json", pieces));
  }
  // The weights of an earlier export stay behind with it: transformers loads a model.safetensors
  // before it looks for an index, so one kept beside new shards would be read in their place,
  // shards of another count are dead weight that a glob would pick up, and a stale index would
  // point readers at shards of another export.
  return staged.Commit([](std::string_view name) {
    return IsExportedWeightsFile(name) || name == "model.safetensors.index.json";
  });
}

}  // namespace hoist::runtime

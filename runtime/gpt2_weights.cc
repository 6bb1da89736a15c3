#include "runtime/gpt2_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "kernels/cpu/convert.h"
#include "runtime/hf_config.h"

namespace hoist::runtime {
namespace {

// transformers' names of the per-block tensors, in its state_dict order, and whether each is a
// Conv1D weight (stored (in, out)).
struct BlockName {
  int tensor;
  const char* suffix;
  bool conv1d;
};
constexpr BlockName kBlockNames[] = {
    {kLn1W, "ln_1.weight", false},           {kLn1B, "ln_1.bias", false},
    {kQkvW, "attn.c_attn.weight", true},     {kQkvB, "attn.c_attn.bias", false},
    {kAttProjW, "attn.c_proj.weight", true}, {kAttProjB, "attn.c_proj.bias", false},
    {kLn2W, "ln_2.weight", false},           {kLn2B, "ln_2.bias", false},
    {kFcW, "mlp.c_fc.weight", true},         {kFcB, "mlp.c_fc.bias", false},
    {kFcProjW, "mlp.c_proj.weight", true},   {kFcProjB, "mlp.c_proj.bias", false},
};
constexpr char kPrefix[] = "transformer.";

// hoist's shape of one layer's slice of `tensor`: (out, in) for the matmul weights.
std::vector<int64_t> HoistShape(const ModelConfig& m, int tensor) {
  const int64_t C = m.n_embd;
  switch (tensor) {
    case kWte: return {m.vocab_size, C};  // the real rows; the padding is hoist's own
    case kWpe: return {m.positions(), C};
    case kQkvW: return {3 * C, C};
    case kQkvB: return {3 * C};
    case kAttProjW: return {C, C};
    case kFcW: return {4 * C, C};
    case kFcB: return {4 * C};
    case kFcProjW: return {C, 4 * C};
    default: return {C};
  }
}

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

// A Hugging Face directory.
class HfSource final : public WeightSource {
 public:
  static StatusOr<std::unique_ptr<WeightSource>> Open(const std::string& dir, FileSystem& fs);
  const std::string& path() const override { return dir_; }
  const ModelConfig& model() const override { return model_; }
  const nlohmann::json& hf_config() const override { return config_; }
  Status FillUnit(int unit, float* out) const override;

 private:
  struct Place {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
    HfGpt2Tensor spec;
  };
  Status FillTensor(const Place& place, float* out) const;

  std::string dir_;
  ModelConfig model_;
  ParamLayout layout_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<Place> places_;  // HfGpt2Tensors order
};

StatusOr<std::unique_ptr<WeightSource>> HfSource::Open(const std::string& dir, FileSystem& fs) {
  auto source = std::make_unique<HfSource>();
  source->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  StatusOr<std::string> text = ReadFileToString(fs, config_path);
  if (!text.ok()) {
    return Status(text.status().code(), "Hugging Face checkpoint " + dir +
                                            ": its config.json could not be read (" +
                                            text.status().message() +
                                            "); a checkpoint directory holds config.json "
                                            "next to its safetensors");
  }
  source->config_ = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (source->config_.is_discarded() || !source->config_.is_object()) {
    return InvalidArgumentError(config_path + " is not a JSON object");
  }
  HOIST_ASSIGN_OR_RETURN(source->model_, ModelConfigFromHf(source->config_, config_path));
  if (source->model_.family != ModelFamily::kGpt2) {
    return UnimplementedError("Hugging Face checkpoint " + dir + ": reading " +
                              ModelFamilyName(source->model_.family) +
                              " weights is not built in yet");
  }
  source->layout_ = ParamLayout::For(source->model_);

  // The files: the index's shards, or the one model.safetensors.
  std::map<std::string, std::string> weight_map;  // tensor -> file name
  const std::string index_path = dir + "/model.safetensors.index.json";
  StatusOr<FileInfo> index_info = fs.Stat(index_path);
  std::vector<std::string> names;
  if (index_info.ok()) {
    HOIST_ASSIGN_OR_RETURN(std::string index_text, ReadFileToString(fs, index_path));
    nlohmann::json index = nlohmann::json::parse(index_text, nullptr, false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return DataLossError(index_path + " has no weight_map object; the index is damaged");
    }
    std::set<std::string> unique;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
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
  std::map<std::string, const SafetensorsFile*> by_file;
  for (const std::string& name : names) {
    HOIST_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(dir + "/" + name, fs));
    source->files_.push_back(std::make_unique<SafetensorsFile>(std::move(file)));
    by_file[name] = source->files_.back().get();
  }

  // Every tensor the model needs, where the index says (or in any file), with its shape.
  std::set<std::pair<const SafetensorsFile*, std::string>> used;
  for (HfGpt2Tensor& spec : HfGpt2Tensors(source->model_)) {
    Place place;
    std::string found_name;
    for (const std::string& candidate : {spec.name, spec.name.substr(sizeof(kPrefix) - 1)}) {
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
    if (place.tensor == nullptr) {
      return InvalidArgumentError("Hugging Face checkpoint " + dir + " has no tensor \"" +
                                  spec.name + "\" (nor without the \"" + kPrefix +
                                  "\" prefix), which a GPT-2 of its config.json needs");
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
      const bool mask = t.name.ends_with(".attn.bias") || t.name.ends_with(".attn.masked_bias");
      if (mask || t.name == "lm_head.weight") continue;
      return InvalidArgumentError("Hugging Face checkpoint " + file->path() + " holds tensor \"" +
                                  t.name +
                                  "\", which hoist's GPT-2 has no place for: it is not the model "
                                  "its config.json describes");
    }
  }
  return std::unique_ptr<WeightSource>(std::move(source));
}

Status HfSource::FillTensor(const Place& place, float* out) const {
  const int64_t n = place.tensor->elements();
  if (!place.spec.transposed) return place.file->ReadFloat(*place.tensor, 0, n, out);
  std::vector<float> stored(static_cast<size_t>(n));
  HOIST_RETURN_IF_ERROR(place.file->ReadFloat(*place.tensor, 0, n, stored.data()));
  Transpose(stored.data(), place.spec.shape[0], place.spec.shape[1], out);
  return Status::Ok();
}

Status HfSource::FillUnit(int unit, float* out) const {
  if (unit < 0 || unit >= layout_.num_units()) {
    return InvalidArgumentError("unit " + std::to_string(unit) + " is outside the model");
  }
  const int64_t base = layout_.unit_offsets[static_cast<size_t>(unit)];
  std::fill(out, out + layout_.unit_size(unit), 0.0f);  // wte's padding rows stay 0
  for (const Place& place : places_) {
    if (layout_.unit_of(place.spec.tensor, place.spec.layer) != unit) continue;
    const int64_t at = layout_.Offset(place.spec.tensor, place.spec.layer) - base;
    HOIST_RETURN_IF_ERROR(FillTensor(place, out + at));
  }
  return Status::Ok();
}

// An llm.c checkpoint file.
class LlmcSource final : public WeightSource {
 public:
  static StatusOr<std::unique_ptr<WeightSource>> Open(const std::string& path, FileSystem& fs);
  const std::string& path() const override { return path_; }
  const ModelConfig& model() const override { return model_; }
  const nlohmann::json& hf_config() const override { return empty_; }
  Status FillUnit(int unit, float* out) const override;

 private:
  std::string path_;
  ModelConfig model_;
  ParamLayout layout_;
  DType type_ = DType::kFloat32;
  std::unique_ptr<RandomAccessFile> file_;
  nlohmann::json empty_;
};

constexpr int64_t kLlmcHeaderBytes = 256 * 4;

StatusOr<std::unique_ptr<WeightSource>> LlmcSource::Open(const std::string& path, FileSystem& fs) {
  auto source = std::make_unique<LlmcSource>();
  source->path_ = path;
  HOIST_ASSIGN_OR_RETURN(source->file_, fs.NewRandomAccessFile(path));
  int32_t header[256] = {};
  HOIST_ASSIGN_OR_RETURN(int64_t got, source->file_->Read(0, header, kLlmcHeaderBytes));
  auto bad = [&](const std::string& what) {
    return DataLossError("llm.c checkpoint " + path + ": " + what);
  };
  if (got != kLlmcHeaderBytes) return bad("shorter than its 1024-byte header");
  if (header[0] != kLlmcModelMagic) {
    return bad("magic " + std::to_string(header[0]) + " is not " + std::to_string(kLlmcModelMagic) +
               ": not an llm.c model checkpoint");
  }
  if (header[1] == 3) {
    source->type_ = DType::kFloat32;
  } else if (header[1] == 5) {
    source->type_ = DType::kBFloat16;
  } else {
    return bad("version " + std::to_string(header[1]) +
               " is neither 3 (fp32) nor 5 (bf16), the versions hoist reads");
  }
  ModelConfig& m = source->model_;
  m.seq_len = header[2];
  m.vocab_size = header[3];
  m.n_layer = header[4];
  m.n_head = header[5];
  m.n_embd = header[6];
  const int Vp = header[7];
  for (int i = 2; i <= 7; ++i) {
    if (header[i] <= 0 || header[i] > (1 << 24)) {
      return bad("header word " + std::to_string(i) + " = " + std::to_string(header[i]) +
                 " is not a model dimension");
    }
  }
  if (m.n_embd % m.n_head != 0 || Vp != m.padded_vocab_size()) {
    return bad("channels " + std::to_string(m.n_embd) + ", heads " + std::to_string(m.n_head) +
               ", vocabulary " + std::to_string(m.vocab_size) + " padded to " + std::to_string(Vp) +
               " do not describe a GPT-2 (padding to a multiple of 128)");
  }
  source->layout_ = ParamLayout::For(m);
  const int64_t expected =
      kLlmcHeaderBytes + source->layout_.total * static_cast<int64_t>(DTypeSize(source->type_));
  if (source->file_->size_bytes() != expected) {
    return bad("holds " + std::to_string(source->file_->size_bytes()) +
               " bytes but its header describes " + std::to_string(expected) +
               ": it is truncated or not the model its header says");
  }
  return std::unique_ptr<WeightSource>(std::move(source));
}

Status LlmcSource::FillUnit(int unit, float* out) const {
  if (unit < 0 || unit >= layout_.num_units()) {
    return InvalidArgumentError("unit " + std::to_string(unit) + " is outside the model");
  }
  const int64_t base = layout_.unit_offsets[static_cast<size_t>(unit)];
  const int64_t size_of = static_cast<int64_t>(DTypeSize(type_));
  std::vector<uint16_t> narrow;
  for (int t = 0; t < kNumParamTensors; ++t) {
    for (int l = 0; l < (ParamLayout::PerBlock(t) ? model_.n_layer : 1); ++l) {
      if (layout_.unit_of(t, l) != unit) continue;
      const int64_t n = layout_.unit_sizes[t];
      float* dst = out + (layout_.Offset(t, l) - base);
      const int64_t at = kLlmcHeaderBytes + (layout_.llmc_offsets[t] + l * n) * size_of;
      void* read_into = dst;
      if (type_ != DType::kFloat32) {
        narrow.resize(static_cast<size_t>(n));
        read_into = narrow.data();
      }
      HOIST_ASSIGN_OR_RETURN(int64_t got, file_->Read(at, read_into, n * size_of));
      if (got != n * size_of) {
        return DataLossError("llm.c checkpoint " + path_ + " ended inside tensor " +
                             ParamLayout::Name(t) + ": it was truncated after it was opened");
      }
      if (type_ != DType::kFloat32) kernels::cpu::ToFloat(narrow.data(), type_, dst, n);
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<HfGpt2Tensor> HfGpt2Tensors(const ModelConfig& m) {
  std::vector<HfGpt2Tensor> tensors;
  const std::string prefix = kPrefix;
  tensors.push_back({kWte, 0, prefix + "wte.weight", HoistShape(m, kWte), false});
  tensors.push_back({kWpe, 0, prefix + "wpe.weight", HoistShape(m, kWpe), false});
  for (int l = 0; l < m.n_layer; ++l) {
    for (const BlockName& b : kBlockNames) {
      std::vector<int64_t> shape = HoistShape(m, b.tensor);
      if (b.conv1d) std::swap(shape[0], shape[1]);
      tensors.push_back(
          {b.tensor, l, prefix + "h." + std::to_string(l) + "." + b.suffix, shape, b.conv1d});
    }
  }
  tensors.push_back({kLnfW, 0, prefix + "ln_f.weight", HoistShape(m, kLnfW), false});
  tensors.push_back({kLnfB, 0, prefix + "ln_f.bias", HoistShape(m, kLnfB), false});
  return tensors;
}

StatusOr<std::unique_ptr<WeightSource>> OpenWeightSource(const std::string& path, FileSystem& fs) {
  HOIST_ASSIGN_OR_RETURN(FileInfo info, fs.Stat(path));
  if (info.type == FileType::kDirectory) return HfSource::Open(path, fs);
  return LlmcSource::Open(path, fs);
}

Status WriteHfGpt2(const std::string& out_dir, const ModelConfig& model, const float* weights,
                   const HfExportOptions& options, FileSystem& fs) {
  const ParamLayout layout = ParamLayout::For(model);
  const std::vector<HfGpt2Tensor> specs = HfGpt2Tensors(model);
  const std::string dtype = SafetensorsDTypeName(options.dtype);
  const int64_t size_of = static_cast<int64_t>(DTypeSize(options.dtype));
  HOIST_RETURN_IF_ERROR(fs.CreateDirs(out_dir));

  // Each tensor's bytes, produced from the flat weights (transposed back for Conv1D, wte without
  // its padding rows), rounded to the export type a block at a time.
  auto output = [&](const HfGpt2Tensor& spec) {
    SafetensorsOutput out;
    out.name = spec.name;
    out.dtype = dtype;
    out.shape = spec.shape;
    out.produce = [&, spec](const SafetensorsOutput::Emit& emit) -> Status {
      const float* src = weights + layout.Offset(spec.tensor, spec.layer);
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
  std::vector<std::vector<const HfGpt2Tensor*>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0, total_parameters = 0;
  for (const HfGpt2Tensor& spec : specs) {
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
    for (const HfGpt2Tensor* spec : shards[s]) {
      outputs.push_back(output(*spec));
      weight_map[spec->name] = name;
    }
    SortSafetensorsOutputs(&outputs);
    HOIST_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/" + name, std::move(outputs), metadata, fs));
  }
  const std::string index_path = out_dir + "/model.safetensors.index.json";
  if (shards.size() > 1) {
    const nlohmann::json index = {
        {"metadata", {{"total_parameters", total_parameters}, {"total_size", total_bytes}}},
        {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";
    const std::string_view pieces[] = {text};
    HOIST_RETURN_IF_ERROR(WriteFileAtomically(fs, index_path, pieces));
  } else if (fs.Stat(index_path).ok()) {
    // A stale index would point readers at shards of another export.
    HOIST_RETURN_IF_ERROR(fs.Remove(index_path));
  }
  const std::string config = HfConfigText(model, options.dtype, options.base_config);
  const std::string_view pieces[] = {config};
  return WriteFileAtomically(fs, out_dir + "/config.json", pieces);
}

Status WriteLlmcCheckpoint(const std::string& path, const ModelConfig& model, const float* weights,
                           DType dtype, FileSystem& fs) {
  if (dtype == DType::kFloat16) {
    return InvalidArgumentError(
        "llm.c checkpoints hold fp32 (version 3) or bf16 (version 5), "
        "not fp16: export with --dtype fp32 or bf16");
  }
  const ParamLayout layout = ParamLayout::For(model);
  int32_t header[256] = {};
  header[0] = kLlmcModelMagic;
  header[1] = dtype == DType::kFloat32 ? 3 : 5;
  header[2] = model.positions();
  header[3] = model.vocab_size;
  header[4] = model.n_layer;
  header[5] = model.n_head;
  header[6] = model.n_embd;
  header[7] = model.padded_vocab_size();
  // llm.c's tensor-major order: every layer of a tensor together.
  const int64_t size_of = static_cast<int64_t>(DTypeSize(dtype));
  std::string body(static_cast<size_t>(layout.total * size_of), '\0');
  for (int t = 0; t < kNumParamTensors; ++t) {
    const int64_t n = layout.unit_sizes[t];
    for (int l = 0; l < (ParamLayout::PerBlock(t) ? model.n_layer : 1); ++l) {
      char* dst = body.data() + (layout.llmc_offsets[t] + l * n) * size_of;
      kernels::cpu::FromFloat(weights + layout.Offset(t, l), dst, dtype, n);
    }
  }
  const std::string_view pieces[] = {
      std::string_view(reinterpret_cast<const char*>(header), sizeof(header)), body};
  return WriteFileAtomically(fs, path, pieces);
}

}  // namespace hoist::runtime

#include "runtime/interchange/llmc_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/convert.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/model.h"

namespace hoist::runtime {
namespace {

// An llm.c checkpoint file.
class LlmcSource final : public WeightSource {
 public:
  static StatusOr<std::unique_ptr<WeightSource>> Open(const std::string& path, FileSystem& fs);
  const std::string& path() const override { return path_; }
  const ModelConfig& model() const override { return model_; }
  const nlohmann::json& hf_config() const override { return empty_; }
  Status FillRange(int unit, int64_t begin, int64_t count, float* out) const override;

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
  if (Status size = CheckModelSize(m); !size.ok()) {
    return bad("its header's " + size.message() + ": it is damaged or not an llm.c checkpoint");
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

Status LlmcSource::FillRange(int unit, int64_t begin, int64_t count, float* out) const {
  if (unit < 0 || unit >= layout_.num_units() || begin < 0 || count < 0) {
    return InvalidArgumentError("unit " + std::to_string(unit) + " [" + std::to_string(begin) +
                                ", +" + std::to_string(count) + ") is outside the model");
  }
  std::fill(out, out + count, 0.0f);  // a partition's padding
  const int64_t base = layout_.unit_offsets[static_cast<size_t>(unit)];
  const int64_t end = begin + count;
  const int64_t size_of = static_cast<int64_t>(DTypeSize(type_));
  std::vector<uint16_t> narrow;
  for (int t = 0; t < kNumParamTensors; ++t) {
    for (int l = 0; l < (ParamLayout::PerBlock(t) ? model_.n_layer : 1); ++l) {
      if (layout_.unit_of(t, l) != unit) continue;
      // The tensor's slice in the unit, and the part of it the range wants.
      const int64_t first = layout_.Offset(t, l) - base, n = layout_.unit_sizes[t];
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + n);
      if (lo >= hi) continue;
      float* dst = out + (lo - begin);
      const int64_t at =
          kLlmcHeaderBytes + (layout_.llmc_offsets[t] + l * n + (lo - first)) * size_of;
      void* read_into = dst;
      if (type_ != DType::kFloat32) {
        narrow.resize(static_cast<size_t>(hi - lo));
        read_into = narrow.data();
      }
      HOIST_ASSIGN_OR_RETURN(int64_t got, file_->Read(at, read_into, (hi - lo) * size_of));
      if (got != (hi - lo) * size_of) {
        return DataLossError("llm.c checkpoint " + path_ + " ended inside tensor " +
                             ParamLayout::Name(t) + ": it was truncated after it was opened");
      }
      if (type_ != DType::kFloat32) kernels::cpu::ToFloat(narrow.data(), type_, dst, hi - lo);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<WeightSource>> OpenLlmcCheckpoint(const std::string& path,
                                                           FileSystem& fs) {
  return LlmcSource::Open(path, fs);
}

Status WriteLlmcCheckpoint(const std::string& path, const ModelConfig& model, const float* weights,
                           DType dtype, FileSystem& fs) {
  if (model.family != ModelFamily::kGpt2) {
    return InvalidArgumentError(std::string("llm.c's checkpoint (magic 20240326) holds a GPT-2; "
                                            "this model is ") +
                                ModelFamilyName(model.family) + ": export it with --format hf");
  }
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

// GPT-2 weights from Hugging Face and llm.c files: the model built from them computes what
// transformers computes (logits, loss, gradients, saved by scripts/reference/gpt2_hf.py in
// tests/data/gpt2_hf/), every form of the same weights reads the same, writing them back gives
// the files' bytes, and every damaged or mismatched checkpoint is refused naming the file and the
// tensor.
#include "runtime/model/gpt2_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "runtime/interchange/hf_config.h"
#include "runtime/interchange/llmc_checkpoint.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/model.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data/gpt2_hf";
constexpr int kB = 2, kT = 8;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_gpt2_weights_test" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Every unit of `source`, in the flat unit order.
std::vector<float> ReadAll(const WeightSource& source) {
  const ParamLayout layout = ParamLayout::For(source.model());
  std::vector<float> weights(static_cast<size_t>(layout.total));
  for (int u = 0; u < layout.num_units(); ++u) {
    const Status filled = source.FillUnit(u, weights.data() + layout.unit_offsets[u]);
    EXPECT_TRUE(filled.ok()) << filled.ToString();
  }
  return weights;
}

std::vector<float> Open(const std::string& path, ModelConfig* model = nullptr) {
  auto source = OpenWeightSource(path);
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  if (!source.ok()) return {};
  if (model != nullptr) *model = (*source)->model();
  return ReadAll(**source);
}

// A tensor of the reference file, as floats (F32) or ints (I32).
class Reference {
 public:
  Reference() {
    auto file = SafetensorsFile::Open(kData + "/reference.safetensors");
    HOIST_CHECK(file.ok()) << file.status().ToString();
    file_.emplace(std::move(*file));
  }
  std::vector<float> Floats(const std::string& name) const {
    const SafetensorsTensor* t = file_->Find(name);
    HOIST_CHECK(t != nullptr) << name;
    std::vector<float> out(static_cast<size_t>(t->elements()));
    HOIST_CHECK(file_->ReadFloat(*t, 0, t->elements(), out.data()).ok());
    return out;
  }
  std::vector<int32_t> Ints(const std::string& name) const {
    const SafetensorsTensor* t = file_->Find(name);
    HOIST_CHECK(t != nullptr && t->dtype == "I32") << name;
    std::vector<int32_t> out(static_cast<size_t>(t->elements()));
    HOIST_CHECK(file_->ReadBytes(*t, 0, t->end - t->begin, out.data()).ok());
    return out;
  }

 private:
  std::optional<SafetensorsFile> file_;
};

// |got - want| <= rtol * max(|want|, rms(want)): relative, with values far below the tensor's
// scale (which cancel to near zero) held to the scale instead of to themselves.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double sum = 0;
  for (float w : want) sum += double{w} * w;
  const double rms = std::sqrt(sum / static_cast<double>(want.size()));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err =
        std::abs(double{got[i]} - want[i]) / std::max<double>(std::abs(want[i]), rms);
    worst = std::max(worst, err);
    ASSERT_LE(err, rtol) << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", worst);
  ::testing::Test::RecordProperty(what, text);
}

TEST(Gpt2Weights, ReadsTheConfigAndTheShapes) {
  ModelConfig m;
  const std::vector<float> weights = Open(kData + "/fp32", &m);
  EXPECT_EQ(m.n_layer, 2);
  EXPECT_EQ(m.n_head, 4);
  EXPECT_EQ(m.n_embd, 16);
  EXPECT_EQ(m.vocab_size, 96);
  EXPECT_EQ(m.positions(), 16);
  EXPECT_EQ(static_cast<int64_t>(weights.size()), ParamLayout::For(m).total);
}

// The model on imported weights against transformers' GPT2LMHeadModel on the same weights.
TEST(Gpt2Weights, TheImportedModelComputesWhatTransformersComputes) {
  ModelConfig m;
  const std::vector<float> weights = Open(kData + "/fp32", &m);
  const Reference ref;
  const std::vector<int32_t> inputs = ref.Ints("input_ids"), targets = ref.Ints("target_ids");
  CpuDevice device(Place::kDevice);
  auto model = Gpt2Model::Create(m, kB, kT, &device);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::memcpy((*model)->params(), weights.data(), weights.size() * sizeof(float));

  (*model)->Forward(inputs.data(), nullptr, kB, kT).value();
  const int V = m.vocab_size, Vp = m.padded_vocab_size();
  std::vector<float> logits(static_cast<size_t>(kB * kT * V));
  for (int i = 0; i < kB * kT; ++i) {
    std::memcpy(&logits[static_cast<size_t>(i * V)], (*model)->logits() + int64_t{i} * Vp,
                V * sizeof(float));
  }
  ExpectClose(logits, ref.Floats("logits"), 1e-5, "logits");

  HOIST_CHECK_OK((*model)->ZeroGradients());
  const float loss = (*model)->Forward(inputs.data(), targets.data(), kB, kT, 1.0f).value();
  EXPECT_NEAR(loss, ref.Floats("loss")[0], 1e-5 * ref.Floats("loss")[0]);
  HOIST_CHECK_OK((*model)->Backward());
  // Each gradient, in transformers' layout (Conv1D weights (in, out); wte without padding).
  const ParamLayout& layout = (*model)->layout();
  for (const HfGpt2Tensor& spec : HfGpt2Tensors(m)) {
    const float* grad = (*model)->grads() + layout.Offset(spec.tensor, spec.layer);
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    std::vector<float> got(static_cast<size_t>(n));
    if (spec.transposed) {
      const int64_t in = spec.shape[0], out = spec.shape[1];
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) got[static_cast<size_t>(i * out + o)] = grad[o * in + i];
      }
    } else {
      std::memcpy(got.data(), grad, static_cast<size_t>(n) * sizeof(float));
    }
    ExpectClose(got, ref.Floats("grad." + spec.name), 1e-5, spec.name);
  }
}

TEST(Gpt2Weights, EveryFormOfTheSameWeightsReadsTheSame) {
  const std::vector<float> fp32 = Open(kData + "/fp32");
  EXPECT_EQ(Open(kData + "/sharded"), fp32);
  EXPECT_EQ(Open(kData + "/gpt2_tiny.bin"), fp32);
  // bf16: the fp32 values rounded to bf16, the same from both formats.
  const std::vector<float> bf16 = Open(kData + "/bf16");
  EXPECT_EQ(Open(kData + "/gpt2_tiny_bf16.bin"), bf16);
  ASSERT_EQ(bf16.size(), fp32.size());
  for (size_t i = 0; i < fp32.size(); ++i) {
    ASSERT_NEAR(bf16[i], fp32[i], std::abs(fp32[i]) / 128) << i;
  }
}

// What a stage-3 rank reads: any range of a unit equals that slice of the whole unit, for the
// transposed Conv1D weights, llm.c's tensor-major file and a Llama's fused matrices alike, and
// past the unit's end (a partition's padding) it is 0.
TEST(Gpt2Weights, ARangeOfAUnitIsThatSliceOfTheWholeUnit) {
  for (const std::string& path : {kData + "/fp32", kData + "/gpt2_tiny_bf16.bin",
                                  std::string(HOIST_SOURCE_DIR) + "/tests/data/llama_hf/fp32"}) {
    auto source = OpenWeightSource(path);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    const std::vector<zero::UnitSpec> units = ModelUnits((*source)->model());
    for (int u = 0; u < static_cast<int>(units.size()); ++u) {
      const int64_t n = units[static_cast<size_t>(u)].size;
      std::vector<float> whole(static_cast<size_t>(n));
      ASSERT_TRUE((*source)->FillUnit(u, whole.data()).ok());
      for (const auto& [begin, count] : {std::pair<int64_t, int64_t>{0, n},
                                         {n / 3, n / 3 + 7},
                                         {n - 5, 9},
                                         {1, 1},
                                         {n / 2, 0}}) {
        std::vector<float> part(static_cast<size_t>(count), -1.0f);
        ASSERT_TRUE((*source)->FillRange(u, begin, count, part.data()).ok());
        for (int64_t i = 0; i < count; ++i) {
          const float want = begin + i < n ? whole[static_cast<size_t>(begin + i)] : 0.0f;
          ASSERT_EQ(part[static_cast<size_t>(i)], want)
              << path << " unit " << u << " [" << begin << ", +" << count << ") at " << i;
        }
      }
    }
  }
}

TEST(Gpt2Weights, WritingImportedWeightsBackGivesTheSameBytes) {
  for (const std::string form : {"fp32", "bf16"}) {
    ModelConfig m;
    const std::vector<float> weights = Open(kData + "/" + form, &m);
    auto source = OpenWeightSource(kData + "/" + form);
    ASSERT_TRUE(source.ok());
    HfExportOptions options;
    options.dtype = form == "fp32" ? DType::kFloat32 : DType::kBFloat16;
    options.base_config = (*source)->hf_config();
    const std::string out = TempDir("hf_" + form);
    ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), options).ok());
    EXPECT_EQ(ReadFile(out + "/model.safetensors"),
              ReadFile(kData + "/" + form + "/model.safetensors"))
        << form;
    EXPECT_EQ(ReadFile(out + "/config.json"), ReadFile(kData + "/" + form + "/config.json"))
        << form;
  }
  // Sharded as save_pretrained(max_shard_size="12KB") cut it.
  ModelConfig m;
  const std::vector<float> weights = Open(kData + "/sharded", &m);
  HfExportOptions options;
  options.max_shard_bytes = 12000;
  options.base_config = (*OpenWeightSource(kData + "/sharded"))->hf_config();
  const std::string out = TempDir("hf_sharded");
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), options).ok());
  for (const char* name :
       {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors", "model.safetensors.index.json", "config.json"}) {
    EXPECT_EQ(ReadFile(out + "/" + name), ReadFile(kData + "/sharded/" + name)) << name;
  }
  // llm.c, both versions.
  for (const auto& [file, type] : {std::pair{"gpt2_tiny.bin", DType::kFloat32},
                                   std::pair{"gpt2_tiny_bf16.bin", DType::kBFloat16}}) {
    const std::vector<float> llmc = Open(kData + "/" + file, &m);
    const std::string path = TempDir("llmc") + "/" + file;
    ASSERT_TRUE(WriteLlmcCheckpoint(path, m, llmc.data(), type).ok());
    EXPECT_EQ(ReadFile(path), ReadFile(kData + "/" + file)) << file;
  }
}

// Exporting into the directory of an earlier export leaves only this export's weights: a
// model.safetensors beside new shards would be what transformers loads (it looks for that name
// before the index), and shards of another count would linger.
TEST(Gpt2Weights, ExportingOverAnEarlierExportLeavesNoStaleWeights) {
  ModelConfig m;
  std::vector<float> weights = Open(kData + "/fp32", &m);
  const std::string out = TempDir("over");
  const auto names = [&] {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(out)) {
      found.push_back(entry.path().filename().string());
    }
    std::sort(found.begin(), found.end());
    return found;
  };
  HfExportOptions sharded;
  sharded.max_shard_bytes = 12000;
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), {}).ok());
  for (float& w : weights) w *= 0.5f;  // a later checkpoint of the run
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), sharded).ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"config.json", "model-00001-of-00003.safetensors",
                                               "model-00002-of-00003.safetensors",
                                               "model-00003-of-00003.safetensors",
                                               "model.safetensors.index.json"}));
  EXPECT_EQ(Open(out), weights);

  sharded.max_shard_bytes = 24000;
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), sharded).ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                               "model-00002-of-00002.safetensors",
                                               "model.safetensors.index.json"}));
  EXPECT_EQ(Open(out), weights);

  // Files that are not an export's weights stay.
  std::ofstream(out + "/README.md") << "notes\n";
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), {}).ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"README.md", "config.json", "model.safetensors"}));
  EXPECT_EQ(Open(out), weights);
}

TEST(Gpt2Weights, ExportWithoutASourceConfigIsLoadableGpt2) {
  ModelConfig m;
  const std::vector<float> weights = Open(kData + "/fp32", &m);
  const std::string out = TempDir("fresh");
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), {}).ok());
  // What hoist reads back is the same model and weights.
  EXPECT_EQ(Open(out), weights);
  const nlohmann::json config = nlohmann::json::parse(ReadFile(out + "/config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(config["n_positions"], 16);
}

// Copies the fp32 fixture to a temporary directory, for tests that damage it.
std::string CopyFixture(const std::string& name) {
  const std::string dir = TempDir(name);
  fs::copy(kData + "/fp32", dir,
           fs::copy_options::overwrite_existing | fs::copy_options::recursive);
  return dir;
}

// Rewrites model.safetensors of `dir` with `edit` applied to its tensors (names, shapes,
// dtypes), the data copied as the new header says (zeros where the dtype grew).
void RewriteTensors(const std::string& dir,
                    const std::function<void(std::vector<SafetensorsOutput>*)>& edit) {
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<SafetensorsOutput> outputs;
  for (const SafetensorsTensor& t : file->tensors())
    outputs.push_back({t.name, t.dtype, t.shape, nullptr});
  edit(&outputs);
  for (SafetensorsOutput& o : outputs) {
    int64_t bytes = SafetensorsDTypeSize(o.dtype);
    for (int64_t d : o.shape) bytes *= d;
    o.produce = [bytes](const SafetensorsOutput::Emit& emit) {
      std::string zeros(static_cast<size_t>(bytes), '\0');
      return emit(zeros.data(), bytes);
    };
  }
  SortSafetensorsOutputs(&outputs);
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", std::move(outputs), {}).ok());
}

void ExpectRefused(const std::string& path, const std::vector<std::string>& words) {
  auto source = OpenWeightSource(path);
  ASSERT_FALSE(source.ok()) << path;
  for (const std::string& word : words) {
    EXPECT_NE(source.status().message().find(word), std::string::npos)
        << "'" << word << "' not in: " << source.status().message();
  }
}

TEST(Gpt2Weights, AMissingOrExtraTensorOrAWrongShapeOrDtypeIsNamed) {
  const std::string name = "transformer.h.1.attn.c_proj.weight";
  std::string dir = CopyFixture("missing");
  RewriteTensors(dir, [&](auto* outputs) {
    std::erase_if(*outputs, [&](const SafetensorsOutput& o) { return o.name == name; });
  });
  ExpectRefused(dir, {dir, name, "has no tensor"});

  dir = CopyFixture("extra");
  RewriteTensors(dir, [](auto* outputs) {
    outputs->push_back({"transformer.h.2.ln_1.weight", "F32", {16}, nullptr});
  });
  ExpectRefused(dir, {dir + "/model.safetensors", "transformer.h.2.ln_1.weight", "no place"});

  dir = CopyFixture("shape");
  RewriteTensors(dir, [&](auto* outputs) {
    for (SafetensorsOutput& o : *outputs) {
      if (o.name == name) o.shape = {16, 17};
    }
  });
  ExpectRefused(dir, {dir + "/model.safetensors", name, "[16, 17]", "[16, 16]"});

  dir = CopyFixture("dtype");
  RewriteTensors(dir, [&](auto* outputs) {
    for (SafetensorsOutput& o : *outputs) {
      if (o.name == name) o.dtype = "I64";
    }
  });
  ExpectRefused(dir, {dir + "/model.safetensors", name, "I64"});

  // An old file's attention masks and a tied head are not parameters: accepted.
  dir = CopyFixture("buffers");
  RewriteTensors(dir, [](auto* outputs) {
    outputs->push_back({"transformer.h.0.attn.bias", "F32", {1, 1, 16, 16}, nullptr});
    outputs->push_back({"lm_head.weight", "F32", {96, 16}, nullptr});
  });
  EXPECT_TRUE(OpenWeightSource(dir).ok());
}

TEST(Gpt2Weights, ADamagedFileOrConfigIsNamed) {
  std::string dir = CopyFixture("truncated");
  fs::resize_file(dir + "/model.safetensors", fs::file_size(dir + "/model.safetensors") - 100);
  ExpectRefused(dir, {dir + "/model.safetensors", "truncated"});

  dir = CopyFixture("no_config");
  fs::remove(dir + "/config.json");
  ExpectRefused(dir, {dir + "/config.json"});

  dir = CopyFixture("bert_config");
  std::string config = ReadFile(dir + "/config.json");
  config.replace(config.find("\"gpt2\""), 6, "\"bert\"");
  std::ofstream(dir + "/config.json") << config;
  ExpectRefused(dir, {dir + "/config.json", "model_type", "bert"});

  dir = CopyFixture("lying_config");  // config says 3 layers, the file has 2
  config = ReadFile(dir + "/config.json");
  config.replace(config.find("\"n_layer\": 2"), 12, "\"n_layer\": 3");
  std::ofstream(dir + "/config.json") << config;
  ExpectRefused(dir, {dir, "transformer.h.2.ln_1.weight", "has no tensor"});

  dir = CopyFixture("broken_index");
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"weight_map\": [";
  ExpectRefused(dir, {dir + "/model.safetensors.index.json"});

  // llm.c: a truncated file, a wrong magic, an unknown version.
  const std::string bin = ReadFile(kData + "/gpt2_tiny.bin");
  const std::string path = TempDir("llmc_bad") + "/model.bin";
  std::ofstream(path, std::ios::binary) << bin.substr(0, bin.size() - 4);
  ExpectRefused(path, {path, "truncated"});
  std::string edited = bin;
  edited[0] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << edited;
  ExpectRefused(path, {path, "magic"});
  edited = bin;
  edited[4] = 4;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << edited;
  ExpectRefused(path, {path, "version 4"});
}

// A config.json key of the wrong type is an error naming the file and the key, for every key the
// reader takes a string or a flag from (not an exception out of the JSON library).
TEST(HfConfig, AKeyOfTheWrongTypeIsAnErrorNamingIt) {
  const nlohmann::json gpt2 = nlohmann::json::parse(ReadFile(kData + "/fp32/config.json"));
  const nlohmann::json llama = {{"model_type", "llama"},
                                {"hidden_size", 16},
                                {"intermediate_size", 32},
                                {"num_hidden_layers", 2},
                                {"num_attention_heads", 4},
                                {"num_key_value_heads", 2},
                                {"vocab_size", 64},
                                {"max_position_embeddings", 32},
                                {"rope_scaling", {{"rope_type", "llama3"}}}};
  ASSERT_TRUE(ModelConfigFromHf(gpt2, "g/config.json").ok());
  const struct {
    const nlohmann::json* base;
    nlohmann::json::json_pointer key;
    nlohmann::json value;
  } cases[] = {
      {&gpt2, "/model_type"_json_pointer, 2},
      {&gpt2, "/activation_function"_json_pointer, 1},
      {&gpt2, "/tie_word_embeddings"_json_pointer, "yes"},
      {&gpt2, "/scale_attn_weights"_json_pointer, 1},
      {&gpt2, "/scale_attn_by_inverse_layer_idx"_json_pointer, "no"},
      {&gpt2, "/reorder_and_upcast_attn"_json_pointer, nlohmann::json::array()},
      {&llama, "/hidden_act"_json_pointer, false},
      {&llama, "/tie_word_embeddings"_json_pointer, 0},
      {&llama, "/rope_scaling/rope_type"_json_pointer, 3},
      {&llama, "/rope_scaling/type"_json_pointer, 3},
  };
  for (const auto& c : cases) {
    nlohmann::json config = *c.base;
    if (c.key.to_string() == "/rope_scaling/type") config["rope_scaling"].erase("rope_type");
    config[c.key] = c.value;
    StatusOr<ModelConfig> read = ModelConfigFromHf(config, "x/config.json");
    ASSERT_FALSE(read.ok()) << c.key.to_string();
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument) << c.key.to_string();
    EXPECT_NE(read.status().message().find("x/config.json"), std::string::npos)
        << read.status().message();
    EXPECT_NE(read.status().message().find(c.key.back()), std::string::npos)
        << read.status().message();
  }
}

// Dimensions whose products overflow the layouts' int64 counts are refused before any layout
// is computed from them, naming the file: an llm.c header of 2^24 layers of 2^24 channels, a
// config.json of the same.
TEST(Gpt2Weights, DimensionsTooLargeToAddressAreRefusedNamingTheFile) {
  int32_t header[256] = {};
  header[0] = kLlmcModelMagic;
  header[1] = 3;
  const int32_t dims[] = {1, 128, 1 << 24, 1, 1 << 24, 128};  // T, V, L, NH, C, Vp
  std::copy(std::begin(dims), std::end(dims), header + 2);
  const std::string path = TempDir("llmc_huge") + "/model.bin";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(header), sizeof(header));
  ExpectRefused(path, {path, "parameters"});

  const std::string dir = CopyFixture("huge_config");
  nlohmann::json config = nlohmann::json::parse(ReadFile(dir + "/config.json"));
  config["n_layer"] = 1 << 24;
  config["n_embd"] = 1 << 24;
  std::ofstream(dir + "/config.json") << config.dump();
  // Now beyond the bound on each dimension (runtime/model/model_limits.h), refused before the
  // count.
  ExpectRefused(dir, {dir + "/config.json", "n_layer is 16777216, more than 4096"});

  // Each dimension within its bound, their product beyond 2^50.
  nlohmann::json llama = {{"model_type", "llama"},          {"hidden_size", 1 << 17},
                          {"intermediate_size", 1 << 20},   {"num_hidden_layers", 4096},
                          {"num_attention_heads", 1 << 10}, {"vocab_size", 64},
                          {"max_position_embeddings", 32}};
  StatusOr<ModelConfig> read = ModelConfigFromHf(llama, "l/config.json");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("parameters"), std::string::npos)
      << read.status().message();
}

// A sharded checkpoint whose index and shards disagree is refused naming the index, the tensor
// and the shard that holds it, not as a tensor missing or without a place in the model.
TEST(Gpt2Weights, AnIndexThatDisagreesWithItsShardsIsNamed) {
  const std::string name = "transformer.h.0.ln_1.weight";
  const auto copy = [&](const std::string& to) {
    const std::string dir = TempDir(to);
    fs::copy(kData + "/sharded", dir,
             fs::copy_options::overwrite_existing | fs::copy_options::recursive);
    return dir;
  };
  const auto edit_index = [](const std::string& dir, const std::function<void(std::string*)>& f) {
    std::string text = ReadFile(dir + "/model.safetensors.index.json");
    f(&text);
    std::ofstream(dir + "/model.safetensors.index.json", std::ios::trunc) << text;
  };
  // Sent to a shard that does not hold it.
  std::string dir = copy("index_elsewhere");
  edit_index(dir, [&](std::string* text) {
    const size_t at = text->find("\"" + name + "\": \"model-00001-of-00003");
    ASSERT_NE(at, std::string::npos);
    text->replace(text->find("00001", at), 5, "00002");
  });
  ExpectRefused(dir, {dir + "/model.safetensors.index.json", name, "model-00002-of-00003",
                      dir + "/model-00001-of-00003.safetensors", "different saves"});

  // Sent to the directory itself or its parent rather than a file in it.
  for (const char* not_a_file : {"", ".", ".."}) {
    dir = copy("index_not_a_file");
    edit_index(dir, [&](std::string* text) {
      const size_t at = text->find("\"" + name + "\": \"") + name.size() + 5;
      text->replace(at, std::string("model-00001-of-00003.safetensors").size(), not_a_file);
    });
    ExpectRefused(dir, {dir + "/model.safetensors.index.json", name, "not a file name"});
  }

  // Named twice, once for each of two shards.
  dir = copy("index_twice");
  edit_index(dir, [&](std::string* text) {
    const size_t at = text->find("\"weight_map\": {") + 15;
    text->insert(at, "\n    \"" + name + "\": \"model-00002-of-00003.safetensors\",");
  });
  ExpectRefused(dir, {dir + "/model.safetensors.index.json", name, "twice"});

  // In two shards, the index sending it to one of them.
  dir = copy("two_shards");
  {
    auto first = SafetensorsFile::Open(dir + "/model-00001-of-00003.safetensors");
    ASSERT_TRUE(first.ok());
    const SafetensorsTensor* t = first->Find(name);
    ASSERT_NE(t, nullptr);
    std::vector<float> values(static_cast<size_t>(t->elements()));
    ASSERT_TRUE(first->ReadFloat(*t, 0, t->elements(), values.data()).ok());
    auto second = SafetensorsFile::Open(dir + "/model-00002-of-00003.safetensors");
    ASSERT_TRUE(second.ok());
    std::vector<SafetensorsOutput> outputs;
    for (const SafetensorsTensor& kept : second->tensors()) {
      const SafetensorsFile* from = &*second;
      outputs.push_back(
          {kept.name, kept.dtype, kept.shape, [from, kept](const SafetensorsOutput::Emit& emit) {
             std::string bytes(static_cast<size_t>(kept.end - kept.begin), '\0');
             HOIST_RETURN_IF_ERROR(from->ReadBytes(kept, 0, kept.end - kept.begin, bytes.data()));
             return emit(bytes.data(), kept.end - kept.begin);
           }});
    }
    outputs.push_back({name, "F32", t->shape, [values](const SafetensorsOutput::Emit& emit) {
                         return emit(values.data(), static_cast<int64_t>(values.size() * 4));
                       }});
    SortSafetensorsOutputs(&outputs);
    ASSERT_TRUE(WriteSafetensors(dir + "/copy.safetensors", std::move(outputs), {}).ok());
  }
  fs::rename(dir + "/copy.safetensors", dir + "/model-00002-of-00003.safetensors");
  ExpectRefused(dir, {dir + "/model-00002-of-00003.safetensors", name, "two shards",
                      "model-00001-of-00003.safetensors"});
}

// A config.json saved by transformers 4 names the weights' type torch_dtype: the export sets that
// key to its own type and adds no second one, so an unchanged import exports the same bytes.
TEST(Gpt2Weights, ATransformers4ConfigKeepsItsTorchDtypeKey) {
  ModelConfig m;
  const std::vector<float> weights = Open(kData + "/fp32", &m);
  nlohmann::json v4 = nlohmann::json::parse(ReadFile(kData + "/fp32/config.json"));
  v4["torch_dtype"] = v4["dtype"];
  v4.erase("dtype");
  HfExportOptions options;
  options.base_config = v4;
  const std::string out = TempDir("v4");
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), options).ok());
  EXPECT_EQ(ReadFile(out + "/config.json"), v4.dump(2) + "\n");

  options.dtype = DType::kBFloat16;
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), options).ok());
  const nlohmann::json written = nlohmann::json::parse(ReadFile(out + "/config.json"));
  EXPECT_EQ(written["torch_dtype"], "bfloat16");
  EXPECT_FALSE(written.contains("dtype"));
}

// A sharded export over an earlier one that runs out of disk after its first shard leaves no
// mix of the two exports' shards: the earlier export stays whole (tests/runtime/
// export_staging_test.cc tries every call).
TEST(Gpt2Weights, AnExportThatFailsHalfWayLeavesNoMixOfTwoExports) {
  ModelConfig m;
  std::vector<float> weights = Open(kData + "/fp32", &m);
  const std::vector<float> earlier = weights;
  const std::string out = TempDir("half_way");
  HfExportOptions sharded;
  sharded.max_shard_bytes = 12000;
  ASSERT_TRUE(WriteHfCheckpoint(out, m, weights.data(), sharded).ok());
  for (float& w : weights) w *= 0.5f;
  FaultInjectingFileSystem faulty(FileSystem::Posix());
  faulty.SetWriteBudget(
      static_cast<int64_t>(fs::file_size(out + "/model-00001-of-00003.safetensors")) + 100);
  const Status failed = WriteHfCheckpoint(out, m, weights.data(), sharded, faulty);
  ASSERT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed.ToString();
  EXPECT_EQ(Open(out), earlier);
}

}  // namespace
}  // namespace hoist::runtime

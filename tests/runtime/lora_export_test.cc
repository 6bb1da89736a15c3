// A LoRA run's checkpoint out to other tools, against Hugging Face PEFT (tests/data/lora_peft/):
// its adapters in PEFT's layout are PEFT's own file, byte for byte, on one rank and on two at
// ZeRO stage 3; merged into the base (hf, llmc) they are PEFT's merge_and_unload, with every
// tensor no adapter touches the base's bits; `hoist sample` computes with the same merged
// weights; a checkpoint whose base is gone or changed says that the merge needs it, and a resume
// onto a base that differs on one rank stops every rank with the reason.
//
// The checkpoints hold PEFT's initial adapters unchanged: the job starts from the fixture adapter
// and takes one step at a learning rate of 0 (WarmupLR from warmup_min_lr 0), under which AdamW
// moves nothing (its weight decay is scaled by the learning rate too).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/file_system.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/export.h"
#include "runtime/checkpoint/run_identity.h"
#include "runtime/config/config.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/interchange/peft_adapter.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/lora.h"
#include "runtime/model/model.h"
#include "runtime/train/sampler.h"
#include "trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::RankRun;
using testing_util::TrainOnRanks;

const std::string kLora = std::string(HOIST_SOURCE_DIR) + "/tests/data/lora_peft";
const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data";

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_lora_export_test" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string BaseDir(const std::string& family) { return kData + "/" + family + "_hf"; }

std::vector<float> Tensor(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsTensor* t = file.Find(name);
  HOIST_CHECK(t != nullptr) << file.path() << " has no " << name;
  std::vector<float> values(static_cast<size_t>(t->elements()));
  HOIST_CHECK(file.ReadFloat(*t, 0, t->elements(), values.data()).ok());
  return values;
}

// One step from PEFT's adapter (or, with `lora` false, a full-training run of the same base) at
// learning rate 0, checkpointed into `dir`/ck.
Config Job(const std::string& family, const std::string& base, const std::string& dir, int world,
           const std::vector<std::string>& extra = {}, bool lora = true) {
  nlohmann::json job = {
      {"model", {{"init_from", base}, {"seq_len", 8}}},
      {"train_micro_batch_size_per_gpu", 2 / world},
      {"gradient_accumulation_steps", 1},
      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.1}}}}},
      {"scheduler",
       {{"type", "WarmupLR"},
        {"params",
         {{"warmup_min_lr", 0.0},
          {"warmup_max_lr", 0.01},
          {"warmup_num_steps", 100},
          {"warmup_type", "linear"}}}}},
      {"gradient_clipping", 0.0},
      {"steps_per_print", 0},
      {"train", {{"steps", 1}, {"seed", 1}, {"eval_interval", 0}}},
      {"checkpoint", {{"dir", dir + "/ck"}, {"interval_steps", 1}}},
      {"data", {{"train", BaseDir(family) + "/train.bin"}, {"val", ""}}},
      {"monitor", {{"jsonl", {{"path", ""}}}}},
      {"comm", {{"timeout_s", 60}}}};
  if (lora) job["lora"] = {{"init_from", kLora + "/" + family + "/adapter"}};
  StatusOr<Config> config = ParseConfig(job.dump(), extra, world, "lora export job");
  HOIST_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

void Train(const Config& config, int world) {
  const std::vector<RankRun> runs = TrainOnRanks(config, world);
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_TRUE(runs[r].status.ok()) << "rank " << r << ": " << runs[r].status.ToString();
  }
}

StatusOr<std::string> Export(const std::string& checkpoint, ExportFormat format,
                             const std::string& output, DType dtype = DType::kFloat32) {
  ExportOptions options;
  options.checkpoint = checkpoint;
  options.format = format;
  options.output = output;
  options.dtype = dtype;
  return ExportCheckpoint(options);
}

// The weights of a Hugging Face directory or llm.c file, unit by unit.
std::vector<float> AllWeights(const std::string& path) {
  auto source = OpenWeightSource(path);
  HOIST_CHECK(source.ok()) << source.status().ToString();
  std::vector<float> weights;
  int unit = 0;
  for (const zero::UnitSpec& spec : ModelUnits((*source)->model())) {
    std::vector<float> part(static_cast<size_t>(spec.size));
    HOIST_CHECK((*source)->FillUnit(unit++, part.data()).ok());
    weights.insert(weights.end(), part.begin(), part.end());
  }
  return weights;
}

class LoraExport : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraExport, PeftExportIsPeftsOwnFileOnOneRankAndOnTwoAtStageThree) {
  const std::string family = GetParam();
  const std::string fixture = kLora + "/" + family + "/adapter";
  const std::string base = BaseDir(family) + "/fp32";
  for (const auto& [world, stage] : {std::pair{1, 0}, std::pair{2, 3}}) {
    const std::string what = std::to_string(world) + " rank(s), stage " + std::to_string(stage);
    const std::string dir = TempDir(family + "_peft_" + std::to_string(world));
    Train(Job(family, base, dir, world, {"zero_optimization.stage=" + std::to_string(stage)}),
          world);
    StatusOr<std::string> step = Export(dir + "/ck", ExportFormat::kPeft, dir + "/peft");
    ASSERT_TRUE(step.ok()) << what << ": " << step.status().ToString();
    EXPECT_EQ(*step, dir + "/ck/step_00000001");
    // The same names, shapes, order, header and bytes as the file PEFT saved.
    const std::string want = ReadFile(fixture + "/adapter_model.safetensors");
    const std::string got = ReadFile(dir + "/peft/adapter_model.safetensors");
    EXPECT_EQ(got.size(), want.size()) << what;
    EXPECT_TRUE(got == want) << what << ": adapter_model.safetensors differs from PEFT's";

    // adapter_config.json: PEFT's keys, the run's settings.
    const nlohmann::json peft = nlohmann::json::parse(ReadFile(fixture + "/adapter_config.json"));
    const nlohmann::json ours = nlohmann::json::parse(ReadFile(dir + "/peft/adapter_config.json"));
    std::set<std::string> peft_keys, our_keys;
    for (const auto& [key, value] : peft.items()) peft_keys.insert(key);
    for (const auto& [key, value] : ours.items()) our_keys.insert(key);
    peft_keys.erase("peft_version");  // the library's version, not a setting
    EXPECT_EQ(our_keys, peft_keys) << what;
    for (const char* key : {"peft_type", "r", "lora_alpha", "lora_dropout", "bias", "use_rslora",
                            "task_type", "fan_in_fan_out", "inference_mode", "use_dora"}) {
      EXPECT_EQ(ours[key], peft[key]) << what << ": " << key;
    }
    EXPECT_EQ(ours["base_model_name_or_path"], base) << what;
    std::vector<std::string> targets = peft["target_modules"].get<std::vector<std::string>>();
    std::sort(targets.begin(), targets.end());
    EXPECT_EQ(ours["target_modules"].get<std::vector<std::string>>(), targets) << what;
    // And hoist reads it back as the adapter it started from.
    auto lora = ReadPeftAdapterConfig(dir + "/peft");
    ASSERT_TRUE(lora.ok()) << lora.status().ToString();
    EXPECT_EQ(lora->r, peft["r"].get<int>());
  }
}

TEST_P(LoraExport, HalfPrecisionPeftExportRoundsTheAdaptersAndCarriesTheDropout) {
  const std::string family = GetParam();
  const std::string dir = TempDir(family + "_peft_bf16");
  // Dropout changes no weight at learning rate 0; the adapter config carries it.
  Train(Job(family, BaseDir(family) + "/fp32", dir, 1, {"lora.dropout=0.05"}), 1);
  ASSERT_TRUE(Export(dir + "/ck", ExportFormat::kPeft, dir + "/bf16", DType::kBFloat16).ok());
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir + "/bf16/adapter_config.json"))["lora_dropout"],
            0.05);
  auto fixture = SafetensorsFile::Open(kLora + "/" + family + "/adapter/adapter_model.safetensors");
  auto half = SafetensorsFile::Open(dir + "/bf16/adapter_model.safetensors");
  ASSERT_TRUE(fixture.ok() && half.ok());
  EXPECT_EQ(half->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(half->tensors().size(), fixture->tensors().size());
  for (const SafetensorsTensor& want : fixture->tensors()) {
    const SafetensorsTensor* got = half->Find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->dtype, "BF16");
    EXPECT_EQ(got->shape, want.shape) << want.name;
    const std::vector<float> a = Tensor(*fixture, want.name), b = Tensor(*half, want.name);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(b[i], a[i], std::abs(a[i]) / 256 + 1e-30) << want.name << " " << i;
    }
  }
}

// PEFT's merge_and_unload of the initial adapter (reference.safetensors' merged.<name>, in
// transformers' layout: GPT-2's Conv1D weights (in, out)) within 1e-6 of each tensor's largest
// value; every other tensor is the base's, bit for bit.
TEST_P(LoraExport, MergedExportIsPeftsMergeAndTheRestIsTheBase) {
  const std::string family = GetParam();
  const std::string base = BaseDir(family) + "/fp32";
  const std::string dir = TempDir(family + "_merged");
  Train(Job(family, base, dir, 2, {"zero_optimization.stage=3"}), 2);
  StatusOr<std::string> step = Export(dir + "/ck", ExportFormat::kHuggingFace, dir + "/hf");
  ASSERT_TRUE(step.ok()) << step.status().ToString();

  auto reference = SafetensorsFile::Open(kLora + "/" + family + "/reference.safetensors");
  auto original = SafetensorsFile::Open(base + "/model.safetensors");
  auto merged = SafetensorsFile::Open(dir + "/hf/model.safetensors");
  ASSERT_TRUE(reference.ok() && original.ok() && merged.ok());
  ASSERT_EQ(merged->tensors().size(), original->tensors().size());
  int compared = 0;
  for (const SafetensorsTensor& tensor : original->tensors()) {
    const SafetensorsTensor* got = merged->Find(tensor.name);
    ASSERT_NE(got, nullptr) << tensor.name;
    EXPECT_EQ(got->shape, tensor.shape) << tensor.name;
    const std::vector<float> ours = Tensor(*merged, tensor.name);
    const std::vector<float> before = Tensor(*original, tensor.name);
    if (reference->Find("merged." + tensor.name) == nullptr) {
      EXPECT_TRUE(ours == before) << tensor.name << " has no adapter but changed";
      continue;
    }
    const std::vector<float> want = Tensor(*reference, "merged." + tensor.name);
    ASSERT_EQ(ours.size(), want.size()) << tensor.name;
    double scale = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(double{want[i]}));
      worst = std::max(worst, std::abs(double{ours[i]} - want[i]));
    }
    EXPECT_LE(worst, 1e-6 * scale) << tensor.name << ": worst difference " << worst;
    EXPECT_FALSE(ours == before) << tensor.name << ": the adapter was not merged";
    ++compared;
  }
  // Every merged tensor of PEFT's was compared (Llama's q and v rows of the fused q/k/v, the gate
  // rows of gate/up).
  int want_merged = 0;
  for (const SafetensorsTensor& tensor : reference->tensors()) {
    want_merged += tensor.name.rfind("merged.", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(compared, want_merged);
  // The base's config.json.
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir + "/hf/config.json")),
            nlohmann::json::parse(ReadFile(base + "/config.json")));

  // llm.c (GPT-2): the same merged weights.
  if (family == "gpt2") {
    ASSERT_TRUE(Export(dir + "/ck", ExportFormat::kLlmc, dir + "/model.bin").ok());
    EXPECT_EQ(AllWeights(dir + "/model.bin"), AllWeights(dir + "/hf"));
  }
}

// `hoist sample` of a LoRA checkpoint computes with the merged weights: greedy decoding gives
// what a model built from the merged export gives.
TEST_P(LoraExport, SampleUsesTheMergedWeights) {
  const std::string family = GetParam();
  const std::string dir = TempDir(family + "_sample");
  Train(Job(family, BaseDir(family) + "/fp32", dir, 1), 1);
  ASSERT_TRUE(Export(dir + "/ck", ExportFormat::kHuggingFace, dir + "/hf").ok());
  SampleOptions sample;
  sample.checkpoint = dir + "/ck";
  sample.prompt = "AB";
  sample.max_new_tokens = 6;
  sample.temperature = 0.0f;
  StatusOr<std::vector<int32_t>> sampled = Sample(sample);
  ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();

  auto source = OpenWeightSource(dir + "/hf");
  ASSERT_TRUE(source.ok());
  ModelConfig m = (*source)->model();
  m.n_positions = m.positions();
  m.seq_len = 8;  // the job's context
  CpuDevice device(Place::kDevice);
  auto model = CreateModel(m, 1, m.seq_len, &device);
  ASSERT_TRUE(model.ok());
  const std::vector<float> weights = AllWeights(dir + "/hf");
  std::copy(weights.begin(), weights.end(), (*model)->params());
  std::vector<int32_t> context = {'A', 'B'}, greedy;
  for (int i = 0; i < sample.max_new_tokens; ++i) {
    const int T = std::min<int>(static_cast<int>(context.size()), m.seq_len);
    (*model)->Forward(context.data() + context.size() - T, nullptr, 1, T).value();
    const float* last = (*model)->logits() + int64_t{T - 1} * m.padded_vocab_size();
    const int32_t token = static_cast<int32_t>(std::max_element(last, last + m.vocab_size) - last);
    context.push_back(token);
    greedy.push_back(token);
  }
  EXPECT_EQ(*sampled, greedy);
}

// The checkpoint records the dropout for the export; like the learning rate, a resume may change
// it.
TEST(LoraExportErrors, TheRecordedDropoutMayChangeOnResume) {
  const Config with =
      Job("gpt2", BaseDir("gpt2") + "/fp32", TempDir("dropout"), 1, {"lora.dropout=0.1"});
  const Config without = Job("gpt2", BaseDir("gpt2") + "/fp32", TempDir("dropout"), 1);
  const nlohmann::json saved = RunIdentity(with);
  auto model = ModelFromRunIdentity(saved, "ck");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_FLOAT_EQ(model->lora.dropout, 0.1f);
  const Status resumed = CheckSameRun(saved, without, "ck", 1);
  EXPECT_TRUE(resumed.ok()) << resumed.ToString();
}

// The adapters were trained against the 4-bit base: a resume onto the 16-bit one (or back) is
// another run, refused either way.
TEST(LoraExportErrors, AResumeThatChangesTheBaseQuantizationIsRefused) {
  const std::string dir = TempDir("quantization");
  const Config nf4 = Job("gpt2", BaseDir("gpt2") + "/fp32", dir, 1,
                         {"lora.base_quantization=\"nf4\"", "bf16.enabled=true"});
  const Config none = Job("gpt2", BaseDir("gpt2") + "/fp32", dir, 1, {"bf16.enabled=true"});
  const Config dq =
      Job("gpt2", BaseDir("gpt2") + "/fp32", dir, 1,
          {"lora.base_quantization=\"nf4\"", "lora.double_quant=true", "bf16.enabled=true"});
  for (const auto& [from, to] : {std::pair{&nf4, &none}, std::pair{&none, &nf4},
                                 std::pair{&nf4, &dq}, std::pair{&dq, &nf4}}) {
    const Status resumed = CheckSameRun(RunIdentity(*from), *to, "ck", 1);
    ASSERT_FALSE(resumed.ok());
    EXPECT_EQ(resumed.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(resumed.message().find("lora.base_quantization"), std::string::npos)
        << resumed.ToString();
  }
  EXPECT_TRUE(CheckSameRun(RunIdentity(nf4), nf4, "ck", 1).ok());
}

INSTANTIATE_TEST_SUITE_P(Families, LoraExport,
                         ::testing::Values("gpt2", "llama", "qwen2", "gemma2"));

TEST(LoraExportErrors, PeftOfAFullTrainingCheckpointIsRefused) {
  const std::string dir = TempDir("full");
  Train(Job("gpt2", BaseDir("gpt2") + "/fp32", dir, 1, {}, /*lora=*/false), 1);
  StatusOr<std::string> refused = Export(dir + "/ck", ExportFormat::kPeft, dir + "/peft");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("not a LoRA run"), std::string::npos)
      << refused.status().ToString();
  EXPECT_FALSE(fs::exists(dir + "/peft/adapter_model.safetensors"));
}

// The checkpoint holds the adapters alone: without the base it names (model.init_from), or with
// another model there, the merged export and sampling say so; the PEFT export still works.
TEST(LoraExportErrors, AMissingOrChangedBaseIsNamed) {
  const std::string dir = TempDir("moved_base");
  const std::string base = dir + "/base";
  fs::copy(BaseDir("gpt2") + "/fp32", base);
  Train(Job("gpt2", base, dir, 1), 1);
  fs::remove_all(base);
  auto expect_refused = [&](const std::string& words) {
    for (ExportFormat format : {ExportFormat::kHuggingFace, ExportFormat::kLlmc}) {
      StatusOr<std::string> refused = Export(dir + "/ck", format, dir + "/out");
      ASSERT_FALSE(refused.ok());
      EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
      const std::string& message = refused.status().message();
      EXPECT_NE(message.find(base), std::string::npos) << message;
      EXPECT_NE(message.find(words), std::string::npos) << message;
      EXPECT_NE(message.find("merged weights need the base"), std::string::npos) << message;
    }
    SampleOptions sample;
    sample.checkpoint = dir + "/ck";
    StatusOr<std::vector<int32_t>> sampled = Sample(sample);
    ASSERT_FALSE(sampled.ok());
    EXPECT_NE(sampled.status().message().find(base), std::string::npos)
        << sampled.status().ToString();
  };
  expect_refused("cannot be read");
  // Another model where the base was.
  fs::copy(BaseDir("llama") + "/fp32", base);
  expect_refused("not the model its adapters were trained on");
  EXPECT_TRUE(Export(dir + "/ck", ExportFormat::kPeft, dir + "/peft").ok());
}

// Other weights of the same shapes put in place of the base (every float of model.safetensors
// nudged, its header kept) used to resume and export silently onto them: the checkpoint records
// the base's identity, and a resume or a merged export onto another base is refused, naming the
// file and what changed. A checkpoint written before the identity was recorded still exports.
TEST(LoraExportErrors, ABaseReplacedByOtherWeightsOfTheSameShapesIsRefused) {
  const std::string dir = TempDir("replaced_base");
  const std::string base = dir + "/base";
  fs::copy(BaseDir("gpt2") + "/fp32", base);
  Train(Job("gpt2", base, dir, 1), 1);
  const std::string weights = base + "/model.safetensors";
  const std::string original = ReadFile(weights);
  std::string other = original;
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(other[i]);
  for (size_t at = 8 + header; at < other.size(); at += 4) other[at] ^= 0x10;
  const std::string step_dir = dir + "/ck/step_00000001";
  TrainerOptions resume;
  resume.resume_from = step_dir;
  const Config longer = Job("gpt2", base, dir, 1, {"train.steps=2"});

  std::ofstream(weights, std::ios::binary | std::ios::trunc) << other;
  auto expect_named = [&](const Status& s) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find(step_dir), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(base), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("model.safetensors holds other data"), std::string::npos)
        << s.ToString();
  };
  const std::vector<RankRun> refused = TrainOnRanks(longer, 1, resume);
  ASSERT_FALSE(refused[0].status.ok());
  expect_named(refused[0].status);
  StatusOr<std::string> exported = Export(step_dir, ExportFormat::kHuggingFace, dir + "/out");
  ASSERT_FALSE(exported.ok());
  expect_named(exported.status());
  // The adapters alone need no base.
  EXPECT_TRUE(Export(step_dir, ExportFormat::kPeft, dir + "/peft").ok());

  // The base put back, both go on.
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << original;
  EXPECT_TRUE(Export(step_dir, ExportFormat::kHuggingFace, dir + "/out").ok());
  const std::vector<RankRun> resumed = TrainOnRanks(longer, 1, resume);
  EXPECT_TRUE(resumed[0].status.ok()) << resumed[0].status.ToString();

  // A manifest without the identity (written before it was recorded) cannot tell: it exports,
  // with a notice.
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << other;
  const std::string manifest_path = step_dir + "/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(ReadFile(manifest_path));
  ASSERT_TRUE(manifest["metadata"].contains("lora_base"));
  manifest["metadata"].erase("lora_base");
  manifest["manifest_xxh64"] = CheckpointManifestChecksum(manifest).value();
  std::ofstream(manifest_path, std::ios::trunc) << manifest.dump(2);
  EXPECT_TRUE(Export(step_dir, ExportFormat::kHuggingFace, dir + "/out").ok());
}

// The POSIX file system with every path under `from` read and written under `to` instead: one
// rank's view of a directory that holds other bytes on its node.
class RedirectingFileSystem final : public FileSystem {
 public:
  RedirectingFileSystem(std::string from, std::string to)
      : from_(std::move(from)), to_(std::move(to)) {}

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return posix_.NewWritableFile(Map(path));
  }
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return posix_.NewRandomAccessFile(Map(path));
  }
  StatusOr<std::unique_ptr<ReadOnlyMapping>> MapReadOnly(const std::string& path) override {
    return posix_.MapReadOnly(Map(path));
  }
  StatusOr<FileInfo> Stat(const std::string& path) override { return posix_.Stat(Map(path)); }
  StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    return posix_.ListDirectory(Map(path));
  }
  Status CreateDirs(const std::string& path) override { return posix_.CreateDirs(Map(path)); }
  Status SyncDir(const std::string& path) override { return posix_.SyncDir(Map(path)); }
  Status Rename(const std::string& from, const std::string& to) override {
    return posix_.Rename(Map(from), Map(to));
  }
  Status Exchange(const std::string& a, const std::string& b) override {
    return posix_.Exchange(Map(a), Map(b));
  }
  Status Link(const std::string& from, const std::string& to) override {
    return posix_.Link(Map(from), Map(to));
  }
  Status Remove(const std::string& path) override { return posix_.Remove(Map(path)); }
  Status RemoveAll(const std::string& path) override { return posix_.RemoveAll(Map(path)); }

 private:
  std::string Map(const std::string& path) const {
    return path.rfind(from_, 0) == 0 ? to_ + path.substr(from_.size()) : path;
  }

  FileSystem& posix_ = FileSystem::Posix();
  const std::string from_, to_;
};

// Each rank reads the base itself (nodes often keep their own copy), so one rank alone may find
// the base differs from the one the checkpoint recorded. That rank used to return alone while the
// others waited in the restore's collective until the communicator timed out; now the ranks agree
// on the check's result, and every rank stops at once with the reason. Rank 1 here reads a copy
// of the checkpoint whose manifest records another model.safetensors: to the check, the same as
// its base differing.
TEST(LoraExportErrors, ABaseThatDiffersOnOneRankStopsEveryRankWithTheReason) {
  const std::string dir = TempDir("base_differs_on_one_rank");
  const std::string base = dir + "/base";
  fs::copy(BaseDir("gpt2") + "/fp32", base);
  Train(Job("gpt2", base, dir, 2), 2);
  const std::string step_dir = dir + "/ck/step_00000001";
  fs::copy(dir + "/ck", dir + "/ck_rank1", fs::copy_options::recursive);
  const std::string manifest_path = dir + "/ck_rank1/step_00000001/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(ReadFile(manifest_path));
  bool recorded = false;
  for (nlohmann::json& file : manifest["metadata"]["lora_base"]["files"]) {
    if (file["name"] != "model.safetensors") continue;
    file["data_xxh64"] = "0123456789abcdef";
    recorded = true;
  }
  ASSERT_TRUE(recorded) << manifest["metadata"]["lora_base"].dump();
  manifest["manifest_xxh64"] = CheckpointManifestChecksum(manifest).value();
  std::ofstream(manifest_path, std::ios::trunc) << manifest.dump(2);

  RedirectingFileSystem rank1_view(dir + "/ck", dir + "/ck_rank1");
  TrainerOptions resume;
  resume.resume_from = step_dir;
  const auto started = std::chrono::steady_clock::now();
  auto rank1_reads_its_view = [&](int rank, TrainerOptions* options) {
    if (rank == 1) options->checkpoint_fs = &rank1_view;
  };
  const std::vector<RankRun> runs =
      TrainOnRanks(Job("gpt2", base, dir, 2, {"train.steps=2"}), 2, resume, rank1_reads_its_view);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (const RankRun& run : runs) {
    EXPECT_NE(run.status.message().find("model.safetensors holds other data"), std::string::npos)
        << run.status.ToString();
  }
  EXPECT_EQ(runs[1].status.code(), StatusCode::kFailedPrecondition) << runs[1].status.ToString();
  EXPECT_NE(runs[0].status.message().find("rank 1 failed"), std::string::npos)
      << runs[0].status.ToString();
  // Together, not rank 0 after the communicator's 60 s timeout.
  EXPECT_LT(seconds, 30.0);
}

}  // namespace
}  // namespace hoist::runtime

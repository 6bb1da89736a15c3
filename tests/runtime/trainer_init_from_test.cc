// Training from another tool's weights (model.init_from): 20 AdamW steps from a Hugging Face
// GPT-2 match the same steps in PyTorch (scripts/reference/gpt2_hf.py recorded them in
// tests/data/gpt2_hf/), on one rank and on two at ZeRO stage 3; the checkpoint it writes exports
// back to Hugging Face and llm.c files that read as the trained weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/device.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/export.h"
#include "runtime/config/config.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/gpt2_weights.h"
#include "runtime/model/model.h"
#include "runtime/train/sampler.h"
#include "trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::RankRun;
using testing_util::TrainOnRanks;

const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data/gpt2_hf";
const std::string kLlama = std::string(HOIST_SOURCE_DIR) + "/tests/data/llama_hf";

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_init_from_test" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The run PyTorch made (train.json): B x T = 2 x 8 per step, AdamW at a constant lr, weight
// decay on the 2-D tensors, no clipping; `world` ranks share the 2 sequences of each step.
Config Job(const std::string& init_from, int world, const std::vector<std::string>& extra = {},
           const std::string& data = kData) {
  const nlohmann::json train = nlohmann::json::parse(ReadFile(data + "/train.json"));
  const int B = train["B"].get<int>();
  nlohmann::json job = {{"model", {{"init_from", init_from}, {"seq_len", train["T"]}}},
                        {"train_micro_batch_size_per_gpu", B / world},
                        {"gradient_accumulation_steps", 1},
                        {"optimizer",
                         {{"type", "AdamW"},
                          {"params",
                           {{"lr", train["lr"]},
                            {"betas", train["betas"]},
                            {"eps", train["eps"]},
                            {"weight_decay", train["weight_decay"]}}}}},
                        {"gradient_clipping", 0.0},
                        {"steps_per_print", 0},
                        {"train", {{"steps", train["steps"]}, {"seed", 1}, {"eval_interval", 0}}},
                        {"data", {{"train", data + "/train.bin"}, {"val", ""}}},
                        {"monitor", {{"jsonl", {{"path", ""}}}}},
                        {"comm", {{"timeout_s", 60}}}};
  StatusOr<Config> config = ParseConfig(job.dump(), extra, world, "init_from job");
  HOIST_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

std::vector<float> TorchLosses(const std::string& data = kData) {
  auto file = SafetensorsFile::Open(data + "/reference.safetensors");
  HOIST_CHECK(file.ok());
  const SafetensorsTensor* t = file->Find("train_losses");
  std::vector<float> losses(static_cast<size_t>(t->elements()));
  HOIST_CHECK(file->ReadFloat(*t, 0, t->elements(), losses.data()).ok());
  return losses;
}

// The losses agree with PyTorch's to 1e-4 relative: float rounding (different summation orders
// in every matmul and reduction) grows over 20 steps of AdamW at lr 1e-2 but stays near 1e-6
// here; a wrong weight decay set, bias correction or tensor mapping moves the losses by 1e-3 and
// more within a few steps.
void ExpectTorchLosses(const std::vector<float>& losses, const std::string& what,
                       const std::string& data = kData) {
  const std::vector<float> torch = TorchLosses(data);
  ASSERT_EQ(losses.size(), torch.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < torch.size(); ++i) {
    worst = std::max(worst, std::abs(double{losses[i]} - torch[i]) / std::abs(torch[i]));
    EXPECT_NEAR(losses[i], torch[i], 1e-4 * std::abs(torch[i])) << what << " step " << i + 1;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", worst);
  ::testing::Test::RecordProperty(what, text);
}

void ExpectOk(const std::vector<RankRun>& runs) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_TRUE(runs[r].status.ok()) << "rank " << r << ": " << runs[r].status.ToString();
  }
}

TEST(TrainerInitFrom, TwentyStepsFromHuggingFaceWeightsMatchPyTorch) {
  const std::vector<RankRun> runs = TrainOnRanks(Job(kData + "/fp32", 1), 1);
  ExpectOk(runs);
  ExpectTorchLosses(runs[0].losses, "one rank");
}

TEST(TrainerInitFrom, LlmcWeightsTrainTheSame) {
  const std::vector<RankRun> hf = TrainOnRanks(Job(kData + "/fp32", 1), 1);
  const std::vector<RankRun> llmc = TrainOnRanks(Job(kData + "/gpt2_tiny.bin", 1), 1);
  ExpectOk(hf);
  ExpectOk(llmc);
  EXPECT_EQ(hf[0].losses, llmc[0].losses);
}

TEST(TrainerInitFrom, StageThreeOnTwoRanksMatchesPyTorchAndExportsBack) {
  const std::string dir = TempDir("stage3");
  const Config config = Job(kData + "/fp32", 2,
                            {"zero_optimization.stage=3", "checkpoint.dir=\"" + dir + "/ck\"",
                             "checkpoint.interval_steps=20"});
  const std::vector<RankRun> runs = TrainOnRanks(config, 2);
  ExpectOk(runs);
  ExpectTorchLosses(runs[0].losses, "two ranks at stage 3");
  EXPECT_EQ(runs[0].losses, runs[1].losses);

  // The trained weights out as Hugging Face (sharded) and llm.c files, read back.
  ExportOptions options;
  options.checkpoint = dir + "/ck";
  options.output = dir + "/hf";
  options.max_shard_bytes = 12000;
  StatusOr<std::string> step = ExportCheckpoint(options);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, dir + "/ck/step_00000020");
  options.format = ExportFormat::kLlmc;
  options.output = dir + "/model.bin";
  ASSERT_TRUE(ExportCheckpoint(options).ok());
  for (const std::string& path : {dir + "/hf", dir + "/model.bin"}) {
    auto source = OpenWeightSource(path);
    ASSERT_TRUE(source.ok()) << source.status().ToString();
    const ParamLayout layout = ParamLayout::For((*source)->model());
    std::vector<float> weights(static_cast<size_t>(layout.total));
    for (int u = 0; u < layout.num_units(); ++u) {
      ASSERT_TRUE((*source)->FillUnit(u, weights.data() + layout.unit_offsets[u]).ok());
    }
    ASSERT_EQ(weights.size(), runs[0].params.size()) << path;
    EXPECT_EQ(weights, runs[0].params) << path;
  }
  // The config.json it started from comes back, keys hoist does not model included.
  const nlohmann::json exported = nlohmann::json::parse(ReadFile(dir + "/hf/config.json"));
  const nlohmann::json original = nlohmann::json::parse(ReadFile(kData + "/fp32/config.json"));
  EXPECT_EQ(exported, original);
  // bf16 and fp16 exports round the same weights.
  options.format = ExportFormat::kHuggingFace;
  options.output = dir + "/hf16";
  options.dtype = DType::kFloat16;
  options.max_shard_bytes = 0;
  ASSERT_TRUE(ExportCheckpoint(options).ok());
  auto half = SafetensorsFile::Open(dir + "/hf16/model.safetensors");
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->Find("transformer.wte.weight")->dtype, "F16");
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir + "/hf16/config.json"))["dtype"], "float16");
}

// A rotary family's fixture (`data`, its fp32/ checkpoint): 20 steps on one rank and on two at
// stage 3 give PyTorch's losses, and the checkpoint exports back to the same config.json and the
// trained weights. Returns the checkpoint's directory.
std::string ExpectTrainsAsPyTorchAndExportsBack(const std::string& data, const std::string& name) {
  const std::vector<RankRun> one = TrainOnRanks(Job(data + "/fp32", 1, {}, data), 1);
  ExpectOk(one);
  ExpectTorchLosses(one[0].losses, name + ", one rank", data);

  const std::string dir = TempDir(name + "_stage3");
  const std::vector<RankRun> two =
      TrainOnRanks(Job(data + "/fp32", 2,
                       {"zero_optimization.stage=3", "checkpoint.dir=\"" + dir + "/ck\"",
                        "checkpoint.interval_steps=20"},
                       data),
                   2);
  ExpectOk(two);
  ExpectTorchLosses(two[0].losses, name + ", two ranks at stage 3", data);
  ExportOptions options;
  options.checkpoint = dir + "/ck";
  options.output = dir + "/hf";
  EXPECT_TRUE(ExportCheckpoint(options).ok());
  auto source = OpenWeightSource(dir + "/hf");
  EXPECT_TRUE(source.ok()) << source.status().ToString();
  if (!source.ok()) return dir;
  std::vector<float> weights(two[0].params.size());
  int64_t at = 0;
  int unit = 0;
  for (const zero::UnitSpec& spec : ModelUnits((*source)->model())) {
    EXPECT_TRUE((*source)->FillUnit(unit++, weights.data() + at).ok());
    at += spec.size;
  }
  EXPECT_EQ(weights, two[0].params);
  EXPECT_EQ(ReadFile(dir + "/hf/config.json"), ReadFile(data + "/fp32/config.json"));
  return dir;
}

// The same for a Llama (grouped-query attention, Llama 3's rotary scaling, an untied head): the
// trainer builds the model of the checkpoint's family, and its checkpoint exports back to the
// same config.json; an llm.c file holds GPT-2s alone.
TEST(TrainerInitFrom, LlamaTrainsAsPyTorchOnOneRankAndOnTwoAtStageThree) {
  const std::string dir = ExpectTrainsAsPyTorchAndExportsBack(kLlama, "llama");
  ExportOptions options;
  options.checkpoint = dir + "/ck";
  options.format = ExportFormat::kLlmc;
  options.output = dir + "/model.bin";
  EXPECT_EQ(ExportCheckpoint(options).status().code(), StatusCode::kInvalidArgument);
}

// Each later rotary family the same way, from its own config.json (Qwen2's biases, Qwen3's
// per-head norms and head_dim, Mistral's window, Gemma 2's caps, norms and local layers).
class TrainerFamilies : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainerFamilies, TrainAsPyTorchOnOneRankAndOnTwoAtStageThree) {
  ExpectTrainsAsPyTorchAndExportsBack(
      std::string(HOIST_SOURCE_DIR) + "/tests/data/" + GetParam() + "_hf", GetParam());
}

INSTANTIATE_TEST_SUITE_P(Rotary, TrainerFamilies,
                         ::testing::Values("qwen2", "qwen3", "mistral", "gemma2"));

TEST(TrainerInitFrom, ModelKeysThatDisagreeWithTheCheckpointAreRefused) {
  const nlohmann::json job = {{"model", {{"init_from", kData + "/fp32"}, {"n_embd", 32}}},
                              {"train_micro_batch_size_per_gpu", 1}};
  StatusOr<Config> config = ParseConfig(job.dump(), {}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("model.n_embd"), std::string::npos)
      << config.status().message();
  EXPECT_NE(config.status().message().find("has 16"), std::string::npos);

  const nlohmann::json long_context = {{"model", {{"init_from", kData + "/fp32"}, {"seq_len", 17}}},
                                       {"train_micro_batch_size_per_gpu", 1}};
  config = ParseConfig(long_context.dump(), {}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("[1, 16]"), std::string::npos)
      << config.status().message();

  const nlohmann::json missing = {{"model", {{"init_from", "/nonexistent/gpt2"}}},
                                  {"train_micro_batch_size_per_gpu", 1}};
  config = ParseConfig(missing.dump(), {}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("model.init_from"), std::string::npos);
  EXPECT_NE(config.status().message().find("/nonexistent/gpt2"), std::string::npos);

  // Agreeing keys are fine, and seq_len below n_positions keeps the positions.
  const nlohmann::json agreeing = {
      {"model", {{"init_from", kData + "/fp32"}, {"n_embd", 16}, {"seq_len", 8}}},
      {"train_micro_batch_size_per_gpu", 1},
      {"train", {{"steps", 1}}},
      {"data", {{"train", kData + "/train.bin"}, {"val", ""}}}};
  config = ParseConfig(agreeing.dump(), {}, 1, "job.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.seq_len, 8);
  EXPECT_EQ(config->model.positions(), 16);
}

// `hoist train -c job.json --set model.init_from=DIR` on a job whose file describes a model of
// its own (as the demo config does): the checkpoint given on the command line sets the model and
// the file's dimensions give way, with a notice naming them, as a --set wins over the file
// everywhere else. A dimension that disagrees and was set on the command line too, or a
// checkpoint named in the file, is still refused.
TEST(TrainerInitFrom, ACheckpointGivenBySetReplacesTheModelOfTheConfigFile) {
  const nlohmann::json file = {
      {"model",
       {{"n_layer", 4}, {"n_head", 4}, {"n_embd", 128}, {"vocab_size", 256}, {"seq_len", 8}}},
      {"train_micro_batch_size_per_gpu", 1},
      {"train", {{"steps", 1}}},
      {"data", {{"train", kData + "/train.bin"}, {"val", ""}}}};
  const std::string init_from = "model.init_from=\"" + kData + "/fp32\"";
  StatusOr<Config> config = ParseConfigQuietly(file.dump(), {init_from}, 1, "job.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.n_layer, 2);
  EXPECT_EQ(config->model.n_embd, 16);
  EXPECT_EQ(config->model.vocab_size, 96);
  EXPECT_EQ(config->model.seq_len, 8) << "the training context stays the job's";
  EXPECT_EQ(config->model.positions(), 16);
  const auto notice =
      std::find_if(config->notices.begin(), config->notices.end(),
                   [](const std::string& n) { return n.find("init_from") != n.npos; });
  ASSERT_NE(notice, config->notices.end());
  for (const char* word : {"job.json", "--set", "model.n_layer 4 (now 2)", "model.n_embd 128",
                           "model.vocab_size 256"}) {
    EXPECT_NE(notice->find(word), std::string::npos) << "'" << word << "' not in: " << *notice;
  }

  // The file's training context, longer than the checkpoint's positions, becomes all of them;
  // one given by --set is still held to them.
  nlohmann::json long_context = file;
  long_context["model"]["seq_len"] = 128;
  config = ParseConfigQuietly(long_context.dump(), {init_from}, 1, "job.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->model.seq_len, 16);
  EXPECT_EQ(config->model.positions(), 16);
  config = ParseConfigQuietly(file.dump(), {init_from, "model.seq_len=17"}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("[1, 16]"), std::string::npos)
      << config.status().message();

  config = ParseConfigQuietly(file.dump(), {init_from, "model.n_embd=32"}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("--set model.n_embd=32"), std::string::npos)
      << config.status().message();
  EXPECT_NE(config.status().message().find("has 16"), std::string::npos);

  nlohmann::json named_in_file = file;
  named_in_file["model"]["init_from"] = kData + "/fp32";
  config = ParseConfigQuietly(named_in_file.dump(), {}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("model.n_layer"), std::string::npos)
      << config.status().message();
}

// model.config and model.init_from together must describe the same model in every setting the
// model is built from, not only its layers and widths.
TEST(TrainerInitFrom, AConfigJsonOfAnotherModelThanTheCheckpointIsRefused) {
  const std::string dir = TempDir("other_config");
  nlohmann::json hf = nlohmann::json::parse(ReadFile(kLlama + "/fp32/config.json"));
  hf["intermediate_size"] = hf["intermediate_size"].get<int>() * 2;
  std::ofstream(dir + "/config.json") << hf.dump(2);
  const nlohmann::json job = {
      {"model", {{"init_from", kLlama + "/fp32"}, {"config", dir + "/config.json"}}},
      {"train_micro_batch_size_per_gpu", 1}};
  StatusOr<Config> config = ParseConfigQuietly(job.dump(), {}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("intermediate_size"), std::string::npos)
      << config.status().message();

  // A setting that disagrees is named with both values as they were written.
  const nlohmann::json eps = {{"model", {{"init_from", kLlama + "/fp32"}, {"rms_norm_eps", 1e-7}}},
                              {"train_micro_batch_size_per_gpu", 1}};
  config = ParseConfigQuietly(eps.dump(), {}, 1, "job.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("model.rms_norm_eps: is 1e-07 but"), std::string::npos)
      << config.status().message();

  // The same config.json is fine.
  const nlohmann::json same = {
      {"model", {{"init_from", kLlama + "/fp32"}, {"config", kLlama + "/fp32/config.json"}}},
      {"train_micro_batch_size_per_gpu", 1},
      {"train", {{"steps", 1}}},
      {"data", {{"train", kLlama + "/train.bin"}, {"val", ""}}}};
  config = ParseConfigQuietly(same.dump(), {}, 1, "job.json");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
}

// A Llama run's checkpoint (Llama 3 rope scaling, rms_norm_eps a float and rope_theta a double
// in the manifest's JSON) resumes on another world size and stage as the same run, and in bf16
// exports and samples as the model that was trained.
TEST(TrainerInitFrom, ALlamaCheckpointResumesExportsAndSamples) {
  const std::string dir = TempDir("llama_resume");
  const std::string ck = "checkpoint.dir=\"" + dir + "/ck\"";
  Config whole = Job(kLlama + "/fp32", 1, {}, kLlama);
  ASSERT_TRUE(whole.model.rope_scaling.llama3) << "the fixture exercises the scaling";
  const std::vector<RankRun> never_stopped = TrainOnRanks(whole, 1);
  ExpectOk(never_stopped);
  const std::vector<float>& want = never_stopped[0].losses;
  const size_t stop = want.size() / 2;
  const std::string every_stop = "checkpoint.interval_steps=" + std::to_string(stop);

  Config first = Job(kLlama + "/fp32", 1, {ck, every_stop}, kLlama);
  first.train.steps = static_cast<int64_t>(stop);
  ExpectOk(TrainOnRanks(first, 1));
  TrainerOptions resume;
  resume.resume_from = dir + "/ck/" + CheckpointStepDirName(static_cast<int64_t>(stop));
  const std::vector<RankRun> second =
      TrainOnRanks(Job(kLlama + "/fp32", 2, {ck, "zero_optimization.stage=3"}, kLlama), 2, resume);
  ExpectOk(second);
  ASSERT_EQ(second[0].losses.size(), want.size() - stop);
  for (size_t i = 0; i < second[0].losses.size(); ++i) {
    EXPECT_NEAR(second[0].losses[i], want[stop + i], 1e-5 * std::abs(want[stop + i]))
        << "step " << stop + i + 1;
  }

  // bf16: export at the run's precision reads back as the trained weights rounded to bf16.
  const std::string bf16_dir = TempDir("llama_bf16");
  const std::vector<RankRun> bf16 =
      TrainOnRanks(Job(kLlama + "/fp32", 2,
                       {"bf16.enabled=true", "zero_optimization.stage=2",
                        "checkpoint.dir=\"" + bf16_dir + "/ck\"", every_stop},
                       kLlama),
                   2);
  ExpectOk(bf16);
  ExportOptions options;
  options.checkpoint = bf16_dir + "/ck";
  options.output = bf16_dir + "/hf";
  options.dtype = DType::kBFloat16;
  ASSERT_TRUE(ExportCheckpoint(options).ok());
  auto source = OpenWeightSource(bf16_dir + "/hf");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const ModelConfig& exported = (*source)->model();
  EXPECT_EQ(exported.rms_norm_eps, whole.model.rms_norm_eps);
  EXPECT_EQ(exported.rope_theta, whole.model.rope_theta);
  EXPECT_EQ(exported.rope_scaling.factor, whole.model.rope_scaling.factor);
  std::vector<float> weights(bf16[0].params.size());
  int64_t at = 0;
  int unit = 0;
  for (const zero::UnitSpec& spec : ModelUnits(exported)) {
    ASSERT_TRUE((*source)->FillUnit(unit++, weights.data() + at).ok());
    at += spec.size;
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    ASSERT_NEAR(weights[i], bf16[0].params[i], std::abs(bf16[0].params[i]) / 256 + 1e-30)
        << "parameter " << i;
  }

  // Sampling greedily from the checkpoint gives what the job's own model computes from the
  // trained weights (the model rebuilt from the manifest, rotary scaling included).
  SampleOptions sample;
  sample.checkpoint = dir + "/ck";
  sample.prompt = "ab";
  sample.max_new_tokens = 6;
  sample.temperature = 0.0f;
  StatusOr<std::vector<int32_t>> sampled = Sample(sample);
  ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();
  CpuDevice device(Place::kDevice);
  auto model = CreateModel(whole.model, 1, whole.model.seq_len, &device);
  ASSERT_TRUE(model.ok());
  std::copy(second[0].params.begin(), second[0].params.end(), (*model)->params());
  std::vector<int32_t> context = {'a', 'b'}, greedy;
  for (int i = 0; i < sample.max_new_tokens; ++i) {
    const int T = std::min<int>(static_cast<int>(context.size()), whole.model.seq_len);
    (*model)->Forward(context.data() + context.size() - T, nullptr, 1, T).value();
    const float* last = (*model)->logits() + int64_t{T - 1} * whole.model.padded_vocab_size();
    const int32_t token =
        static_cast<int32_t>(std::max_element(last, last + whole.model.vocab_size) - last);
    context.push_back(token);
    greedy.push_back(token);
  }
  EXPECT_EQ(*sampled, greedy);
}

// The trainer fills its units from the checkpoint's: a job whose model has other unit sizes
// than the files (here a Llama's MLP width, its layers and widths the same) is refused before a
// unit is filled, rather than filled with the weights of another layout.
TEST(TrainerInitFrom, AModelOfOtherUnitsThanTheCheckpointIsNotFilled) {
  Config job = Job(kLlama + "/fp32", 1, {}, kLlama);
  job.model.intermediate_size *= 2;
  const std::vector<RankRun> runs = TrainOnRanks(job, 1);
  EXPECT_EQ(runs[0].status.code(), StatusCode::kFailedPrecondition) << runs[0].status.ToString();
  EXPECT_NE(runs[0].status.message().find(kLlama + "/fp32"), std::string::npos)
      << runs[0].status.ToString();
}

}  // namespace
}  // namespace hoist::runtime

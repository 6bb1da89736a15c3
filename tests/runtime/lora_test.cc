// LoRA against Hugging Face PEFT (scripts/reference/lora_peft.py wrote tests/data/lora_peft/):
// a tiny GPT-2 and Llama with PEFT's adapters (B random, so every gradient is non-zero) give
// PEFT's logits, loss and adapter gradients, and 20 AdamW steps over the adapters give PEFT's
// losses and adapters, on one rank and on two at every ZeRO stage. The base stays frozen: no
// gradient, no optimizer state, and the engine's gradient and optimizer bytes are the adapters'.
#include "runtime/model/lora.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "config_test_util.h"
#include "core/device.h"
#include "runtime/checkpoint/export.h"
#include "runtime/config/config.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/interchange/peft_adapter.h"
#include "runtime/interchange/safetensors.h"
#include "runtime/model/model.h"
#include "trainer_test_util.h"

namespace hoist::runtime {
namespace {

namespace fs = std::filesystem;
using testing_util::RankRun;
using testing_util::TrainOnRanks;

const std::string kLora = std::string(HOIST_SOURCE_DIR) + "/tests/data/lora_peft";
const std::string kData = std::string(HOIST_SOURCE_DIR) + "/tests/data";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string BaseDir(const std::string& family) { return kData + "/" + family + "_hf"; }

std::vector<float> Tensor(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsTensor* t = file.Find(name);
  HOIST_CHECK(t != nullptr) << name;
  std::vector<float> values(static_cast<size_t>(t->elements()));
  HOIST_CHECK(file.ReadFloat(*t, 0, t->elements(), values.data()).ok());
  return values;
}

std::vector<int32_t> Tokens(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsTensor* t = file.Find(name);
  HOIST_CHECK(t != nullptr && t->dtype == "I32") << name;
  std::vector<int32_t> values(static_cast<size_t>(t->elements()));
  HOIST_CHECK(file.ReadBytes(*t, 0, t->elements() * 4, values.data()).ok());
  return values;
}

// `got` within `rel` of `want`, relative to the largest |want| of the tensor.
void ExpectClose(const float* got, const std::vector<float>& want, double rel,
                 const std::string& what) {
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(double{w}));
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double{got[i]} - want[i]));
  EXPECT_LE(worst, rel * scale) << what << ": worst difference " << worst << " of " << scale;
}

class LoraPeft : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraPeft, LogitsLossAndAdapterGradientsMatchPeft) {
  const std::string family = GetParam();
  const std::string dir = kLora + "/" + family;
  auto reference = SafetensorsFile::Open(dir + "/reference.safetensors");
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto source = OpenWeightSource(BaseDir(family) + "/fp32");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ModelConfig model = (*source)->model();
  auto lora = ReadPeftAdapterConfig(dir + "/adapter");
  ASSERT_TRUE(lora.ok()) << lora.status().ToString();
  model.lora = *lora;
  const std::vector<int32_t> inputs = Tokens(*reference, "input_ids");
  const std::vector<int32_t> targets = Tokens(*reference, "target_ids");
  const SafetensorsTensor* shape = reference->Find("input_ids");
  const int B = static_cast<int>(shape->shape[0]), T = static_cast<int>(shape->shape[1]);
  model.seq_len = T;
  auto layout = LoraLayout::For(model);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();

  CpuDevice device(Place::kDevice);
  auto created = CreateModel(model, B, T, &device);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Model& m = **created;
  ASSERT_NE(m.lora(), nullptr);
  // The base's units, then the adapters (a model's own store holds both).
  int64_t at = 0;
  int unit = 0;
  for (const zero::UnitSpec& spec : ModelUnits(model)) {
    ASSERT_TRUE((*source)->FillUnit(unit++, m.params() + at).ok());
    at += spec.size;
  }
  const int64_t base_total = at;
  std::vector<float> adapters;
  const Status read = ReadPeftAdapters(dir + "/adapter", model.family, *layout, &adapters);
  ASSERT_TRUE(read.ok()) << read.ToString();
  std::copy(adapters.begin(), adapters.end(), m.params() + base_total);

  // Logits and loss.
  m.Forward(inputs.data(), nullptr, B, T).value();
  const std::vector<float> logits = Tensor(*reference, "logits");
  const int V = model.vocab_size, Vp = model.padded_vocab_size();
  std::vector<float> got(logits.size());
  for (int64_t row = 0; row < int64_t{B} * T; ++row) {
    std::copy_n(m.logits() + row * Vp, V, got.begin() + row * V);
  }
  ExpectClose(got.data(), logits, 1e-5, "logits");
  HOIST_CHECK_OK(m.ZeroGradients());
  const float loss = m.Forward(inputs.data(), targets.data(), B, T, 1.0f).value();
  HOIST_CHECK_OK(m.Backward());
  const float want_loss = Tensor(*reference, "loss")[0];
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::abs(want_loss));

  // The adapters' gradients are PEFT's; the frozen base gets none.
  for (int l = 0; l < model.n_layer; ++l) {
    for (size_t mod = 0; mod < layout->modules.size(); ++mod) {
      for (bool b : {false, true}) {
        const std::string name = layout->PeftName(model.family, l, static_cast<int>(mod), b);
        const float* grad = m.grads() + base_total + l * layout->unit_size +
                            (b ? layout->b_offset[mod] : layout->a_offset[mod]);
        ExpectClose(grad, Tensor(*reference, "grad." + name), 1e-5, name);
      }
    }
  }
  EXPECT_TRUE(std::all_of(m.grads(), m.grads() + base_total, [](float g) { return g == 0.0f; }))
      << "the frozen base got a gradient";
}

// Backward draws the dropout masks again and recomputes the adapters' hidden product from the
// layer's input, so a block that recomputes its activations gives the same adapter gradients,
// bit for bit, under every checkpointing policy, with dropout.
TEST_P(LoraPeft, EveryCheckpointingPolicyGivesTheGradientsOfNoneWithDropout) {
  const std::string family = GetParam();
  auto source = OpenWeightSource(BaseDir(family) + "/fp32");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ModelConfig model = (*source)->model();
  auto lora = ReadPeftAdapterConfig(kLora + "/" + family + "/adapter");
  ASSERT_TRUE(lora.ok()) << lora.status().ToString();
  model.lora = *lora;
  model.lora.dropout = 0.25f;
  const int B = 2, T = 8;
  model.seq_len = T;
  auto layout = LoraLayout::For(model);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[static_cast<size_t>(i)] = (7 * i + 3) % model.vocab_size;
    targets[static_cast<size_t>(i)] = (5 * i + 1) % model.vocab_size;
  }
  auto gradients = [&](CheckpointPolicy policy, float* loss) {
    ActivationCheckpointingConfig checkpointing;
    checkpointing.policy = policy;
    checkpointing.every_k = 2;
    CpuDevice device(Place::kDevice);
    auto created = CreateModel(model, B, T, &device, nullptr, DType::kFloat32, checkpointing);
    HOIST_CHECK(created.ok()) << created.status().ToString();
    Model& m = **created;
    int64_t at = 0;
    int unit = 0;
    for (const zero::UnitSpec& spec : ModelUnits(model)) {
      HOIST_CHECK((*source)->FillUnit(unit++, m.params() + at).ok());
      at += spec.size;
    }
    std::vector<float> adapters;
    HOIST_CHECK(
        ReadPeftAdapters(kLora + "/" + family + "/adapter", model.family, *layout, &adapters).ok());
    // PEFT's fixture adapter may hold B = 0; a nonzero B makes dA (and dx through A) nonzero.
    for (size_t i = 0; i < adapters.size(); ++i) adapters[i] += 0.01f * float((i % 7) + 1);
    std::copy(adapters.begin(), adapters.end(), m.params() + at);
    HOIST_CHECK_OK(m.ZeroGradients());
    m.set_lora_seed(1234, 6);
    *loss = m.Forward(inputs.data(), targets.data(), B, T, 1.0f).value();
    HOIST_CHECK_OK(m.Backward());
    return std::vector<float>(m.grads() + at, m.grads() + at + adapters.size());
  };
  float want_loss = 0;
  const std::vector<float> want = gradients(CheckpointPolicy::kNone, &want_loss);
  ASSERT_TRUE(std::any_of(want.begin(), want.end(), [](float g) { return g != 0.0f; }));
  for (CheckpointPolicy policy :
       {CheckpointPolicy::kFull, CheckpointPolicy::kEveryK, CheckpointPolicy::kSelective}) {
    float loss = 0;
    const std::vector<float> got = gradients(policy, &loss);
    EXPECT_EQ(loss, want_loss) << CheckpointPolicyName(policy);
    EXPECT_EQ(got, want) << CheckpointPolicyName(policy);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LoraPeft, ::testing::Values("gpt2", "llama", "qwen2", "gemma2"));

// PEFT's training run (train.json): the base from its Hugging Face directory, the adapters from
// PEFT's, B x T per step split over `world` ranks, AdamW at a constant lr over the adapters.
Config Job(const std::string& family, int world, const std::vector<std::string>& extra = {}) {
  const std::string dir = kLora + "/" + family;
  const nlohmann::json train = nlohmann::json::parse(ReadFile(dir + "/train.json"));
  const int B = train["B"].get<int>();
  nlohmann::json job = {
      {"model", {{"init_from", BaseDir(family) + "/fp32"}, {"seq_len", train["T"]}}},
      {"lora", {{"init_from", dir + "/adapter"}}},
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
      {"data", {{"train", BaseDir(family) + "/train.bin"}, {"val", ""}}},
      {"monitor", {{"jsonl", {{"path", ""}}}}},
      {"comm", {{"timeout_s", 60}}}};
  StatusOr<Config> config = ParseConfig(job.dump(), extra, world, "lora job");
  HOIST_CHECK(config.ok()) << config.status().ToString();
  return *config;
}

// 20 steps of AdamW at lr 1e-2: float rounding stays near 1e-6 relative; a wrong scaling, weight
// decay or orientation moves the losses by 1e-3 and more within a few steps.
void ExpectPeftTraining(const std::string& family, const RankRun& run, const std::string& what) {
  const std::string dir = kLora + "/" + family;
  auto reference = SafetensorsFile::Open(dir + "/reference.safetensors");
  ASSERT_TRUE(reference.ok());
  const std::vector<float> torch = Tensor(*reference, "train_losses");
  ASSERT_EQ(run.losses.size(), torch.size()) << what;
  for (size_t i = 0; i < torch.size(); ++i) {
    EXPECT_NEAR(run.losses[i], torch[i], 1e-4 * std::abs(torch[i])) << what << " step " << i + 1;
  }
  // The trained adapters (the engine's weights are the adapters') are PEFT's.
  Config config = Job(family, 1);
  auto layout = LoraLayout::For(config.model);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(static_cast<int64_t>(run.params.size()), layout->n_layer * layout->unit_size) << what;
  for (int l = 0; l < layout->n_layer; ++l) {
    for (size_t mod = 0; mod < layout->modules.size(); ++mod) {
      for (bool b : {false, true}) {
        const std::string name = layout->PeftName(config.model.family, l, static_cast<int>(mod), b);
        const float* got = run.params.data() + l * layout->unit_size +
                           (b ? layout->b_offset[mod] : layout->a_offset[mod]);
        ExpectClose(got, Tensor(*reference, "final." + name), 1e-4, what + " " + name);
      }
    }
  }
}

TEST_P(LoraPeft, TwentyStepsMatchPeftOnOneRankAndOnTwoAtEveryStage) {
  const std::string family = GetParam();
  for (const auto& [world, stage] :
       {std::pair{1, 0}, std::pair{2, 1}, std::pair{2, 2}, std::pair{2, 3}}) {
    const std::string what = std::to_string(world) + " rank(s), stage " + std::to_string(stage);
    const std::vector<RankRun> runs = TrainOnRanks(
        Job(family, world, {"zero_optimization.stage=" + std::to_string(stage)}), world);
    for (size_t r = 0; r < runs.size(); ++r) {
      ASSERT_TRUE(runs[r].status.ok())
          << what << " rank " << r << ": " << runs[r].status.ToString();
    }
    ExpectPeftTraining(family, runs[0], what);
    // The trained engine holds the adapters alone: their gradients and optimizer states.
    auto layout = LoraLayout::For(Job(family, 1).model);
    ASSERT_TRUE(layout.ok());
    const int64_t adapter_elements = layout->n_layer * layout->unit_size;
    EXPECT_LE(runs[0].states.optimizer, 2 * adapter_elements * 4 + 64) << what;
  }
}

double MaxRelative(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::abs(double(b[i])));
  }
  return worst;
}

// With dropout, each sequence's mask comes from (seed, step, its place in the global batch):
// one rank and two see the same masks, and a run stopped at stage 2 on two ranks, resumed on
// one at stage 0 (the checkpoint holds the adapters; the base comes again from model.init_from),
// continues the uninterrupted trajectory. Float rounding of the reductions differs by world size.
TEST(LoraTraining, DropoutMasksAndResumeDoNotDependOnTheSplit) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_lora_test" / "resume";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<std::string> dropout = {"lora.dropout=0.2", "train.steps=8"};
  auto with = [&](std::vector<std::string> extra, const std::vector<std::string>& more) {
    extra.insert(extra.end(), more.begin(), more.end());
    return extra;
  };
  const std::vector<RankRun> one = TrainOnRanks(Job("gpt2", 1, dropout), 1);
  ASSERT_TRUE(one[0].status.ok()) << one[0].status.ToString();
  const std::vector<RankRun> two =
      TrainOnRanks(Job("gpt2", 2, with(dropout, {"zero_optimization.stage=2"})), 2);
  ASSERT_TRUE(two[0].status.ok()) << two[0].status.ToString();
  EXPECT_LT(MaxRelative(two[0].losses, one[0].losses), 1e-5);
  // Dropout changes the run: the losses are not those without it.
  const std::vector<RankRun> plain = TrainOnRanks(Job("gpt2", 1, {"train.steps=8"}), 1);
  ASSERT_TRUE(plain[0].status.ok());
  EXPECT_GT(MaxRelative(plain[0].losses, one[0].losses), 1e-3);

  const std::string checkpoint = "checkpoint.dir=\"" + (dir / "ck").string() + "\"";
  const std::vector<RankRun> first =
      TrainOnRanks(Job("gpt2", 2,
                       with(dropout, {"zero_optimization.stage=2", "train.steps=4", checkpoint,
                                      "checkpoint.interval_steps=4"})),
                   2);
  ASSERT_TRUE(first[0].status.ok()) << first[0].status.ToString();
  TrainerOptions resume;
  resume.resume = true;
  const std::vector<RankRun> second =
      TrainOnRanks(Job("gpt2", 1, with(dropout, {checkpoint})), 1, resume);
  ASSERT_TRUE(second[0].status.ok()) << second[0].status.ToString();
  ASSERT_EQ(second[0].losses.size(), 4u);
  EXPECT_LT(MaxRelative(second[0].losses,
                        std::vector<float>(one[0].losses.begin() + 4, one[0].losses.end())),
            1e-5);
  // The weights, against the largest weight's size: a tiny weight's relative error says nothing
  // of the trajectory (how far the reductions' rounding moves it depends on the BLAS kernel).
  float largest = 0.0f;
  for (float w : one[0].params) largest = std::max(largest, std::abs(w));
  double worst = 0;
  for (size_t i = 0; i < one[0].params.size(); ++i) {
    worst = std::max(worst, std::abs(double(second[0].params[i]) - one[0].params[i]) / largest);
  }
  EXPECT_LT(worst, 1e-5);
}

// QLoRA's claim at small scale: adapters trained on a 4-bit (NF4) base end within 2% of the
// same adapters trained on the 16-bit base. The base is a GPT-2 first trained on the demo corpus
// (so that it is worth adapting) and exported; both fine-tunes compute in bf16. The 4-bit base
// holds its block matmul weights in about 0.56 bytes each instead of 2.
TEST(LoraTraining, AFourBitBaseTrainsWithinTwoPercentOfTheSixteenBitOne) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_lora_test" / "nf4";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string checkpoint = "checkpoint.dir=\"" + (dir / "base").string() + "\"";
  const std::vector<RankRun> base =
      TrainOnRanks(testing_util::TinyJob(
                       1, 60,
                       {"model.n_layer=3", "model.n_embd=64", "model.n_head=4",
                        "optimizer.params.lr=0.003", checkpoint, "checkpoint.interval_steps=60"}),
                   1);
  ASSERT_TRUE(base[0].status.ok()) << base[0].status.ToString();
  ExportOptions exported;
  exported.checkpoint = (dir / "base").string();
  exported.output = (dir / "hf").string();
  ASSERT_TRUE(ExportCheckpoint(exported).ok());

  auto fine_tune = [&](const std::string& quantization, const std::string& lr = "0.01",
                       bool double_quant = false) {
    // TinyJob's settings without its model dimensions, which come from the base.
    std::vector<std::string> overrides = {"model.init_from=\"" + (dir / "hf").string() + "\"",
                                          "model.seq_len=16",
                                          "train_batch_size=8",
                                          "train_micro_batch_size_per_gpu=2",
                                          "gradient_accumulation_steps=null",
                                          "train.steps=60",
                                          "train.eval_interval=0",
                                          "data.val=\"\"",
                                          "scheduler.params.total_num_steps=60",
                                          "scheduler.params.warmup_num_steps=4",
                                          "monitor.jsonl.path=\"\"",
                                          "steps_per_print=0",
                                          "checkpoint.dir=\"\"",
                                          "checkpoint.interval_steps=0",
                                          "comm.timeout_s=60",
                                          "bf16.enabled=true",
                                          "lora.r=4",
                                          "lora.target_modules=\"all-linear\"",
                                          "lora.base_quantization=\"" + quantization + "\"",
                                          "optimizer.params.lr=" + lr,
                                          "train.seed=7"};
    if (double_quant) overrides.push_back("lora.double_quant=true");
    StatusOr<Config> config = LoadConfig("", overrides, 1);
    HOIST_CHECK(config.ok()) << config.status().ToString();
    return TrainOnRanks(*config, 1)[0];
  };
  const RankRun bf16 = fine_tune("none");
  const RankRun nf4 = fine_tune("nf4");
  ASSERT_TRUE(bf16.status.ok()) << bf16.status.ToString();
  ASSERT_TRUE(nf4.status.ok()) << nf4.status.ToString();
  // The median of 20 steps' losses, the last 20 or the first. One step's batch is noisy, and at
  // this learning rate a run has a spike now and then (a loss of 5.7 against 3.0 on one batch)
  // whose step moves with the last bits of the arithmetic: another CPU's rounding moves one into
  // or out of a 10-step mean by 2%. The median keeps the typical loss, which a worse base raises.
  auto tail = [](const std::vector<float>& losses, bool first = false) {
    constexpr size_t kSteps = 20;
    const size_t begin = first ? 0 : losses.size() - kSteps;
    std::vector<float> window(losses.begin() + begin, losses.begin() + begin + kSteps);
    std::nth_element(window.begin(), window.begin() + kSteps / 2, window.end());
    const float upper = window[kSteps / 2];
    const float lower = *std::max_element(window.begin(), window.begin() + kSteps / 2);
    return (double(lower) + double(upper)) / 2;
  };
  const double want = tail(bf16.losses), got = tail(nf4.losses);
  EXPECT_LT(std::abs(got - want), 0.02 * want) << "nf4 " << got << ", bf16 " << want;
  EXPECT_NE(bf16.losses, nf4.losses) << "the 4-bit base changed nothing";
  // The fine-tune learned: on the same batches, below the base that did not train (lr ~0).
  const RankRun still = fine_tune("none", "1e-12");
  ASSERT_TRUE(still.status.ok()) << still.status.ToString();
  EXPECT_LT(want, tail(still.losses));
  std::printf(
      "last 20 steps' median loss: untrained adapters %.4f, LoRA on the bf16 base %.4f, "
      "on the NF4 base %.4f\n",
      tail(still.losses), want, got);
  // The base's bytes: 2 per weight in bf16; the block matmul weights at 0.5 + 4/64 in NF4.
  const int d = int(Place::kDevice), param = int(Category::kParam);
  EXPECT_LT(nf4.memory.peak[d][param], 0.75 * bf16.memory.peak[d][param])
      << nf4.memory.peak[d][param] << " against " << bf16.memory.peak[d][param];
  RecordProperty("nf4_tail_loss", std::to_string(got));
  RecordProperty("bf16_tail_loss", std::to_string(want));

  // Double quantization (the absmaxes in 8 bits): within 2% of the bf16 base too, on fewer bytes.
  const RankRun dq = fine_tune("nf4", "0.01", /*double_quant=*/true);
  ASSERT_TRUE(dq.status.ok()) << dq.status.ToString();
  const double dq_got = tail(dq.losses);
  EXPECT_LT(std::abs(dq_got - want), 0.02 * want) << "nf4 double quant " << dq_got;
  EXPECT_NE(dq.losses, nf4.losses) << "double quantization changed nothing";
  EXPECT_LT(dq.memory.peak[d][param], nf4.memory.peak[d][param]);
  std::printf(
      "first 20 steps' median loss: bf16 base %.4f, NF4 %.4f, NF4 with 8-bit absmaxes %.4f\n",
      tail(bf16.losses, true), tail(nf4.losses, true), tail(dq.losses, true));
  std::printf("with the absmaxes in 8 bits: %.4f, base params %lld bytes against %lld\n", dq_got,
              static_cast<long long>(dq.memory.peak[d][param]),
              static_cast<long long>(nf4.memory.peak[d][param]));
}

// Every rotary family takes adapters on a 4-bit base: on two ranks at stage 2 (the 4-bit base is
// whole on every rank; stage 3 over it is still to come) the losses are one rank's at stage 0 (to
// the reductions' rounding), and they stay within a few percent of the same adapters on the fp32
// base while differing from them (the base's 4-bit rounding shows).
class LoraFourBitBase : public ::testing::TestWithParam<const char*> {};

TEST_P(LoraFourBitBase, TrainsOnTwoRanksAsOnOneNearTheFullBase) {
  const std::string family = GetParam();
  auto run = [&](int world, int stage, const std::string& quantization) {
    const nlohmann::json job = {
        {"model", {{"init_from", BaseDir(family) + "/fp32"}, {"seq_len", 16}}},
        {"lora",
         {{"r", 4},
          {"lora_alpha", 8},
          {"target_modules", "all-linear"},
          {"base_quantization", quantization}}},
        {"train_micro_batch_size_per_gpu", 2 / world},
        {"gradient_accumulation_steps", 1},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}}}}},
        {"gradient_clipping", 0.0},
        {"zero_optimization", {{"stage", stage}}},
        {"steps_per_print", 0},
        {"train", {{"steps", 8}, {"seed", 3}, {"eval_interval", 0}}},
        {"data", {{"train", BaseDir(family) + "/train.bin"}, {"val", ""}}},
        {"monitor", {{"jsonl", {{"path", ""}}}}},
        {"comm", {{"timeout_s", 60}}}};
    StatusOr<Config> config = ParseConfig(job.dump(), {}, world, "nf4 job");
    HOIST_CHECK(config.ok()) << config.status().ToString();
    const std::vector<RankRun> runs = TrainOnRanks(*config, world);
    for (const RankRun& r : runs)
      EXPECT_TRUE(r.status.ok()) << family << ": " << r.status.ToString();
    return runs[0].losses;
  };
  const std::vector<float> one = run(1, 0, "nf4"), two = run(2, 2, "nf4");
  const std::vector<float> full = run(1, 0, "none");
  ASSERT_EQ(one.size(), 8u);
  ASSERT_EQ(two.size(), one.size());
  ASSERT_EQ(full.size(), one.size());
  EXPECT_NE(one, full) << family << ": the 4-bit base changed nothing";
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(two[i], one[i], 1e-5 * one[i]) << family << " step " << i + 1;
    EXPECT_NEAR(one[i], full[i], 0.05 * full[i]) << family << " step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Rotary, LoraFourBitBase,
                         ::testing::Values("llama", "qwen2", "qwen3", "mistral", "gemma2"));

// A base weight that is not finite stops every rank at once, naming it (the checkpoint's reader
// refuses it before the 4-bit base, which cannot quantize it, would).
TEST(LoraTraining, ANonFiniteWeightOfTheFourBitBaseStopsEveryRankNamingIt) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_lora_test" / "nan_base";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(BaseDir("gpt2") + "/fp32", dir, fs::copy_options::recursive);
  const std::string file = (dir / "model.safetensors").string();
  int64_t at = 0;
  {
    auto opened = SafetensorsFile::Open(file);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    const SafetensorsTensor* t = opened->Find("h.1.mlp.c_fc.weight");
    if (t == nullptr) t = opened->Find("transformer.h.1.mlp.c_fc.weight");
    ASSERT_NE(t, nullptr);
    at = 8 + opened->header_bytes() + t->begin + 4 * 5;
  }
  {
    std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::nanf("");
    out.seekp(at);
    out.write(reinterpret_cast<const char*>(&nan), sizeof(nan));
  }
  const std::vector<RankRun> runs =
      TrainOnRanks(Job("gpt2", 2,
                       {"model.init_from=\"" + dir.string() + "\"",
                        "lora.base_quantization=\"nf4\"", "zero_optimization.stage=1"}),
                   2);
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status.code(), StatusCode::kInvalidArgument) << run.status.ToString();
    EXPECT_NE(run.status.message().find("h.1.mlp.c_fc.weight\" holds nan"), std::string::npos)
        << run.status.ToString();
  }
}

TEST(LoraConfig, TargetsAreCheckedAgainstTheModelsLayers) {
  auto parse = [](const nlohmann::json& lora, const std::string& type = "gpt2") {
    nlohmann::json job = {{"model",
                           {{"model_type", type},
                            {"n_layer", 2},
                            {"n_head", 2},
                            {"n_embd", 8},
                            {"vocab_size", 64},
                            {"seq_len", 8}}},
                          {"lora", lora},
                          {"train_batch_size", 1},
                          {"train", {{"steps", 1}}},
                          {"data", {{"train", "builtin:demo"}}}};
    if (type == "llama") job["model"]["intermediate_size"] = 12;
    return ParseConfig(job.dump(), {}, 1, "job.json");
  };
  auto ok = parse({{"r", 4}, {"target_modules", {"c_attn", "c_proj"}}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto layout = LoraLayout::For(ok->model);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->modules.size(), 3u);  // c_attn, attn.c_proj, mlp.c_proj
  EXPECT_EQ(layout->modules[1].site, LoraModule::kGpt2AttnProj);
  EXPECT_EQ(layout->modules[2].site, LoraModule::kGpt2MlpProj);
  EXPECT_FLOAT_EQ(layout->scaling, 2.0f);  // alpha 8 (PEFT's default) over r 4
  for (const char* key : {"double_quant", "bnb_4bit_use_double_quant"}) {
    auto dq = parse({{"base_quantization", "nf4"}, {key, true}});
    ASSERT_TRUE(dq.ok()) << dq.status().ToString();
    EXPECT_TRUE(dq->model.lora.nf4_base && dq->model.lora.nf4_double_quant) << key;
  }
  auto defaults = parse(nlohmann::json::object(), "llama");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_EQ(defaults->model.lora.r, 8);
  EXPECT_EQ(defaults->model.lora.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  for (const auto& [lora, words] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"target_modules", {"q_proj"}}}, "matches no layer"},
           {{{"target_modules", {"lm_head"}}}, "outside the transformer blocks"},
           {{{"target_modules", {"transformer.h.0.attn.c_attn"}}}, "1 of 2 blocks"},
           {{{"target_modules", "c_.*"}}, "regular expression"},
           {{{"r", 0}}, "lora.r"},
           {{{"dropout", 1.0}}, "lora.dropout"},
           {{{"bias", "all"}}, "lora.bias"},
           {{{"alpha", 4}, {"lora_alpha", 4}}, "same setting"},
           // Finite as a double but infinite as the fp32 scale: it used to be accepted.
           {{{"lora_alpha", 1e39}}, "lora.lora_alpha: must be in (0, 1000000.0], found 1e+39"},
           {{{"double_quant", true}}, "needs base_quantization"},
           {{{"base_quantization", "nf4"},
             {"double_quant", true},
             {"bnb_4bit_use_double_quant", true}},
            "same setting"},
           {{{"rank", 4}}, "lora.rank"}}) {
    auto refused = parse(lora);
    ASSERT_FALSE(refused.ok()) << lora.dump();
    EXPECT_NE(refused.status().message().find(words), std::string::npos)
        << lora.dump() << ": " << refused.status().ToString();
  }
}

TEST(LoraConfig, AnAdapterDirectoryFillsTheSettingsAndAKeyThatDisagreesIsRefused) {
  auto parse = [](const nlohmann::json& lora) {
    nlohmann::json job = {{"model", {{"init_from", kData + "/llama_hf/fp32"}, {"seq_len", 16}}},
                          {"lora", lora},
                          {"train_batch_size", 1},
                          {"train", {{"steps", 1}}},
                          {"data", {{"train", "builtin:demo"}}}};
    return ParseConfig(job.dump(), {}, 1, "job.json");
  };
  auto filled = parse({{"init_from", kLora + "/llama/adapter"}});
  ASSERT_TRUE(filled.ok()) << filled.status().ToString();
  EXPECT_EQ(filled->model.lora.r, 2);
  EXPECT_EQ(filled->model.lora.alpha, 6.0);
  EXPECT_EQ(filled->model.lora.target_modules.size(), 5u);
  auto refused = parse({{"init_from", kLora + "/llama/adapter"}, {"r", 4}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("disagrees"), std::string::npos)
      << refused.status().ToString();
  auto missing = parse({{"init_from", kLora + "/nothing-here"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("adapter_config.json"), std::string::npos)
      << missing.status().ToString();
}

// The adapter's own settings are checked as the job's keys are: a lora_dropout of 1 would scale
// by 1/(1 - p), an alpha of 0 trains nothing, and an r out of range makes a checkpoint that export
// and resume cannot read back.
// An adapter file with a NaN in it is refused, naming the tensor and the element.
TEST(LoraConfig, AnAdapterFileWithANonFiniteValueIsRefusedNamingIt) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_lora_test" / "nan_adapter";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(kLora + "/gpt2/adapter", dir, fs::copy_options::recursive);
  auto source = OpenWeightSource(BaseDir("gpt2") + "/fp32");
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ModelConfig model = (*source)->model();
  auto lora = ReadPeftAdapterConfig(dir.string());
  ASSERT_TRUE(lora.ok()) << lora.status().ToString();
  model.lora = *lora;
  auto layout = LoraLayout::For(model);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const std::string file = (dir / "adapter_model.safetensors").string();
  std::string name;
  int64_t at = 0;
  {
    auto opened = SafetensorsFile::Open(file);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    const SafetensorsTensor& tensor = opened->tensors().back();
    ASSERT_EQ(tensor.dtype, "F32");
    name = tensor.name;
    at = 8 + opened->header_bytes() + tensor.begin + 3 * int64_t{sizeof(float)};
  }
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = NAN;
    f.seekp(at);
    f.write(reinterpret_cast<const char*>(&nan), sizeof(nan));
  }
  std::vector<float> adapters;
  const Status read = ReadPeftAdapters(dir.string(), model.family, *layout, &adapters);
  ASSERT_EQ(read.code(), StatusCode::kInvalidArgument) << read.ToString();
  EXPECT_NE(read.message().find(name + " element 3 is nan"), std::string::npos) << read.ToString();
}

TEST(LoraConfig, AnAdapterConfigWithSettingsOutOfRangeIsRefused) {
  const fs::path dir = fs::path(::testing::TempDir()) / "hoist_lora_test" / "bad_adapter";
  std::ifstream in(kLora + "/llama/adapter/adapter_config.json");
  const nlohmann::json good = nlohmann::json::parse(in);
  for (const auto& [key, value] :
       {std::pair{"lora_dropout", nlohmann::json(1.0)},
        std::pair{"lora_dropout", nlohmann::json(-0.5)}, std::pair{"lora_alpha", nlohmann::json(0)},
        std::pair{"lora_alpha", nlohmann::json(-6)}, std::pair{"lora_alpha", nlohmann::json(1e39)},
        std::pair{"r", nlohmann::json(0)}, std::pair{"r", nlohmann::json(100000)},
        std::pair{"r", nlohmann::json(2.5)}}) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    nlohmann::json bad = good;
    bad[key] = value;
    std::ofstream(dir / "adapter_config.json") << bad.dump();
    StatusOr<LoraConfig> read = ReadPeftAdapterConfig(dir.string());
    ASSERT_FALSE(read.ok()) << key << " " << value.dump();
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(read.status().message().find(key), std::string::npos) << read.status().ToString();
  }
}

}  // namespace
}  // namespace hoist::runtime

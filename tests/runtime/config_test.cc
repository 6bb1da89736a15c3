#include "runtime/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/config/config_reader.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::Parse;
using testing_util::ParseOk;

// ---- unknown keys ----

TEST(ConfigKeys, UnknownTopLevelKeySuggestsClosest) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpus": 4, "train": {"steps": 1}})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("job.json: train_micro_batch_size_per_gpus: unknown key"),
                    HasSubstr("did you mean \"train_micro_batch_size_per_gpu\"?")));
}

TEST(ConfigKeys, UnknownNestedKeyNamesFullPathAndSuggestion) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "train": {"steps": 1},
                         "optimizer": {"type": "AdamW", "params": {"lrr": 1e-3}}})");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("optimizer.params.lrr: unknown key"),
                                 HasSubstr("did you mean \"optimizer.params.lr\"?")));
}

// A key with a stray space used to get "did you mean gradient_accumulation_steps?", which
// looks like the key itself: both are quoted, and the difference is named.
TEST(ConfigKeys, AKeyThatDiffersOnlyInWhitespaceSaysSo) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps ": 2,
                         "data": {"train": "t.bin"}, "train": {"steps": 1}})");
  EXPECT_THAT(s.message(),
              HasSubstr("unknown key \"gradient_accumulation_steps \"; did you mean "
                        "\"gradient_accumulation_steps\"? (the two differ only in whitespace)"));
  Status tab = ErrorOf(kMinimal, {"train.\tsteps=1"});
  EXPECT_THAT(tab.message(), HasSubstr("(the two differ only in whitespace)"));
  Status upper = ErrorOf(kMinimal, {"train.Steps=1"});
  EXPECT_THAT(upper.message(), HasSubstr("unknown key \"Steps\"; did you mean \"train.steps\"? "
                                         "(keys are case-sensitive)"));
}

TEST(ConfigKeys, TransposedLettersStillGetASuggestion) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
                         "train": {"stpes": 1}})");
  EXPECT_THAT(s.message(), HasSubstr("did you mean \"train.steps\"?"));
}

TEST(ConfigKeys, UnknownKeyFarFromAnyListsTheValidKeys) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "train": {"steps": 1},
                         "model": {"architecture": "gpt2"}})");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("model.architecture: unknown key"),
                                 HasSubstr("n_layer n_head n_embd vocab_size seq_len")));
}

TEST(ConfigKeys, EditDistanceCountsTranspositionOnceAndIgnoresCase) {
  EXPECT_EQ(config_internal::EditDistance("steps", "stpes"), 1u);
  EXPECT_EQ(config_internal::EditDistance("WarmupLR", "warmuplr"), 0u);
  EXPECT_EQ(config_internal::EditDistance("", "abc"), 3u);
}

TEST(ConfigKeys, ClosestMatchRefusesUnrelatedWords) {
  EXPECT_EQ(config_internal::ClosestMatch("x", {"lr", "eps"}), "");
  EXPECT_EQ(config_internal::ClosestMatch("n_layers", {"n_layer", "n_head"}), "n_layer");
}

// ---- types ----

TEST(ConfigTypes, WrongTypeNamesPathExpectedAndFound) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "train": {"steps": 1},
                         "model": {"n_layer": "4"}})");
  EXPECT_THAT(s.message(), HasSubstr("model.n_layer: expected an integer, found a string (\"4\")"));
}

// A float key is kept as fp32: beyond its range is refused, and so is a non-zero value below its
// normal range, which used to be read as 0 ("lr must be > 0, found 0" for 1e-300).
TEST(ConfigTypes, FloatKeysMustBeNormalFp32Numbers) {
  EXPECT_THAT(ErrorOf(kMinimal, {"optimizer.params.lr=1e-300"}).message(),
              HasSubstr("optimizer.params.lr: 1e-300 is below the smallest normal float"));
  EXPECT_THAT(ErrorOf(kMinimal, {"gradient_clipping=1e-40"}).message(),
              HasSubstr("gradient_clipping: 1e-40 is below the smallest normal float"));
  EXPECT_THAT(ErrorOf(kMinimal, {"gradient_clipping=1e39"}).message(),
              HasSubstr("gradient_clipping: 1e+39 does not fit in a float"));
  EXPECT_FLOAT_EQ(ParseOk(kMinimal, {"gradient_clipping=0"}).gradient_clipping, 0.0f);
}

TEST(ConfigTypes, SectionThatIsNotAnObjectIsAWrongType) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "train": {"steps": 1},
                         "optimizer": 5})");
  EXPECT_THAT(s.message(), HasSubstr("optimizer: expected an object, found a number (5)"));
}

TEST(ConfigTypes, BetaElementOfWrongTypeNamesItsIndex) {
  Status s = ErrorOf(kMinimal, {"optimizer.params.betas=[0.9, true]"});
  EXPECT_THAT(s.message(),
              HasSubstr("optimizer.params.betas[1]: expected a number, found a boolean (true)"));
}

TEST(ConfigTypes, BetasNeedExactlyTwoNumbers) {
  Status s = ErrorOf(kMinimal, {"optimizer.params.betas=[0.9]"});
  EXPECT_THAT(s.message(), HasSubstr("optimizer.params.betas: expected an array of two numbers"));
}

TEST(ConfigTypes, StringKeyRefusesNumber) {
  Status s = ErrorOf(kMinimal, {"data.train=5"});
  EXPECT_THAT(s.message(), HasSubstr("data.train: expected a string, found a number (5)"));
}

TEST(ConfigTypes, IntegerKeyAcceptsExponentAndDecimalSpellings) {
  Config c = ParseOk(R"({"train_micro_batch_size_per_gpu": 8.0, "train": {"steps": 5e2},
                         "model": {"seq_len": 1024.0}, "data": {"train": "t.bin"}})");
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.train.steps, 500);
  EXPECT_EQ(c.model.seq_len, 1024);
}

TEST(ConfigTypes, IntegerKeyRefusesFractionWithPath) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 0.5, "train": {"steps": 1}})");
  EXPECT_THAT(s.message(),
              HasSubstr("train_micro_batch_size_per_gpu: expected an integer, found 0.5"));
  s = ErrorOf(kMinimal, {"model.n_layer=5.5e-1"});
  EXPECT_THAT(s.message(), HasSubstr("model.n_layer: expected an integer"));
}

TEST(ConfigTypes, IntegerOutOfRangeForItsFieldIsRefused) {
  Status s = ErrorOf(kMinimal, {"model.n_layer=3e9"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("model.n_layer"), HasSubstr("out of range")));
}

TEST(ConfigTypes, SeedTakesTheWholeUint64Range) {
  Config c = ParseOk(kMinimal, {"train.seed=18446744073709551615"});
  EXPECT_EQ(c.train.seed, 18446744073709551615ull);
  Status s = ErrorOf(kMinimal, {"train.seed=-1"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("train.seed"), HasSubstr("out of range")));
}

TEST(ConfigTypes, NullMeansTheDefault) {
  Config c = ParseOk(R"({"train_micro_batch_size_per_gpu": 4, "train": {"steps": 1},
                         "data": {"train": "t.bin"},
                         "gradient_clipping": null, "train_batch_size": null})");
  EXPECT_FLOAT_EQ(c.gradient_clipping, 1.0f);
  EXPECT_EQ(c.train_batch_size, 4);
}

// ---- "auto" ----

TEST(ConfigAuto, AutoBatchSizeSaysThereIsNoTrainer) {
  Status s = ErrorOf(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4,
                         "train": {"steps": 1}})");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("train_batch_size: \"auto\""),
                                 HasSubstr("Hugging Face Trainer"), HasSubstr("no Trainer")));
}

TEST(ConfigAuto, AutoIsRefusedInsideSectionsAndArrays) {
  EXPECT_THAT(ErrorOf(kMinimal, {"optimizer.params.lr=auto"}).message(),
              HasSubstr("optimizer.params.lr: \"auto\""));
  EXPECT_THAT(ErrorOf(kMinimal, {"optimizer.params.betas=\"auto\""}).message(),
              HasSubstr("optimizer.params.betas: \"auto\""));
  EXPECT_THAT(ErrorOf(kMinimal, {"fp16.enabled=auto"}).message(),
              HasSubstr("fp16.enabled: \"auto\""));
}

// ---- DeepSpeed sections hoist does not act on ----

TEST(ConfigDeepSpeed, DisabledPrecisionSectionsAreAccepted) {
  Config c = ParseOk(kMinimal, {"fp16={\"enabled\": false, \"loss_scale\": 0}", "bf16={}"});
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigDeepSpeed, ZeroStageZeroIsAccepted) {
  ParseOk(kMinimal, {"zero_optimization={\"stage\": 0, \"reduce_bucket_size\": 5e8}"});
}

TEST(ConfigDeepSpeed, OffloadIsRead) {
  // The offload keys and their rules: config_offload_test.cc.
  Config c = ParseOk(
      kMinimal, {"zero_optimization.stage=2", "zero_optimization.offload_optimizer.device=cpu"});
  EXPECT_EQ(c.zero.offload_optimizer.device, Placement::kHost);
}

TEST(ConfigDeepSpeed, ActivationCheckpointingIsRead) {
  // The section's keys and their rules: config_checkpointing_test.cc.
  Config c = ParseOk(kMinimal, {"activation_checkpointing.partition_activations=false"});
  EXPECT_EQ(c.activation_checkpointing.policy, CheckpointPolicy::kFull);
}

TEST(ConfigDeepSpeed, MisspeltDeepSpeedKeyGetsSuggestion) {
  Status s = ErrorOf(kMinimal, {"zero_optimisation.stage=0"});
  EXPECT_THAT(s.message(), HasSubstr("did you mean \"zero_optimization\"?"));
}

// ---- overrides ----

TEST(ConfigOverride, SetsANumber) {
  Config c = ParseOk(kMinimal, {"optimizer.params.lr=3e-4", "model.n_layer=2"});
  EXPECT_FLOAT_EQ(c.optimizer.lr, 3e-4f);
  EXPECT_EQ(c.model.n_layer, 2);
}

TEST(ConfigOverride, CreatesMissingNestedObjects) {
  Config c = ParseOk(kMinimal, {"monitor.jsonl.path=/tmp/run.jsonl"});
  EXPECT_EQ(c.monitor.jsonl_path, "/tmp/run.jsonl");
  EXPECT_EQ((*c.raw)["monitor"]["jsonl"]["path"], "/tmp/run.jsonl");
}

TEST(ConfigOverride, ValueThatIsNotJsonIsAString) {
  Config c = ParseOk(kMinimal, {"data.train=/x/*.bin"});
  EXPECT_EQ(c.data.train, "/x/*.bin");
}

TEST(ConfigData, ShuffleIsUnsetUnlessGivenAndMustBeABool) {
  EXPECT_FALSE(ParseOk(kMinimal).data.shuffle.has_value());
  EXPECT_EQ(ParseOk(kMinimal, {"data.shuffle=false"}).data.shuffle, std::optional<bool>(false));
  EXPECT_EQ(ParseOk(kMinimal, {"data.shuffle=true"}).data.shuffle, std::optional<bool>(true));
  Status s = ErrorOf(kMinimal, {"data.shuffle=3"});
  EXPECT_THAT(s.message(), HasSubstr("data.shuffle"));
  s = ErrorOf(kMinimal, {"data.shufle=true"});
  EXPECT_THAT(s.message(), HasSubstr("shuffle"));
}

TEST(ConfigTrain, EpochsOrStepsNotBoth) {
  Config c = ParseOk(kMinimal, {"train.steps=0", "train.epochs=2"});
  EXPECT_EQ(c.train.epochs, 2);
  EXPECT_EQ(c.train.steps, 0);  // the trainer sets it from the data
  Status s = ErrorOf(kMinimal, {"train.steps=5", "train.epochs=2"});
  EXPECT_THAT(s.message(), HasSubstr("train.epochs"));
  EXPECT_THAT(s.message(), HasSubstr("give one of them"));
  s = ErrorOf(kMinimal, {"train.epochs=-1"});
  EXPECT_THAT(s.message(), HasSubstr("train.epochs"));
}

TEST(ConfigOverride, SetsAnArray) {
  Config c = ParseOk(kMinimal, {"optimizer.params.betas=[0.9,0.95]"});
  EXPECT_FLOAT_EQ(c.optimizer.beta1, 0.9f);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.95f);
}

TEST(ConfigOverride, LaterOverrideWins) {
  Config c = ParseOk(kMinimal, {"train.steps=5", "train.steps=7"});
  EXPECT_EQ(c.train.steps, 7);
}

TEST(ConfigOverride, EmptyValueIsAnEmptyString) {
  Config c = ParseOk(kMinimal, {"monitor.jsonl.path=/a", "monitor.jsonl.path="});
  EXPECT_EQ(c.monitor.jsonl_path, "");
}

TEST(ConfigOverride, MisspeltKeyIsAttributedToTheOverrideWithSuggestion) {
  Status s = ErrorOf(kMinimal, {"optimizer.params.lrr=3e-4"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("--set optimizer.params.lrr=3e-4"),
                                 HasSubstr("did you mean \"optimizer.params.lr\"?")));
}

TEST(ConfigOverride, MisspeltSectionIsAttributedToTheOverride) {
  Status s = ErrorOf(kMinimal, {"optimiser.params.lr=3e-4"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("--set optimiser.params.lr=3e-4: optimiser"),
                                 HasSubstr("did you mean \"optimizer\"?")));
}

TEST(ConfigOverride, BadValueIsValidatedLikeTheFile) {
  Status s = ErrorOf(kMinimal, {"optimizer.params.lr=-1"});
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("--set optimizer.params.lr=-1"), HasSubstr("must be > 0")));
}

TEST(ConfigOverride, WithoutEqualsSignIsAnErrorNamingIt) {
  Status s = ErrorOf(kMinimal, {"model.n_layer"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("\"model.n_layer\""), HasSubstr("no '='")));
}

TEST(ConfigOverride, EmptyKeySegmentIsAnError) {
  Status s = ErrorOf(kMinimal, {"model..n_layer=2"});
  EXPECT_THAT(s.message(), HasSubstr("empty key"));
}

TEST(ConfigOverride, PathThroughANonObjectIsAnError) {
  Status s = ErrorOf(kMinimal, {"train.steps.x=1"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("train.steps is a number"), HasSubstr("not an object")));
}

TEST(ConfigOverride, RawHoldsTheEffectiveJson) {
  Config c = ParseOk(kMinimal, {"train.seed=7"});
  EXPECT_EQ((*c.raw)["train"]["seed"], 7);
  EXPECT_EQ((*c.raw)["train"]["steps"], 10);
}

// ---- defaults ----

TEST(ConfigDefaults, UnsetKeysTakeDocumentedDefaults) {
  // The defaults that decide the training are each noticed (config_optimizer_test.cc).
  Config c = ParseOk(R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
                         "train": {"steps": 10}})");
  EXPECT_FLOAT_EQ(c.gradient_clipping, 1.0f);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_FLOAT_EQ(c.optimizer.lr, 1e-3f);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.999f);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.0f);
  EXPECT_EQ(c.scheduler.type, "");
  EXPECT_EQ(c.model.n_layer, 12);
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.data.train, "t.bin");
  EXPECT_EQ(c.data.val, "");
  EXPECT_EQ(c.train.seed, 1337u);
  EXPECT_EQ(c.train.eval_interval, 0);
  EXPECT_EQ(c.train.eval_steps, 10);
  EXPECT_EQ(c.checkpoint.dir, "");
  EXPECT_EQ(c.checkpoint.keep_last, 0);
  EXPECT_EQ(c.monitor.jsonl_path, "");
  EXPECT_EQ(c.notices.size(), 2u);
}

TEST(ConfigDefaults, WeightDecayDefaultIsDeepSpeedsZeroNotTorchs) {
  EXPECT_EQ(ParseOk(kMinimal, {"optimizer.type=Adam"}).optimizer.weight_decay, 0.0f);
  EXPECT_FLOAT_EQ(ParseOk(kMinimal, {"optimizer.params.weight_decay=0.1"}).optimizer.weight_decay,
                  0.1f);
}

TEST(ConfigDefaults, MissingDataSectionIsAnErrorNotTheDemoCorpus) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "train": {"steps": 10}})");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("job.json: data.train: must be set to a token shard path or glob (or "
                        "\"builtin:demo\" for the embedded corpus)"));
  EXPECT_THAT(ErrorOf(kMinimal, {"data.train=null"}).message(),
              HasSubstr("data.train: must be set"));
  EXPECT_THAT(ErrorOf(kMinimal, {"data={\"val\": \"v.bin\"}"}).message(),
              HasSubstr("data.train: must be set"));
}

TEST(ConfigDefaults, BuiltinDemoCorpusMustBeAskedForByName) {
  Config c = ParseOk(kMinimal, {"data.train=builtin:demo"});
  EXPECT_EQ(c.data.train, "builtin:demo");
  EXPECT_EQ(c.data.val, "");
}

TEST(ConfigDefaults, ValidationDataIsOptionalWithoutEvaluation) {
  EXPECT_EQ(ParseOk(kMinimal, {"data.val=\"\""}).data.val, "");
  EXPECT_EQ(ParseOk(kMinimal, {"data.val=v.bin", "train.eval_interval=5"}).data.val, "v.bin");
}

TEST(ConfigDefaults, EvaluationWithoutValidationDataNamesBothKeys) {
  Status s = ErrorOf(kMinimal, {"train.eval_interval=50"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("train.eval_interval: is 50 but data.val is not set"),
                                 HasSubstr("or set train.eval_interval to 0")));
  EXPECT_THAT(ErrorOf(kMinimal, {"train.eval_interval=50", "data.val="}).message(),
              HasSubstr("data.val is not set"));
}

TEST(ConfigDefaults, KeepLastIsRead) {
  Config c = ParseOk(kMinimal, {"checkpoint.dir=ckpt", "checkpoint.keep_last=3"});
  EXPECT_EQ(c.checkpoint.keep_last, 3);
  EXPECT_EQ(ParseOk(kMinimal, {"checkpoint.keep_last=0"}).checkpoint.keep_last, 0);
}

TEST(ConfigDefaults, StepsPerPrintNullOrZeroDisablesPrinting) {
  EXPECT_EQ(ParseOk(kMinimal, {"steps_per_print=null"}).steps_per_print, 0);
  EXPECT_EQ(ParseOk(kMinimal, {"steps_per_print=0"}).steps_per_print, 0);
}

TEST(ConfigDefaults, PaddedVocabRoundsUpToMultipleOf128) {
  ModelConfig m;
  EXPECT_EQ(m.padded_vocab_size(), 50304);
  m.vocab_size = 256;
  EXPECT_EQ(m.padded_vocab_size(), 256);
  m.vocab_size = 257;
  EXPECT_EQ(m.padded_vocab_size(), 384);
}

TEST(ConfigDefaults, ZeroStepsTakeSchedulerTotal) {
  Config c = ParseOk(R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
      "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 300}}})",
                     {"scheduler.params.warmup_num_steps=10"});
  EXPECT_EQ(c.train.steps, 300);
}

TEST(ConfigDefaults, ZeroStepsWithoutSchedulerTotalIsAnError) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"}})");
  EXPECT_THAT(s.message(), HasSubstr("train.steps: must be set"));
}

// ---- optimizer and scheduler ----

TEST(ConfigOptimizer, TypeMatchesCaseInsensitivelyAndIsStoredCanonical) {
  EXPECT_EQ(ParseOk(kMinimal, {"optimizer.type=adamw"}).optimizer.type, "AdamW");
  EXPECT_EQ(ParseOk(kMinimal, {"optimizer.type=ADAM"}).optimizer.type, "Adam");
}

TEST(ConfigOptimizer, OtherDeepSpeedOptimizerIsUnimplemented) {
  Status s = ErrorOf(kMinimal, {"optimizer.type=Lamb"});
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("optimizer.type"));
}

TEST(ConfigOptimizer, UnknownTypeSuggestsClosest) {
  Status s = ErrorOf(kMinimal, {"optimizer.type=AdamWW"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("did you mean \"AdamW\"?"));
}

TEST(ConfigOptimizer, MaxGradNormPointsToGradientClipping) {
  Status s = ErrorOf(kMinimal, {"optimizer.params.max_grad_norm=1.0"});
  EXPECT_THAT(s.message(), HasSubstr("gradient_clipping"));
}

TEST(ConfigOptimizer, ClassicAdamWithL2IsUnimplemented) {
  EXPECT_EQ(ErrorOf(kMinimal, {"optimizer.params.adam_w_mode=false"}).code(),
            StatusCode::kUnimplemented);
  ParseOk(kMinimal, {"optimizer.params.adam_w_mode=true"});
}

TEST(ConfigScheduler, WarmupLrReadsItsParams) {
  Config c =
      ParseOk(kMinimal, {R"(scheduler={"type": "warmuplr", "params": {"warmup_min_lr": 0.0001,
                                   "warmup_max_lr": 0.01, "warmup_num_steps": 20,
                                   "warmup_type": "linear"}})"});
  EXPECT_EQ(c.scheduler.type, "WarmupLR");
  EXPECT_FLOAT_EQ(c.scheduler.warmup_min_lr, 1e-4f);
  ASSERT_TRUE(c.scheduler.warmup_max_lr.has_value());
  EXPECT_FLOAT_EQ(*c.scheduler.warmup_max_lr, 0.01f);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 20);
  EXPECT_EQ(c.scheduler.warmup_type, "linear");
}

TEST(ConfigScheduler, WarmupMaxLrStaysUnsetWhenAbsent) {
  Config c = ParseOk(kMinimal, {"scheduler.type=WarmupLR"});
  EXPECT_FALSE(c.scheduler.warmup_max_lr.has_value());
  EXPECT_EQ(c.scheduler.warmup_num_steps, 1000);
  EXPECT_EQ(c.scheduler.warmup_type, "log");
}

TEST(ConfigScheduler, CosineKeyUnderWarmupLrIsUnknown) {
  Status s = ErrorOf(kMinimal, {"scheduler.type=WarmupLR", "scheduler.params.cos_min_ratio=0.1"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("scheduler.params.cos_min_ratio: unknown key"),
                                 HasSubstr("the params of scheduler type WarmupLR")));
}

TEST(ConfigScheduler, TotalStepsUnderWarmupLrIsUnknown) {
  Status s = ErrorOf(kMinimal, {"scheduler.type=WarmupLR", "scheduler.params.total_num_steps=9"});
  EXPECT_THAT(s.message(), HasSubstr("scheduler.params.total_num_steps: unknown key"));
}

TEST(ConfigScheduler, WarmupLrKeyUnderCosineIsUnknown) {
  Status s =
      ErrorOf(kMinimal, {"scheduler.type=WarmupCosineLR", "scheduler.params.total_num_steps=2000",
                         "scheduler.params.warmup_max_lr=0.1"});
  EXPECT_THAT(s.message(), HasSubstr("scheduler.params.warmup_max_lr: unknown key"));
}

TEST(ConfigScheduler, DecayNeedsTotalSteps) {
  Status s = ErrorOf(kMinimal, {"scheduler.type=WarmupDecayLR"});
  EXPECT_THAT(s.message(), HasSubstr("scheduler.params.total_num_steps: must be set"));
}

TEST(ConfigScheduler, TotalStepsMustExceedWarmup) {
  Status s =
      ErrorOf(kMinimal, {"scheduler.type=WarmupCosineLR", "scheduler.params.total_num_steps=100",
                         "scheduler.params.warmup_num_steps=100"});
  EXPECT_THAT(s.message(), HasSubstr("scheduler.params.total_num_steps: must be >"));
}

TEST(ConfigScheduler, MissingTypeIsAnError) {
  Status s = ErrorOf(kMinimal, {"scheduler.params.warmup_num_steps=10"});
  EXPECT_THAT(s.message(), HasSubstr("scheduler.type: missing"));
}

TEST(ConfigScheduler, OneCycleIsUnimplementedAndTyposGetSuggestions) {
  EXPECT_EQ(ErrorOf(kMinimal, {"scheduler.type=OneCycle"}).code(), StatusCode::kUnimplemented);
  EXPECT_THAT(ErrorOf(kMinimal, {"scheduler.type=WarmupCosinLR"}).message(),
              HasSubstr("did you mean \"WarmupCosineLR\"?"));
}

// ---- value validation: each case is one override that must fail naming its key ----

struct BadValue {
  const char* name;
  const char* override_text;
  const char* expected;  // a substring of the message: the key path and the rule
};

class ConfigValidation : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigValidation, RefusesValueNamingKey) {
  Status s = ErrorOf(kMinimal, {GetParam().override_text});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Values, ConfigValidation,
    ::testing::Values(
        BadValue{"ZeroLr", "optimizer.params.lr=0", "optimizer.params.lr: must be > 0"},
        BadValue{"BetaOfOne", "optimizer.params.betas=[0.9,1.0]",
                 "optimizer.params.betas[1]: must be in [0, 1)"},
        BadValue{"NegativeBeta", "optimizer.params.betas=[-0.1,0.9]",
                 "optimizer.params.betas[0]: must be in [0, 1)"},
        BadValue{"ZeroEps", "optimizer.params.eps=0", "optimizer.params.eps: must be > 0"},
        BadValue{"NegativeWeightDecay", "optimizer.params.weight_decay=-0.1",
                 "optimizer.params.weight_decay: must be >= 0"},
        BadValue{"NegativeClipping", "gradient_clipping=-1", "gradient_clipping: must be >= 0"},
        BadValue{"NegativeStepsPerPrint", "steps_per_print=-5", "steps_per_print: must be >= 0"},
        BadValue{"EmbdNotDivisibleByHeads", "model.n_embd=100",
                 "model.n_embd: must be divisible by model.n_head"},
        BadValue{"ZeroLayers", "model.n_layer=0", "model.n_layer: must be > 0"},
        BadValue{"ZeroSeqLen", "model.seq_len=0", "model.seq_len: must be > 0"},
        BadValue{"VocabBeyondInt32Ids", "model.vocab_size=1073741825",
                 "model.vocab_size: must be <= 2^30"},
        BadValue{"UnknownWarmupType",
                 "scheduler={\"type\":\"WarmupLR\",\"params\":"
                 "{\"warmup_type\":\"cosine\"}}",
                 "scheduler.params.warmup_type: must be \"log\" or \"linear\""},
        BadValue{"NegativeWarmupSteps",
                 "scheduler={\"type\":\"WarmupLR\",\"params\":"
                 "{\"warmup_num_steps\":-1}}",
                 "scheduler.params.warmup_num_steps: must be >= 0"},
        BadValue{"MaxLrBelowMinLr",
                 "scheduler={\"type\":\"WarmupLR\",\"params\":"
                 "{\"warmup_min_lr\":0.1,\"warmup_max_lr\":0.01}}",
                 "scheduler.params.warmup_max_lr: must be >= "},
        BadValue{"CosMinRatioAboveOne",
                 "scheduler={\"type\":\"WarmupCosineLR\",\"params\":"
                 "{\"total_num_steps\":2000,\"cos_min_ratio\":1.5}}",
                 "scheduler.params.cos_min_ratio: must be in [0, 1]"},
        BadValue{"NegativeTrainSteps", "train.steps=-1", "train.steps: must be >= 0"},
        BadValue{"NegativeEvalInterval", "train.eval_interval=-1",
                 "train.eval_interval: must be >= 0"},
        BadValue{"ZeroEvalSteps", "train.eval_steps=0", "train.eval_steps: must be > 0"},
        BadValue{"EmptyTrainData", "data.train=\"\"",
                 "data.train: must be set to a token shard path or glob (or \"builtin:demo\" "
                 "for the embedded corpus)"},
        BadValue{"NegativeKeepLast", "checkpoint.keep_last=-1",
                 "checkpoint.keep_last: must be in [0, 2147483647]"},
        BadValue{"KeepLastBeyondInt", "checkpoint.keep_last=2147483648",
                 "checkpoint.keep_last: must be in [0, 2147483647]"},
        BadValue{"CheckpointIntervalWithoutDir", "checkpoint.interval_steps=100",
                 "checkpoint.interval_steps: is 100 but checkpoint.dir is empty"},
        BadValue{"UnknownMonitorKey", "monitor.jsonl.paht=x",
                 "monitor.jsonl.paht: unknown key \"paht\"; did you mean \"monitor.jsonl.path\"?"}),
    [](const ::testing::TestParamInfo<BadValue>& info) { return info.param.name; });

// ---- loading ----

TEST(ConfigLoad, EmbeddedDemoConfigLoadsWithItsValues) {
  StatusOr<Config> loaded = LoadConfig("", {}, 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Config& c = *loaded;
  EXPECT_EQ(c.model.n_layer, 4);
  EXPECT_EQ(c.model.n_head, 4);
  EXPECT_EQ(c.model.n_embd, 128);
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.model.seq_len, 128);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.train_batch_size, 8);
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_FLOAT_EQ(c.optimizer.lr, 2e-3f);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.95f);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.1f);
  EXPECT_EQ(c.scheduler.type, "WarmupCosineLR");
  EXPECT_EQ(c.scheduler.total_num_steps, 600);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 50);
  EXPECT_EQ(c.scheduler.warmup_type, "linear");
  EXPECT_FLOAT_EQ(c.scheduler.cos_min_ratio, 0.1f);
  EXPECT_EQ(c.steps_per_print, 25);
  EXPECT_EQ(c.train.steps, 600);
  EXPECT_EQ(c.train.eval_interval, 100);
  EXPECT_EQ(c.train.eval_steps, 8);
  EXPECT_EQ(c.data.train, "builtin:demo");
  EXPECT_EQ(c.monitor.jsonl_path, "hoist_demo.jsonl");
  EXPECT_EQ(c.checkpoint.dir, "checkpoints/demo");
  EXPECT_EQ(c.checkpoint.interval_steps, 200);
  EXPECT_TRUE(c.notices.empty());
}

TEST(ConfigLoad, DemoConfigTakesOverridesAndWorldSize) {
  StatusOr<Config> loaded = LoadConfig("", {"model.n_layer=2"}, 4);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->model.n_layer, 2);
  EXPECT_EQ(loaded->train_batch_size, 32);
}

TEST(ConfigLoad, DemoFileInTheSourceTreeLoads) {
  StatusOr<Config> loaded = LoadConfig(HOIST_SOURCE_DIR "/examples/demo.json", {}, 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->train.steps, 600);
}

TEST(ConfigLoad, ErrorsNameTheFilePath) {
  const std::string path = ::testing::TempDir() + "/hoist_config_test_bad.json";
  {
    std::ofstream out(path);
    out << R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
               "train": {"step": 1}})";
  }
  StatusOr<Config> loaded = LoadConfig(path, {}, 1);
  std::remove(path.c_str());
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(),
              AllOf(HasSubstr(path + ": train.step: unknown key"), HasSubstr("train.steps")));
}

TEST(ConfigLoad, MissingFileIsNotFoundNamingThePath) {
  StatusOr<Config> loaded = LoadConfig("/nonexistent/hoist/job.json", {}, 1);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(loaded.status().message(), HasSubstr("/nonexistent/hoist/job.json"));
}

}  // namespace
}  // namespace hoist::runtime

namespace hoist::runtime {
namespace {

TEST(ConfigModel, AttentionKindDefaultsToDirectAndAcceptsTiled) {
  EXPECT_EQ(ParseOk(kMinimal).model.attention, AttentionKind::kDirect);
  EXPECT_EQ(ParseOk(kMinimal, {"model.attention=tiled"}).model.attention, AttentionKind::kTiled);
  EXPECT_EQ(ParseOk(kMinimal, {"model.attention=Direct"}).model.attention, AttentionKind::kDirect);
  const Status bad = ErrorOf(kMinimal, {"model.attention=flash"});
  EXPECT_NE(bad.message().find("model.attention"), std::string::npos) << bad.ToString();
  EXPECT_NE(bad.message().find("\"tiled\""), std::string::npos) << bad.ToString();
  const Status wrong_type = ErrorOf(kMinimal, {"model.attention=3"});
  EXPECT_NE(wrong_type.message().find("model.attention"), std::string::npos)
      << wrong_type.ToString();
}

// A model too large for the layouts' int64 counts is a config error naming the model section,
// not a wrapped-around parameter count for the trainer and the estimator.
TEST(ConfigModel, AModelTooLargeToAddressIsRefused) {
  // Each dimension within its bound (runtime/model/model_limits.h), their product beyond 2^50.
  const Status huge =
      ErrorOf(kMinimal, {"model.model_type=llama", "model.n_layer=4096", "model.n_embd=131072",
                         "model.n_head=1", "model.intermediate_size=1048576"});
  EXPECT_NE(huge.message().find("model"), std::string::npos) << huge.ToString();
  EXPECT_NE(huge.message().find("parameters"), std::string::npos) << huge.ToString();
  EXPECT_TRUE(ParseOk(kMinimal, {"model.n_layer=96", "model.n_embd=12288", "model.n_head=96"})
                  .model.n_layer == 96)
      << "GPT-3's size is fine";
}

}  // namespace
}  // namespace hoist::runtime

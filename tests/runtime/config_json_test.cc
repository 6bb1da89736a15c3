// The config's JSON: what DeepSpeed's hjson loader accepts and real configs use (comments,
// trailing commas), errors with the line and column of the original text, duplicate keys, and
// the nesting limit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/config/config_reader.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::ParseOk;

TEST(ConfigJson, CommentsOfEveryKindAreAccepted) {
  Config c = ParseOk(R"(// A DeepSpeed config as its examples write them.
{
  /* the batch,
     over two lines */
  "train_micro_batch_size_per_gpu": 4,  // per rank
  # hjson's own comment
  "data": {"train": "t.bin"},
  "train": {"steps": 10},
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-4 /* inline */}},
  "checkpoint": {"dir": "/tmp/x//y#z"}
})");
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_FLOAT_EQ(c.optimizer.lr, 3e-4f);
  // Comment markers inside strings are text.
  EXPECT_EQ(c.checkpoint.dir, "/tmp/x//y#z");
}

TEST(ConfigJson, TrailingCommasAreAccepted) {
  Config c = ParseOk(R"({
  "train_micro_batch_size_per_gpu": 4,
  "data": {"train": "t.bin",},
  "optimizer": {"params": {"betas": [0.8, 0.9,], "lr": 1e-3, // last
  },},
  "train": {"steps": 10}, /* a comment between the comma and the brace */
})");
  EXPECT_FLOAT_EQ(c.optimizer.beta1, 0.8f);
  EXPECT_FLOAT_EQ(c.optimizer.beta2, 0.9f);
}

TEST(ConfigJson, ACommaWithNothingBeforeItIsStillAnError) {
  for (const char* text : {R"({"a": [,]})", R"({,})", R"({"a": [1,,]})"}) {
    Status s = ErrorOf(text);
    EXPECT_THAT(s.message(), HasSubstr("not valid JSON at line 1")) << text;
  }
}

TEST(ConfigJson, ErrorsNameTheLineAndColumnOfTheOriginalText) {
  // The comments before the error are blanked, not removed, so the position is the file's.
  Status s = ErrorOf(
      "{ /* one */\n  \"train_micro_batch_size_per_gpu\": 4, // two\n  # three\n  \"train\" 1\n}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("job.json: not valid JSON at line 4, column 11"),
                                 HasSubstr("keys and strings must be quoted")));
}

TEST(ConfigJson, AnUnclosedCommentNamesWhereItOpens) {
  Status s = ErrorOf("{\n  \"train\": {\"steps\": 1} /* never closed\n}");
  EXPECT_THAT(s.message(), HasSubstr("job.json: the comment opened at line 2, column 25 is never "
                                     "closed with */"));
}

TEST(ConfigJson, DuplicateKeyIsRefusedWithItsPath) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 4, "train": {"steps": 1},
                         "optimizer": {"params": {"lr": 1e-3, "lr": 2e-3}}})");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("optimizer.params.lr"), HasSubstr("twice")));
}

TEST(ConfigJson, DuplicateKeyInsideArrayElementNamesIndex) {
  auto result = config_internal::ParseConfigJson(R"({"a": [1, {"b": 1, "b": 2}]})", "x.json");
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("a[1].b"));
}

TEST(ConfigJson, NumberBeyondDoubleIsRefused) {
  Status s = ErrorOf(R"({"train_micro_batch_size_per_gpu": 1e400})");
  EXPECT_THAT(s.message(), AllOf(HasSubstr("job.json: not valid JSON"), HasSubstr("1e400")));
}

TEST(ConfigJson, TopLevelMustBeAnObject) {
  Status s = ErrorOf("[1, 2]");
  EXPECT_THAT(s.message(), HasSubstr("must be a JSON object"));
}

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A value nested 100,000 deep was accepted, then overflowed the stack of the checkpoint writer.
TEST(ConfigJson, NestingBeyondTheLimitIsRefusedWhereItHappens) {
  const std::string deep = "{\"wall_clock_breakdown\": " + Nested(100000) + "}";
  Status s = ErrorOf(deep);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("job.json: at line 1, column " +
                                           std::to_string(25 + config_internal::kMaxNestingDepth)),
                                 HasSubstr("nest more than 64 levels deep")));
  // Brackets inside strings do not count.
  EXPECT_TRUE(
      config_internal::ParseConfigJson("{\"a\": \"" + std::string(1000, '[') + "\"}", "x").ok());
  // The limit itself is fine (the top-level object is one level).
  EXPECT_TRUE(config_internal::ParseConfigJson(
                  "{\"a\": " + Nested(config_internal::kMaxNestingDepth - 1) + "}", "x")
                  .ok());
}

TEST(ConfigJson, OverrideValuesHaveTheSameLimit) {
  Status s = ErrorOf(kMinimal, {"wall_clock_breakdown=" + Nested(100000)});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("override \"wall_clock_breakdown=[[[["),
                                 HasSubstr("nest more than 64 levels deep")));
}

TEST(ConfigJson, OverrideValuesReadAsTheFileDoes) {
  Config c = ParseOk(kMinimal, {"optimizer.params={\"lr\": 2e-4, /* warm */ \"eps\": 1e-6,}"});
  EXPECT_FLOAT_EQ(c.optimizer.lr, 2e-4f);
  EXPECT_FLOAT_EQ(c.optimizer.eps, 1e-6f);
  // Text that is not JSON stays the text, '#' and '//' included.
  c = ParseOk(kMinimal, {"data.train=shards/#1//train.bin"});
  EXPECT_EQ(c.data.train, "shards/#1//train.bin");
}

}  // namespace
}  // namespace hoist::runtime

// hoist's `metrics` section: the Prometheus endpoint of every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "tests/runtime/config_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing_util::ErrorOf;
using testing_util::kMinimal;
using testing_util::ParseOk;

TEST(ConfigMetrics, DefaultsAreOffOnLoopbackPort9400) {
  const MetricsConfig m = ParseOk(kMinimal).metrics;
  EXPECT_FALSE(m.enabled);
  EXPECT_EQ(m.bind, "127.0.0.1");
  EXPECT_EQ(m.port, 9400);
  // An empty section and nulls are the same.
  const MetricsConfig empty = ParseOk(kMinimal, {"metrics={}"}).metrics;
  EXPECT_FALSE(empty.enabled);
  EXPECT_EQ(empty.bind, "127.0.0.1");
  EXPECT_EQ(empty.port, 9400);
  const MetricsConfig nulls =
      ParseOk(kMinimal, {"metrics.enabled=null", "metrics.bind=null", "metrics.port=null"}).metrics;
  EXPECT_FALSE(nulls.enabled);
  EXPECT_EQ(nulls.bind, "127.0.0.1");
  EXPECT_EQ(nulls.port, 9400);
}

TEST(ConfigMetrics, ReadsEveryKey) {
  const MetricsConfig m =
      ParseOk(kMinimal, {"metrics.enabled=true", "metrics.bind=0.0.0.0", "metrics.port=9500"})
          .metrics;
  EXPECT_TRUE(m.enabled);
  EXPECT_EQ(m.bind, "0.0.0.0");
  EXPECT_EQ(m.port, 9500);
  const std::string file =
      R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
          "train": {"steps": 10},
          "metrics": {"enabled": true, "bind": "::1", "port": 0}})";
  const MetricsConfig v6 = ParseOk(file).metrics;
  EXPECT_TRUE(v6.enabled);
  EXPECT_EQ(v6.bind, "::1");
  EXPECT_EQ(v6.port, 0);
}

TEST(ConfigMetrics, PortBoundsAreInclusive) {
  EXPECT_EQ(ParseOk(kMinimal, {"metrics.port=0"}).metrics.port, 0);
  EXPECT_EQ(ParseOk(kMinimal, {"metrics.port=65535"}).metrics.port, 65535);
}

TEST(ConfigMetrics, PortOutOfRangeIsRefused) {
  for (const char* port : {"-1", "65536", "4294967296"}) {
    Status s = ErrorOf(kMinimal, {std::string("metrics.port=") + port});
    EXPECT_THAT(s.message(), HasSubstr("metrics.port")) << port;
  }
  EXPECT_THAT(ErrorOf(kMinimal, {"metrics.port=65536"}).message(),
              AllOf(HasSubstr("[0, 65535]"), HasSubstr("65536")));
}

TEST(ConfigMetrics, WrongTypesNameTheKey) {
  EXPECT_THAT(ErrorOf(kMinimal, {"metrics.enabled=\"yes\""}).message(),
              HasSubstr("metrics.enabled"));
  EXPECT_THAT(ErrorOf(kMinimal, {"metrics.port=9400.5"}).message(), HasSubstr("metrics.port"));
  EXPECT_THAT(ErrorOf(kMinimal, {"metrics.port=\"9400\""}).message(), HasSubstr("metrics.port"));
  EXPECT_THAT(ErrorOf(kMinimal, {"metrics.bind=127"}).message(), HasSubstr("metrics.bind"));
  EXPECT_THAT(ErrorOf(kMinimal, {"metrics=true"}).message(), HasSubstr("metrics"));
}

TEST(ConfigMetrics, UnknownKeySuggestsTheClosest) {
  Status s = ErrorOf(kMinimal, {"metrics.prot=9400"});
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("metrics.prot"), HasSubstr("did you mean \"metrics.port\"")));
  EXPECT_THAT(ErrorOf(kMinimal, {"metric.enabled=true"}).message(), HasSubstr("metrics"));
}

TEST(ConfigMetrics, BindMustBeAnAddressLiteral) {
  Status s = ErrorOf(kMinimal, {"metrics.bind=localhost"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("metrics.bind"), HasSubstr("\"localhost\""),
                                 HasSubstr("did you mean \"127.0.0.1\"")));
  for (const char* bind : {"", "example.com", "127.0.0.1:9400", "[::1]", "300.1.1.1"}) {
    EXPECT_THAT(ErrorOf(kMinimal, {std::string("metrics.bind=\"") + bind + "\""}).message(),
                HasSubstr("IPv4 or IPv6 address"))
        << bind;
  }
}

}  // namespace
}  // namespace hoist::runtime

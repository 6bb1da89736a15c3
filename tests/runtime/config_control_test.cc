// hoist's `control` section: the gRPC job-control service of rank 0, and the rules that keep it
// from being exposed without TLS.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
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

TEST(ConfigControl, DefaultsAreOffOnLoopbackPort7070) {
  const ControlConfig c = ParseOk(kMinimal).control;
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.bind, "127.0.0.1");
  EXPECT_EQ(c.port, 7070);
  EXPECT_EQ(c.tls.cert, "");
  EXPECT_EQ(c.tls.key, "");
  EXPECT_EQ(c.tls.client_ca, "");
  EXPECT_EQ(c.token_file, "");
  EXPECT_TRUE(c.loopback());
  const ControlConfig nulls =
      ParseOk(kMinimal, {"control.enabled=null", "control.bind=null", "control.tls=null"}).control;
  EXPECT_FALSE(nulls.enabled);
  EXPECT_EQ(nulls.bind, "127.0.0.1");
  EXPECT_EQ(ControlConfig{}.bind, "127.0.0.1");
}

TEST(ConfigControl, ReadsEveryKey) {
  const std::string file =
      R"({"train_micro_batch_size_per_gpu": 4, "data": {"train": "t.bin"},
          "train": {"steps": 10},
          "control": {"enabled": true, "bind": "0.0.0.0", "port": 0, "token_file": "tok",
                      "tls": {"cert": "c.pem", "key": "k.pem", "client_ca": "ca.pem"}}})";
  const ControlConfig c = ParseOk(file).control;
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.bind, "0.0.0.0");
  EXPECT_EQ(c.port, 0);
  EXPECT_EQ(c.token_file, "tok");
  EXPECT_EQ(c.tls.cert, "c.pem");
  EXPECT_EQ(c.tls.key, "k.pem");
  EXPECT_EQ(c.tls.client_ca, "ca.pem");
  EXPECT_FALSE(c.loopback());
}

TEST(ConfigControl, LoopbackIsAll127AndIpv6One) {
  for (const char* bind : {"127.0.0.1", "127.1.2.3", "::1"}) {
    EXPECT_TRUE(
        ParseOk(kMinimal, {std::string("control.bind=\"") + bind + "\""}).control.loopback())
        << bind;
  }
  for (const char* bind : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "::2", "192.168.1.1"}) {
    EXPECT_FALSE(
        ParseOk(kMinimal, {std::string("control.bind=\"") + bind + "\""}).control.loopback())
        << bind;
  }
}

TEST(ConfigControl, PortOutOfRangeIsRefused) {
  EXPECT_EQ(ParseOk(kMinimal, {"control.port=65535"}).control.port, 65535);
  for (const char* port : {"-1", "65536"}) {
    EXPECT_THAT(ErrorOf(kMinimal, {std::string("control.port=") + port}).message(),
                AllOf(HasSubstr("control.port"), HasSubstr("[0, 65535]")))
        << port;
  }
}

TEST(ConfigControl, UnknownKeysSuggestTheClosest) {
  EXPECT_THAT(ErrorOf(kMinimal, {"control.prot=1"}).message(),
              AllOf(HasSubstr("control.prot"), HasSubstr("did you mean \"control.port\"")));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.tls.cret=a"}).message(),
              AllOf(HasSubstr("control.tls.cret"), HasSubstr("did you mean \"control.tls.cert\"")));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.tokn_file=t"}).message(),
              HasSubstr("did you mean \"control.token_file\""));
  EXPECT_THAT(ErrorOf(kMinimal, {"contrl.enabled=true"}).message(),
              HasSubstr("did you mean \"control\""));
}

TEST(ConfigControl, WrongTypesNameTheKey) {
  EXPECT_THAT(ErrorOf(kMinimal, {"control.enabled=\"yes\""}).message(),
              HasSubstr("control.enabled"));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.port=\"7070\""}).message(), HasSubstr("control.port"));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.tls=true"}).message(), HasSubstr("control.tls"));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.tls.key=1"}).message(), HasSubstr("control.tls.key"));
}

// A token in the config would be saved in checkpoints and shown by `ps` when given with --set;
// the refusal says where it belongs and does not repeat it.
TEST(ConfigControl, TokenIsNeverAConfigValue) {
  Status s = ErrorOf(kMinimal, {"control.token=s3cret-value"});
  EXPECT_THAT(s.message(), AllOf(HasSubstr("control.token"), HasSubstr("control.token_file"),
                                 HasSubstr("HOIST_CONTROL_TOKEN")));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("s3cret-value")));
}

TEST(ConfigControl, BindMustBeAnAddressLiteral) {
  EXPECT_THAT(ErrorOf(kMinimal, {"control.bind=localhost"}).message(),
              AllOf(HasSubstr("control.bind"), HasSubstr("did you mean \"127.0.0.1\"")));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.bind=example.com"}).message(),
              HasSubstr("IPv4 or IPv6 address"));
}

TEST(ConfigControl, CertAndKeyComeTogether) {
  EXPECT_THAT(ErrorOf(kMinimal, {"control.tls.cert=c.pem"}).message(),
              AllOf(HasSubstr("control.tls.key"), HasSubstr("both")));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.tls.key=k.pem"}).message(),
              AllOf(HasSubstr("control.tls.cert"), HasSubstr("both")));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.tls.client_ca=ca.pem"}).message(),
              AllOf(HasSubstr("control.tls.client_ca"), HasSubstr("control.tls.cert")));
}

TEST(ConfigControl, EnabledOnAnExposedAddressNeedsTls) {
  Status s = ErrorOf(kMinimal, {"control.enabled=true", "control.bind=0.0.0.0"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("control.bind"), HasSubstr("control.tls.cert"),
                                 HasSubstr("control.tls.key"), HasSubstr("control.token_file"),
                                 HasSubstr("HOIST_CONTROL_TOKEN")));
  EXPECT_THAT(ErrorOf(kMinimal, {"control.enabled=true", "control.bind=::"}).message(),
              HasSubstr("control.tls.cert"));
  // With TLS the config is accepted; the token is the server's to check when it starts.
  const ControlConfig c = ParseOk(kMinimal, {"control.enabled=true", "control.bind=0.0.0.0",
                                             "control.tls.cert=c.pem", "control.tls.key=k.pem"})
                              .control;
  EXPECT_EQ(c.bind, "0.0.0.0");
  // A disabled service exposes nothing.
  EXPECT_EQ(ParseOk(kMinimal, {"control.bind=0.0.0.0"}).control.bind, "0.0.0.0");
}

TEST(ConfigControl, ATokenIsRequiredOnLoopbackUnlessTurnedOff) {
  EXPECT_TRUE(ParseOk(kMinimal).control.require_token);
  EXPECT_TRUE(ControlConfig{}.require_token);
  const ControlConfig off =
      ParseOk(kMinimal, {"control.enabled=true", "control.require_token=false"}).control;
  EXPECT_FALSE(off.require_token);
  EXPECT_THAT(ErrorOf(kMinimal, {"control.require_token=\"no\""}).message(),
              HasSubstr("control.require_token"));
}

TEST(ConfigControl, RequireTokenOffIsRefusedWithATokenFileOrAnExposedBind) {
  EXPECT_THAT(
      ErrorOf(kMinimal, {"control.require_token=false", "control.token_file=tok"}).message(),
      AllOf(HasSubstr("control.require_token"), HasSubstr("control.token_file")));
  EXPECT_THAT(
      ErrorOf(kMinimal, {"control.enabled=true", "control.bind=0.0.0.0", "control.tls.cert=c.pem",
                         "control.tls.key=k.pem", "control.require_token=false"})
          .message(),
      AllOf(HasSubstr("control.require_token"), HasSubstr("0.0.0.0"),
            HasSubstr("always required")));
}

// `hoist ctl -c job.json` reads the control section and checkpoint.dir of a job's config even
// when the rest would resolve only for the job's world size.
TEST(ConfigControl, AClientReadsTheControlSettingsOfAnyJobsConfig) {
  const std::string path = ::testing::TempDir() + "/hoist_config_control_client.json";
  {
    std::ofstream out(path);
    out << R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
               "gradient_accumulation_steps": 1, "data": {"train": "t.bin"},
               // a comment, as DeepSpeed's loader allows
               "checkpoint": {"dir": "runs/a"},
               "control": {"enabled": true, "port": 7171, "require_token": false}})";
  }
  StatusOr<ControlClientSettings> settings = LoadControlClientSettings(path);
  ASSERT_TRUE(settings.ok()) << settings.status().ToString();
  EXPECT_EQ(settings->checkpoint_dir, "runs/a");
  EXPECT_EQ(settings->control.port, 7171);
  EXPECT_EQ(settings->control.bind, "127.0.0.1");
  EXPECT_FALSE(settings->control.require_token);
  StatusOr<ControlClientSettings> demo = LoadControlClientSettings("");
  ASSERT_TRUE(demo.ok()) << demo.status().ToString();
  EXPECT_EQ(demo->control.port, 7070);
  EXPECT_EQ(demo->checkpoint_dir, "checkpoints/demo");
  {
    std::ofstream out(path);
    out << R"({"control": {"prot": 1}})";
  }
  EXPECT_THAT(LoadControlClientSettings(path).status().message(),
              AllOf(HasSubstr(path), HasSubstr("did you mean \"control.port\"")));
}

}  // namespace
}  // namespace hoist::runtime

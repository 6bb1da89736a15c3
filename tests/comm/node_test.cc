#include "comm/node.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/comm/comm_test_util.h"

namespace hoist::comm {
namespace {

using testing::ExpectAllOk;
using testing::MakeGroup;
using testing::RunRanks;

constexpr double kTimeoutS = 5.0;

std::vector<Status> Refuse(const std::vector<std::string>& names) {
  auto group = MakeGroup(static_cast<int>(names.size()), kTimeoutS);
  return RunRanks(*group, [&](int rank, Communicator& comm) {
    return RefuseSharedResource(comm, names[rank], "the GPU");
  });
}

TEST(RefuseSharedResource, DistinctNamesPass) {
  ExpectAllOk(Refuse({"0000:3b:00.0 on a", "0000:5e:00.0 on a", "0000:3b:00.0 on b"}));
}

TEST(RefuseSharedResource, RanksUsingNothingNeverClash) {
  ExpectAllOk(Refuse({"", "", "0000:3b:00.0 on a", ""}));
}

TEST(RefuseSharedResource, TheRanksSharingANameAreRefusedNamingEachOther) {
  const std::vector<Status> results =
      Refuse({"0000:3b:00.0 on a", "0000:5e:00.0 on a", "0000:3b:00.0 on a"});
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
  ASSERT_EQ(results[0].code(), StatusCode::kUnavailable);
  EXPECT_EQ(results[0].message(), "rank 0 and rank 2 would both use the GPU 0000:3b:00.0 on a");
  ASSERT_EQ(results[2].code(), StatusCode::kUnavailable);
  EXPECT_NE(results[2].message().find("rank 2 and rank 0"), std::string::npos)
      << results[2].message();
}

TEST(RefuseSharedResource, NamesAreComparedOnTheirFirst255Bytes) {
  const std::string long_name(300, 'x');
  // Differing only past byte 255: taken as the same.
  const std::vector<Status> results = Refuse({long_name + "a", long_name + "b"});
  EXPECT_EQ(results[0].code(), StatusCode::kUnavailable);
  EXPECT_EQ(results[1].code(), StatusCode::kUnavailable);
  // Differing at byte 254: told apart.
  std::string near = std::string(254, 'x') + "y";
  ExpectAllOk(Refuse({std::string(255, 'x'), near}));
}

TEST(RefuseSharedResource, OneRankHasNothingToShare) { ExpectAllOk(Refuse({"0000:3b:00.0 on a"})); }

}  // namespace
}  // namespace hoist::comm

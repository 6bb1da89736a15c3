// The devices ranks train on as their libraries register them (runtime/train/device_registry.h) and
// the facts of their backends (kernels/device_facts.h): the CPU registered as any device is, a
// name the binary lacks refused naming what it has, the choice agreed by every rank (a rank that
// cannot open the device stops all of them; ranks sharing one are told so on each), and auto
// taking the most preferred device every rank can use alone. This binary links no CUDA library:
// "cuda" is a device it knows the facts of but cannot train on, as in a build without CUDA.
#include "runtime/train/device_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/registry.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda/workspace.h"
#include "kernels/device_facts.h"
#include "runtime/train/cpu_accelerator.h"

namespace hoist::runtime {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// A device of the test's, registered for its scope.
class ScopedDevice {
 public:
  explicit ScopedDevice(AcceleratorDevice device) : name_(device.name) {
    EXPECT_TRUE(RegisterAcceleratorDevice(std::move(device))) << name_;
  }
  ~ScopedDevice() { Registry<AcceleratorDevice>::Global().Remove(name_); }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  std::string name_;
};

// What a test device's factory was asked for, by rank.
struct Uses {
  std::mutex mu;
  std::vector<DeviceUse> seen;
};

// A test device that opens on the ranks `can_open` allows, naming its device `identity(rank)`,
// and records the uses its factory is asked for.
AcceleratorDevice TestDevice(const std::string& name, const std::string& noun, int preference,
                             std::function<bool(int)> can_open,
                             std::function<std::string(int)> identity, std::shared_ptr<Uses> uses) {
  AcceleratorDevice device;
  device.name = name;
  device.kind = DeviceKind::kCuda;
  device.noun = noun;
  device.preference = preference;
  device.probe = [name, can_open](int local_rank) {
    return can_open(local_rank)
               ? Status::Ok()
               : UnavailableError(name + " is not on rank " + std::to_string(local_rank));
  };
  device.identity = std::move(identity);
  device.factory = [uses](const DeviceUse& use, std::ostream*) {
    std::lock_guard<std::mutex> lock(uses->mu);
    uses->seen.push_back(use);
    return CpuAccelerator();
  };
  return device;
}

struct RankChoice {
  StatusOr<ChosenDevice> chosen = InternalError("not run");
  std::string said;  // on `out` (rank 0 only)
};

// ChooseDevice(name) on `world` ranks in threads, local rank = rank.
std::vector<RankChoice> ChooseOnRanks(int world, const std::string& name) {
  StatusOr<std::unique_ptr<comm::ThreadGroup>> group = comm::ThreadGroup::Create(world, 30);
  EXPECT_TRUE(group.ok()) << group.status().ToString();
  std::vector<RankChoice> choices(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::ostringstream out;
      RankChoice& mine = choices[static_cast<size_t>(r)];
      mine.chosen = ChooseDevice(name, r, (*group)->comm(r), r == 0 ? &out : nullptr);
      mine.said = out.str();
    });
  }
  for (std::thread& t : threads) t.join();
  return choices;
}

TEST(DeviceRegistry, TheCpuRegistersItselfAsEveryDeviceDoes) {
  const AcceleratorDevice* cpu = FindAcceleratorDevice("cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->kind, DeviceKind::kCpu);
  EXPECT_FALSE(cpu->probe) << "every rank has a CPU";
  EXPECT_THAT(AcceleratorDeviceNames(), Contains("cpu"));
  const kernels::DeviceFacts* facts = kernels::FindDeviceFacts("cpu");
  ASSERT_NE(facts, nullptr);
  EXPECT_TRUE(facts->computes_in_host_memory);
  EXPECT_EQ(&kernels::DeviceFactsOf(DeviceKind::kCpu), facts);
}

TEST(DeviceRegistry, EveryDeviceHasFactsOfItsNameAndKind) {
  for (const std::string& name : AcceleratorDeviceNames()) {
    SCOPED_TRACE(name);
    const kernels::DeviceFacts* facts = kernels::FindDeviceFacts(name);
    ASSERT_NE(facts, nullptr);
    EXPECT_EQ(facts->kind, FindAcceleratorDevice(name)->kind);
    EXPECT_EQ(kernels::DeviceFactsOf(facts->kind).name, name);
  }
}

TEST(DeviceRegistry, TheChoicesAreAutoAndEveryDeviceWithFacts) {
  // cuda's facts are in every build, so that --device cuda reaches the error that says what the
  // build lacks instead of a list without it.
  EXPECT_EQ(DeviceChoices(), (std::vector<std::string>{"auto", "cpu", "cuda"}));
}

TEST(DeviceRegistry, AnUnknownDeviceIsRefusedNamingTheDevicesOfThisBuild) {
  const std::vector<RankChoice> choices = ChooseOnRanks(1, "tpu");
  const Status& status = choices[0].chosen.status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("--device tpu"));
  for (const std::string& name : AcceleratorDeviceNames()) {
    EXPECT_THAT(status.message(), HasSubstr(name));
  }
  EXPECT_THAT(status.message(), HasSubstr("auto"));
}

TEST(DeviceRegistry, ADeviceThisBinaryLacksSaysWhatItTakesAndHowToTrainOnTheCpu) {
  ASSERT_EQ(FindAcceleratorDevice("cuda"), nullptr) << "this test binary links no CUDA library";
  const kernels::DeviceFacts* facts = kernels::FindDeviceFacts("cuda");
  ASSERT_NE(facts, nullptr);
  const std::vector<RankChoice> choices = ChooseOnRanks(2, "cuda");
  for (const RankChoice& choice : choices) {
    const Status& status = choice.chosen.status();
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr("--device cuda: " + facts->build_requirement));
    EXPECT_THAT(status.message(), HasSubstr("--device cpu trains on the CPU"));
  }
}

TEST(DeviceRegistry, ANamedDeviceThatOneRankCannotOpenStopsEveryRankWithItsReason) {
  auto uses = std::make_shared<Uses>();
  ScopedDevice device(TestDevice(
      "testaccel", "TestAccel", 50, [](int rank) { return rank != 1; },
      [](int rank) { return "accelerator " + std::to_string(rank); }, uses));
  const std::vector<RankChoice> choices = ChooseOnRanks(2, "testaccel");
  const Status& refused = choices[1].chosen.status();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(),
            "--device testaccel: testaccel is not on rank 1; --device cpu trains on the CPU");
  const Status& told = choices[0].chosen.status();
  EXPECT_EQ(told.code(), StatusCode::kUnavailable);
  EXPECT_THAT(told.message(), HasSubstr("rank 1 failed"));
  EXPECT_THAT(told.message(), HasSubstr("testaccel is not on rank 1"));
  EXPECT_THAT(told.message(), HasSubstr("--device cpu trains on the CPU"));
  EXPECT_TRUE(uses->seen.empty());
}

TEST(DeviceRegistry, RanksSharingANamedDeviceAreAllToldSo) {
  auto uses = std::make_shared<Uses>();
  // Ranks 0 and 1 share one device, rank 2 has its own: every rank must take the same path.
  ScopedDevice device(TestDevice(
      "testaccel", "TestAccel", 50, [](int) { return true; },
      [](int rank) { return rank < 2 ? std::string("shared") : std::string("own"); }, uses));
  const std::vector<RankChoice> choices = ChooseOnRanks(3, "testaccel");
  for (const RankChoice& choice : choices) {
    ASSERT_TRUE(choice.chosen.ok()) << choice.chosen.status().ToString();
    EXPECT_EQ(choice.chosen->name, "testaccel");
    EXPECT_EQ(choice.chosen->kind, DeviceKind::kCuda);
  }
  ASSERT_EQ(uses->seen.size(), 3u);
  for (const DeviceUse& use : uses->seen) {
    EXPECT_TRUE(use.shared);
    EXPECT_EQ(use.world_size, 3);
  }
}

TEST(DeviceRegistry, AutoPassesOverADeviceARankLacksAndSaysWhyOnRankZero) {
  auto uses = std::make_shared<Uses>();
  ScopedDevice device(TestDevice(
      "testaccel", "TestAccel", 50, [](int rank) { return rank != 1; },
      [](int rank) { return "accelerator " + std::to_string(rank); }, uses));
  const std::vector<RankChoice> choices = ChooseOnRanks(2, "auto");
  for (const RankChoice& choice : choices) {
    ASSERT_TRUE(choice.chosen.ok()) << choice.chosen.status().ToString();
    EXPECT_EQ(choice.chosen->name, "cpu");
    EXPECT_EQ(choice.chosen->kind, DeviceKind::kCpu);
  }
  EXPECT_THAT(choices[0].said, HasSubstr("hoist: a TestAccel is visible, but this job trains on "
                                         "the CPU: rank 1 failed"));
  EXPECT_TRUE(uses->seen.empty());
}

TEST(DeviceRegistry, AutoTakesTheMostPreferredDeviceEveryRankHasToItself) {
  auto fast_uses = std::make_shared<Uses>();
  auto slow_uses = std::make_shared<Uses>();
  ScopedDevice fast(TestDevice(
      "testfast", "TestFast", 60, [](int) { return true; },
      [](int) { return std::string("one for all"); }, fast_uses));
  ScopedDevice slow(TestDevice(
      "testslow", "TestSlow", 55, [](int) { return true; },
      [](int rank) { return "slow " + std::to_string(rank); }, slow_uses));
  const std::vector<RankChoice> choices = ChooseOnRanks(2, "auto");
  for (const RankChoice& choice : choices) {
    ASSERT_TRUE(choice.chosen.ok()) << choice.chosen.status().ToString();
    EXPECT_EQ(choice.chosen->name, "testslow");
  }
  EXPECT_TRUE(fast_uses->seen.empty());
  ASSERT_EQ(slow_uses->seen.size(), 2u);
  EXPECT_FALSE(slow_uses->seen[0].shared);
  EXPECT_THAT(choices[0].said,
              HasSubstr("hoist: a TestFast is visible, but this job trains on the TestSlow: "
                        "ranks would share a TestFast"));
  EXPECT_EQ(choices[1].said, "");
}

TEST(DeviceRegistry, ADeviceRegistersOnceByName) {
  AcceleratorDevice again;
  again.name = "cpu";
  EXPECT_FALSE(RegisterAcceleratorDevice(again));
  EXPECT_EQ(FindAcceleratorDevice("cpu")->noun, "CPU");
}

TEST(CpuAccelerator, ComputesInHostMemoryOverTheJobsOwnCommunicator) {
  MemoryTracker tracker;
  StatusOr<Accelerator> cpu = CpuAccelerator()(Config(), nullptr, 0, &tracker);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_TRUE(cpu->in_host_memory);
  EXPECT_EQ(cpu->collectives, nullptr);
  EXPECT_EQ(cpu->staging, nullptr);
  EXPECT_FALSE(cpu->memory_stats);
  ASSERT_NE(cpu->backend, nullptr);
  EXPECT_EQ(cpu->backend->kind(), DeviceKind::kCpu);
  EXPECT_TRUE(cpu->backend->OperatesOnHostMemory());
  StatusOr<Buffer> buffer = cpu->backend->device().Allocate(4096, Category::kParam);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ(tracker.Snapshot().Current(Place::kDevice, Category::kParam), 4096);
}

// The facts stand for the backends where there is none: they must give what the backends do.
TEST(DeviceFacts, TheCpusAreItsBackends) {
  const kernels::DeviceFacts& facts = kernels::DeviceFactsOf(DeviceKind::kCpu);
  MemoryTracker tracker;
  CpuDevice device(Place::kDevice, &tracker);
  const kernels::CpuBackend backend(&device);
  EXPECT_EQ(facts.backend_workspace_bytes, tracker.Snapshot().CurrentTotal(Place::kDevice));
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    EXPECT_EQ(facts.attention_workspace_bytes(2, 64, 96, 3, type),
              backend.AttentionWorkspaceBytes(2, 64, 96, 3, type));
    EXPECT_EQ(facts.gqa_attention_workspace_bytes(2, 64, 8, 2, 16, type),
              backend.GqaAttentionWorkspaceBytes(2, 64, 8, 2, 16, type));
  }
  EXPECT_EQ(facts.tiled_attention_workspace_bytes(2, 64, 3),
            backend.TiledAttentionWorkspaceBytes(2, 64, 3));
  EXPECT_EQ(facts.gqa_tiled_attention_workspace_bytes(2, 64, 8),
            backend.GqaTiledAttentionWorkspaceBytes(2, 64, 8));
  EXPECT_TRUE(facts.host_pinning_driver.empty());
}

TEST(DeviceFacts, TheCudaBackendsAreItsKernelsArithmetic) {
  const kernels::DeviceFacts& facts = kernels::DeviceFactsOf(DeviceKind::kCuda);
  EXPECT_EQ(facts.name, "cuda");
  EXPECT_FALSE(facts.computes_in_host_memory);
  EXPECT_EQ(facts.host_pinning_driver, "the CUDA driver");
  EXPECT_EQ(facts.backend_workspace_bytes, kernels::cuda::BackendWorkspaceBytes());
  for (DType type : {DType::kFloat32, DType::kBFloat16}) {
    EXPECT_EQ(facts.attention_workspace_bytes(2, 64, 96, 3, type),
              kernels::cuda::AttentionWorkspaceBytes(2, 64, 96, 3, type));
    EXPECT_EQ(facts.gqa_attention_workspace_bytes(2, 64, 8, 2, 16, type),
              kernels::cuda::GqaAttentionWorkspaceBytes(2, 64, 8, 2, 16, type));
  }
  EXPECT_EQ(facts.tiled_attention_workspace_bytes(2, 64, 3),
            kernels::cuda::TiledAttentionBackwardWorkspaceBytes(2, 64, 3));
  EXPECT_EQ(facts.gqa_tiled_attention_workspace_bytes(2, 64, 8),
            kernels::cuda::TiledAttentionBackwardWorkspaceBytes(2, 64, 8));
}

}  // namespace
}  // namespace hoist::runtime

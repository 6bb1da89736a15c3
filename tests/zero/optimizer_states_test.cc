// OptimizerStates: the footprint it gives without allocating is what Create allocates, to the
// byte, in every placement and encoding; the moments go to and from the flat fp32 layout of a
// checkpoint the same whatever the placement (fp32 exactly; 8-bit reproducing its own values);
// and master() and moments() find each unit's states where that layout put them.
#include "zero/optimizer_states.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/memory_tracker.h"
#include "kernels/cpu_backend.h"
#include "offload/pinned_pool.h"
#include "tests/zero/zero_test_util.h"

namespace hoist::zero {
namespace {

struct Case {
  std::string name;
  Placement place;
  bool pin_memory;
  double ratio;
  bool eight_bit;
  DType type;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (bool eight_bit : {false, true}) {
    for (DType type : {DType::kFloat32, DType::kBFloat16}) {
      const std::string suffix = std::string(eight_bit ? "_8bit" : "_32bit") +
                                 (type == DType::kFloat32 ? "_fp32" : "_bf16");
      cases.push_back({"device" + suffix, Placement::kDevice, true, 1.0, eight_bit, type});
      cases.push_back({"pinned" + suffix, Placement::kHost, true, 1.0, eight_bit, type});
      cases.push_back({"pageable" + suffix, Placement::kHost, false, 1.0, eight_bit, type});
      cases.push_back({"split" + suffix, Placement::kHost, true, 0.5, eight_bit, type});
      cases.push_back({"nvme" + suffix, Placement::kNvme, true, 1.0, eight_bit, type});
    }
  }
  return cases;
}

ZeroOptions OptionsFor(const Case& c, const std::string& nvme_file) {
  ZeroOptions options;
  options.stage = 2;
  options.compute_type = c.type;
  options.adam.eight_bit = c.eight_bit;
  options.adam.min_8bit_size = 40;  // the 53-element units in 8-bit, the others in fp32
  options.offload_optimizer.place = c.place;
  options.offload_optimizer.pin_memory = c.pin_memory;
  options.offload_optimizer.ratio = c.ratio;
  options.offload_optimizer.nvme_file = nvme_file;
  options.offload_optimizer.sub_group_size = 64;
  return options;
}

class OptimizerStatesTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("optimizer_states_" + GetParam().name + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto plan = PartitionPlan::Build(zero_test::ToyUnits(), 2, 1);
    ASSERT_TRUE(plan.ok());
    plan_ = std::make_unique<PartitionPlan>(std::move(plan).value());
    options_ = OptionsFor(GetParam(), (dir_ / "states").string());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::unique_ptr<PartitionPlan> plan_;
  ZeroOptions options_;
  MemoryTracker tracker_;
  CpuDevice device_{Place::kDevice, &tracker_};
  kernels::CpuBackend backend_{&device_};
  offload::PinnedHostPool pool_{tracker_, {.lock_pages = false}};
};

TEST_P(OptimizerStatesTest, TheFootprintIsWhatCreateAllocates) {
  MemorySnapshot::Table expected{};
  for (const ResidentBytes& array : OptimizerStates::Footprint(*plan_, options_, false)) {
    expected[int(array.place)][int(array.category)] += array.bytes;
  }
  auto states =
      OptimizerStates::Create(*plan_, options_, device_, &pool_, backend_, /*host_ops=*/nullptr);
  ASSERT_TRUE(states.ok()) << states.status().ToString();
  EXPECT_EQ(tracker_.Snapshot().current, expected);
  // The states' own bytes, by the formula: the master where separate (always when offloaded,
  // in bf16 always), m and v in fp32 or 1 byte each per 8-bit element plus two absmaxes per block.
  const int64_t total = plan_->total_shard();
  int64_t bytes_8bit = 0, fp32_moments = total;
  if (GetParam().eight_bit) {
    fp32_moments = 0;
    for (int u = 0; u < plan_->num_units(); ++u) {
      const UnitPartition& part = plan_->unit(u);
      if (plan_->spec(u).size < 40) {
        fp32_moments += part.shard;
        continue;
      }
      int64_t blocks = 0;
      for (const OwnedPiece& piece : OwnedPieces(*plan_, u)) {
        blocks += (piece.end - piece.begin + 255) / 256;
      }
      bytes_8bit += 2 * part.shard + 2 * 4 * blocks;
    }
  }
  // The master: an array of its own where offloaded, and on the device only where the model's
  // copy is not fp32 (the device part of a split too).
  const int64_t on_device = (*states)->split();
  const int64_t master = GetParam().type != DType::kFloat32 ? total : total - on_device;
  EXPECT_EQ(OptimizerStates::Bytes(*plan_, options_),
            4 * master + 2 * 4 * fp32_moments + bytes_8bit);
}

// The resident placements (NVMe's states are read a sub-group at a time, by the engine's tests).
using ResidentStatesTest = OptimizerStatesTest;

TEST_P(ResidentStatesTest, MomentsGoToAndFromTheFlatLayoutWhereverTheyLive) {
  auto created =
      OptimizerStates::Create(*plan_, options_, device_, &pool_, backend_, /*host_ops=*/nullptr);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  OptimizerStates& states = **created;
  auto sync = [&] { return backend_.compute_stream().Synchronize(); };
  const auto total = static_cast<size_t>(plan_->total_shard());
  std::vector<float> m(total, 1.0f), v(total, 1.0f);
  ASSERT_TRUE(states.ZeroMoments(sync).ok());
  ASSERT_TRUE(states.ReadMoments(m.data(), v.data(), sync).ok());
  EXPECT_EQ(m, std::vector<float>(total, 0.0f));
  EXPECT_EQ(v, std::vector<float>(total, 0.0f));

  // Values in the owned ranges, zeros in the padding (as a checkpoint holds them).
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (int u = 0; u < plan_->num_units(); ++u) {
    const UnitPartition& part = plan_->unit(u);
    for (int64_t i = 0; i < part.owned_real; ++i) {
      m[static_cast<size_t>(part.shard_offset + i)] = normal(random);
      v[static_cast<size_t>(part.shard_offset + i)] = std::abs(normal(random)) * 1e-3f;
    }
  }
  ASSERT_TRUE(states.WriteMoments(m.data(), v.data(), sync).ok());
  std::vector<float> m_read(total), v_read(total);
  ASSERT_TRUE(states.ReadMoments(m_read.data(), v_read.data(), sync).ok());
  if (!GetParam().eight_bit) {
    EXPECT_EQ(m_read, m);
    EXPECT_EQ(v_read, v);
  } else {
    // Quantized once, then the same bits: what it read out, written back, reads out unchanged.
    for (size_t i = 0; i < total; ++i) {
      EXPECT_NEAR(m_read[i], m[i], 2e-4) << i;
      EXPECT_NEAR(v_read[i], v[i], 1e-5) << i;
    }
    ASSERT_TRUE(states.WriteMoments(m_read.data(), v_read.data(), sync).ok());
    std::vector<float> m_again(total), v_again(total);
    ASSERT_TRUE(states.ReadMoments(m_again.data(), v_again.data(), sync).ok());
    EXPECT_EQ(m_again, m_read);
    EXPECT_EQ(v_again, v_read);
  }
  // Each unit's fp32 moments and master are where the flat layout puts them.
  for (int u = 0; u < plan_->num_units(); ++u) {
    const UnitPartition& part = plan_->unit(u);
    if (part.owned_real == 0) continue;
    const StateMoments at = states.moments(u);
    if (!states.eight_bit(u)) {
      ASSERT_NE(at.m, nullptr);
      EXPECT_EQ(at.m[0], m[static_cast<size_t>(part.shard_offset)]) << "unit " << u;
      EXPECT_EQ(at.v[part.owned_real - 1],
                v[static_cast<size_t>(part.shard_offset + part.owned_real - 1)]);
    } else {
      EXPECT_NE(at.qm, nullptr);
      EXPECT_NE(at.absmax_v, nullptr);
    }
    EXPECT_EQ(states.offloaded(u),
              GetParam().place != Placement::kDevice && part.shard_offset >= states.split());
    if (states.offloaded(u) || GetParam().type != DType::kFloat32) {
      ASSERT_NE(states.master(u), nullptr);
      states.master(u)[0] = 3.0f;  // inside an array of the right size (ASan would say)
      states.master(u)[part.owned_real - 1] = 4.0f;
    } else {
      EXPECT_EQ(states.master(u), nullptr);
    }
  }
}

std::vector<Case> ResidentCases() {
  std::vector<Case> cases = Cases();
  std::erase_if(cases, [](const Case& c) { return c.place == Placement::kNvme; });
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Placements, OptimizerStatesTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Placements, ResidentStatesTest, ::testing::ValuesIn(ResidentCases()),
                         [](const auto& info) { return info.param.name; });

TEST(OptimizerStatesFootprint, TheHostUpdateBuffersComeWithOffloadOnAnAccelerator) {
  auto plan = PartitionPlan::Build(zero_test::ToyUnits(), 1, 0);
  ASSERT_TRUE(plan.ok());
  ZeroOptions options =
      OptionsFor({"pinned", Placement::kHost, true, 1.0, false, DType::kBFloat16}, "");
  auto sum = [&](bool accelerator, Place place, Category category) {
    int64_t bytes = 0;
    for (const ResidentBytes& array : OptimizerStates::Footprint(*plan, options, accelerator)) {
      if (array.place == place && array.category == category) bytes += array.bytes;
    }
    return bytes;
  };
  using offload::PinnedHostPool;
  // The offloaded gradients (bf16, the whole shard: 145 elements) and two copy slots of the
  // largest unit's 53 bf16 elements, each a pinned allocation.
  EXPECT_EQ(sum(true, Place::kHostPinned, Category::kGrad), PinnedHostPool::AllocationBytes(290));
  EXPECT_EQ(sum(true, Place::kHostPinned, Category::kOptimizer) -
                sum(false, Place::kHostPinned, Category::kOptimizer),
            2 * PinnedHostPool::AllocationBytes(106));
  EXPECT_EQ(sum(false, Place::kHostPinned, Category::kGrad), 0);
  options.offload_optimizer.place = Placement::kDevice;
  EXPECT_EQ(sum(true, Place::kHostPinned, Category::kGrad), 0);
  options.frozen = true;
  EXPECT_TRUE(OptimizerStates::Footprint(*plan, options, true).empty());
  EXPECT_EQ(OptimizerStates::Bytes(*plan, options), 0);
}

}  // namespace
}  // namespace hoist::zero

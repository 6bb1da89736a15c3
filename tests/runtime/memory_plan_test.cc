// The memory-budget planner: the config it picks for a budget trains within that budget (the
// ranks' trackers measure it), keeps the global batch, prefers the setting that recomputes and
// communicates least when everything fits, and refuses budgets nothing fits with the smallest
// budget that would (and the host or NVMe limit where that blocks).
#include "runtime/memory/memory_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/runtime/config_test_util.h"
#include "tests/runtime/trainer_test_util.h"

namespace hoist::runtime {
namespace {

using ::testing::HasSubstr;
using testing_util::RankRun;
using testing_util::TinyJob;
using testing_util::TrainOnRanks;

constexpr int64_t kGiB = int64_t{1} << 30;

// A fixed compute rate, so that the plans do not depend on the machine's speed.
PlanOptions Budget(int64_t device_bytes) {
  PlanOptions options;
  options.device_budget_bytes = device_bytes;
  options.rates.flops_per_s = 1e10;
  return options;
}

MemoryPlan PlanOk(const Config& config, int world, const PlanOptions& options) {
  StatusOr<MemoryPlan> plan = PlanMemory(config, world, options);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? std::move(plan).value() : MemoryPlan{};
}

bool Offloads(const PlanChoice& c) {
  return c.offload_optimizer != Placement::kDevice || c.offload_param != Placement::kDevice;
}

// The least device peak of the candidates `keep` accepts.
template <typename Keep>
int64_t LeastDevice(const MemoryPlan& plan, Keep keep) {
  int64_t least = INT64_MAX;
  for (const PlanCandidate& c : plan.candidates) {
    if (keep(c.choice)) least = std::min(least, c.device_bytes);
  }
  return least;
}

TEST(MemoryPlan, GenerousBudgetPicksNoCheckpointingNoOffloadAndTheLargestMicroBatch) {
  for (int world : {1, 2}) {
    SCOPED_TRACE(world);
    const Config base = TinyJob(world, 5);
    const MemoryPlan plan = PlanOk(base, world, Budget(kGiB));
    ASSERT_FALSE(plan.candidates.empty());
    const PlanChoice& best = plan.candidates.front().choice;
    EXPECT_EQ(best.stage, 0);
    EXPECT_EQ(best.offload_optimizer, Placement::kDevice);
    EXPECT_EQ(best.offload_param, Placement::kDevice);
    EXPECT_EQ(best.policy, CheckpointPolicy::kNone);
    EXPECT_FALSE(best.cpu_checkpointing);
    EXPECT_EQ(best.micro_batch, 8 / world);
    EXPECT_EQ(best.accumulation, 1);
    EXPECT_TRUE(plan.base_fits);
    // Every candidate fits and the list is in the cost model's order.
    for (size_t i = 0; i < plan.candidates.size(); ++i) {
      EXPECT_LE(plan.candidates[i].device_bytes, kGiB);
      if (i > 0) {
        EXPECT_LE(plan.candidates[i - 1].cost.total_s, plan.candidates[i].cost.total_s);
      }
    }
    // The best is the base with only the micro-batch changed.
    EXPECT_THAT(plan.overrides, ::testing::ElementsAre(
                                    "train_batch_size=8",
                                    "train_micro_batch_size_per_gpu=" + std::to_string(8 / world),
                                    "gradient_accumulation_steps=1"));
    EXPECT_EQ(PlanChoice::Of(plan.best), best);
  }
}

TEST(MemoryPlan, KeepsTheGlobalBatch) {
  const Config base = TinyJob(2, 5);
  const MemoryPlan plan = PlanOk(base, 2, Budget(kGiB));
  for (const PlanCandidate& c : plan.candidates) {
    EXPECT_EQ(c.choice.micro_batch * c.choice.accumulation * 2, base.train_batch_size)
        << c.choice.Describe();
  }
  EXPECT_EQ(plan.best.train_batch_size, base.train_batch_size);
  // Micro-batches 1, 2 and 4 on each of the 2 ranks.
  std::vector<int64_t> micro;
  for (const PlanCandidate& c : plan.candidates) micro.push_back(c.choice.micro_batch);
  std::sort(micro.begin(), micro.end());
  micro.erase(std::unique(micro.begin(), micro.end()), micro.end());
  EXPECT_EQ(micro, (std::vector<int64_t>{1, 2, 4}));
}

TEST(MemoryPlan, CostModelChargesRecomputationCommunicationAndOffload) {
  const CostRates rates = Budget(1).rates;
  auto cost = [&](int world, const std::vector<std::string>& extra) {
    return EstimateStepCost(TinyJob(world, 5, extra), world, world, rates);
  };
  const StepCost none = cost(1, {});
  EXPECT_EQ(none.recompute_flops, 0);
  EXPECT_EQ(none.comm_bytes, 0);  // one rank
  const StepCost selective = cost(1, {"activation_checkpointing.policy=selective"});
  const StepCost every = cost(1, {"activation_checkpointing.policy=every_k"});
  const StepCost full = cost(1, {"activation_checkpointing.policy=full"});
  EXPECT_EQ(selective.model_flops, none.model_flops);
  EXPECT_GT(selective.recompute_flops, 0);
  EXPECT_LT(selective.recompute_flops, every.recompute_flops);
  // every_k(2) of 2 blocks checkpoints one of them: half of full's recomputation.
  EXPECT_DOUBLE_EQ(2 * every.recompute_flops, full.recompute_flops);

  // Two ranks: stage 0 all-reduces 2(N-1)/N of the fp32 gradients, stage 1 adds the weights'
  // all-gather, stage 3 gathers the weights twice per micro-batch (2 micro-batches here).
  const double psi = static_cast<double>(ModelParameterCount(TinyJob(1, 5).model));
  EXPECT_DOUBLE_EQ(cost(2, {}).comm_bytes, psi * 4);
  EXPECT_DOUBLE_EQ(cost(2, {"zero_optimization.stage=1"}).comm_bytes, psi * 4 + psi * 2);
  EXPECT_DOUBLE_EQ(cost(2, {"zero_optimization.stage=3"}).comm_bytes,
                   2 * (psi * 2) + 2 * 2 * (psi * 2));
  const StepCost cpu =
      cost(2, {"zero_optimization.stage=1", "zero_optimization.offload_optimizer.device=cpu"});
  EXPECT_GT(cpu.offload_s, 0);
  EXPECT_EQ(cpu.nvme_bytes, 0);
  EXPECT_GT(cpu.total_s, cost(2, {"zero_optimization.stage=1"}).total_s);
  // NVMe: each rank reads and writes its shard's fp32 master and moments (12 bytes an element),
  // or with 8-bit moments the master, the codes and their absmaxes (6 + 1/32).
  const std::vector<std::string> nvme = {"zero_optimization.stage=2",
                                         "zero_optimization.offload_optimizer.device=nvme",
                                         "zero_optimization.offload_optimizer.nvme_path=\"/tmp\""};
  std::vector<std::string> nvme8 = nvme;
  nvme8.push_back("optimizer.type=\"AdamW8bit\"");
  const StepCost fp32 = cost(2, nvme), eight = cost(2, nvme8);
  const double shard = std::ceil(psi / 2);
  EXPECT_DOUBLE_EQ(fp32.nvme_bytes, 2 * 12 * shard);
  EXPECT_DOUBLE_EQ(eight.nvme_bytes, 2 * (6 + 1.0 / 32) * shard);
  EXPECT_LT(eight.total_s, fp32.total_s);
}

// Three budgets, each trained for a few steps on two ranks: the measured device peak of every
// rank stays within the budget.
TEST(MemoryPlan, ChosenConfigTrainsWithinTheBudget) {
  const int world = 2;
  const Config base = TinyJob(world, 5);
  const MemoryPlan generous = PlanOk(base, world, Budget(kGiB));
  ASSERT_FALSE(generous.candidates.empty());
  // Below the generous choice: checkpointing, a higher stage or a smaller micro-batch.
  const int64_t tight = generous.candidates.front().device_bytes - 1;
  // Below every setting without offload.
  const int64_t offload =
      LeastDevice(generous, [](const PlanChoice& c) { return !Offloads(c); }) - 1;
  ASSERT_LT(offload, tight);

  for (int64_t budget : {kGiB, tight, offload}) {
    SCOPED_TRACE(budget);
    const MemoryPlan plan = PlanOk(base, world, Budget(budget));
    ASSERT_FALSE(plan.candidates.empty());
    const PlanChoice& choice = plan.candidates.front().choice;
    SCOPED_TRACE(choice.Describe());
    if (budget == tight) {
      EXPECT_FALSE(choice == generous.candidates.front().choice);
    }
    if (budget == offload) {
      EXPECT_TRUE(Offloads(choice));
    }
    const std::vector<RankRun> runs = TrainOnRanks(plan.best, world);
    for (const RankRun& run : runs) {
      ASSERT_TRUE(run.status.ok()) << run.status.ToString();
      EXPECT_LE(run.memory.peak_total[int(Place::kDevice)], budget);
    }
  }
}

TEST(MemoryPlan, APartialOffloadIsChosenWhereItFitsAndNoOffloadDoesNot) {
  // Just below every setting without offload, the cheapest that fits offloads part of the
  // optimizer (it moves less over the host link than a full offload); its overrides set the
  // ratio, and the job trains within the budget.
  const int world = 2;
  const Config base = TinyJob(world, 5);
  const MemoryPlan generous = PlanOk(base, world, Budget(kGiB));
  std::vector<double> ratios;
  for (const PlanCandidate& c : generous.candidates) {
    if (c.choice.offload_optimizer == Placement::kHost) ratios.push_back(c.choice.offload_ratio);
  }
  std::sort(ratios.begin(), ratios.end());
  ratios.erase(std::unique(ratios.begin(), ratios.end()), ratios.end());
  EXPECT_EQ(ratios, (std::vector<double>{0.25, 0.5, 0.75, 1.0}));
  const int64_t budget =
      LeastDevice(generous, [](const PlanChoice& c) { return !Offloads(c); }) - 1;
  const MemoryPlan plan = PlanOk(base, world, Budget(budget));
  const PlanChoice& choice = plan.candidates.front().choice;
  SCOPED_TRACE(choice.Describe());
  EXPECT_EQ(choice.offload_optimizer, Placement::kHost);
  EXPECT_LT(choice.offload_ratio, 1.0);
  EXPECT_THAT(choice.Describe(), HasSubstr("offload optimizer cpu (ratio "));
  EXPECT_THAT(plan.overrides,
              ::testing::Contains(HasSubstr("zero_optimization.offload_optimizer.ratio=0.")));
  EXPECT_EQ(plan.best.zero.offload_optimizer.ratio, choice.offload_ratio);
  // A full offload of the same setting costs more.
  PlanChoice full = choice;
  full.offload_ratio = 1.0;
  for (const PlanCandidate& c : plan.candidates) {
    if (c.choice == full) {
      EXPECT_GT(c.cost.total_s, plan.candidates.front().cost.total_s);
    }
  }
  const std::vector<RankRun> runs = TrainOnRanks(plan.best, world);
  for (const RankRun& run : runs) {
    ASSERT_TRUE(run.status.ok()) << run.status.ToString();
    EXPECT_LE(run.memory.peak_total[int(Place::kDevice)], budget);
  }
}

TEST(MemoryPlan, EightBitMomentsOnlyWhenAllowedAndOnlyWhereThirtyTwoBitsCostMore) {
  const int world = 2;
  const Config base = TinyJob(world, 5);
  auto any_8bit = [](const MemoryPlan& plan) {
    return std::any_of(plan.candidates.begin(), plan.candidates.end(),
                       [](const PlanCandidate& c) { return c.choice.optimizer_8bit; });
  };
  PlanOptions allowed = Budget(kGiB);
  allowed.allow_8bit_optimizer = true;
  EXPECT_FALSE(any_8bit(PlanOk(base, world, Budget(kGiB))));
  const MemoryPlan generous = PlanOk(base, world, allowed);
  ASSERT_TRUE(any_8bit(generous));
  // Everything fits: the 32-bit optimizer, 8-bit states tying with it on time.
  EXPECT_FALSE(generous.candidates.front().choice.optimizer_8bit);
  for (const PlanCandidate& c : generous.candidates) {
    if (!c.choice.optimizer_8bit) continue;
    // With fewer optimizer bytes on the device than the same 32-bit setting.
    PlanChoice same = c.choice;
    same.optimizer_8bit = false;
    for (const PlanCandidate& d : generous.candidates) {
      if (d.choice == same && c.choice.offload_optimizer == Placement::kDevice) {
        EXPECT_LT(c.device_bytes, d.device_bytes) << c.choice.Describe();
        EXPECT_EQ(c.cost.total_s, d.cost.total_s);
      }
    }
  }

  // Below every 32-bit setting that keeps its states on the device: 32 bits must offload (and
  // pay the host link), while 8-bit moments still fit on the device, so the plan takes them.
  const int64_t budget =
      LeastDevice(generous, [](const PlanChoice& c) { return !c.optimizer_8bit && !Offloads(c); }) -
      1;
  allowed.device_budget_bytes = budget;
  const MemoryPlan plan = PlanOk(base, world, allowed);
  const PlanChoice& choice = plan.candidates.front().choice;
  SCOPED_TRACE(choice.Describe());
  EXPECT_TRUE(choice.optimizer_8bit);
  EXPECT_FALSE(Offloads(choice));
  EXPECT_THAT(choice.Describe(), HasSubstr(", 8-bit AdamW"));
  EXPECT_THAT(plan.overrides, ::testing::Contains("optimizer.type=\"AdamW8bit\""));
  EXPECT_EQ(plan.best.optimizer.type, "AdamW8bit");
  // Not allowed, the same budget offloads.
  allowed.allow_8bit_optimizer = false;
  EXPECT_TRUE(Offloads(PlanOk(base, world, allowed).candidates.front().choice));
  const std::vector<RankRun> runs = TrainOnRanks(plan.best, world);
  for (const RankRun& run : runs) {
    ASSERT_TRUE(run.status.ok()) << run.status.ToString();
    EXPECT_LE(run.memory.peak_total[int(Place::kDevice)], budget);
  }
}

// The engine keeps 8-bit moments on the device, on the host (whole or in part) or on NVMe: the
// plan offers each.
TEST(MemoryPlan, AnEightBitJobStaysEightBitAndIsOfferedEveryPlacement) {
  const int world = 2;
  const Config base = TinyJob(world, 5, {"optimizer.type=\"AdamW8bit\""});
  PlanOptions options = Budget(kGiB);
  options.nvme_budget_bytes = kNoNvmeLimit;
  options.nvme_path = ::testing::TempDir();
  const MemoryPlan plan = PlanOk(base, world, options);
  ASSERT_FALSE(plan.candidates.empty());
  EXPECT_EQ(plan.refused, 0) << ::testing::PrintToString(plan.notes);
  bool nvme = false, partial = false;
  for (const PlanCandidate& c : plan.candidates) {
    EXPECT_TRUE(c.choice.optimizer_8bit);
    nvme = nvme || c.choice.offload_optimizer == Placement::kNvme;
    partial = partial || c.choice.offload_ratio < 1.0;
  }
  EXPECT_TRUE(nvme);
  EXPECT_TRUE(partial);
  EXPECT_THAT(plan.overrides, ::testing::Not(::testing::Contains(HasSubstr("optimizer.type"))));
}

// On a GPU the plan offers what the engine runs there, parameter offload included, and counts
// the device staging it takes in its device bytes.
TEST(MemoryPlan, AGpuPlanOffersParameterOffloadWithItsStaging) {
  const int world = 2;
  const Config base = TinyJob(world, 5);
  PlanOptions options = Budget(kGiB);
  options.device = DeviceKind::kCuda;
  const MemoryPlan gpu = PlanOk(base, world, options);
  const MemoryPlan cpu = PlanOk(base, world, Budget(kGiB));
  bool offered = false;
  for (const PlanCandidate& c : gpu.candidates) {
    if (c.choice.offload_param == Placement::kDevice) continue;
    offered = true;
    for (const PlanCandidate& d : cpu.candidates) {
      if (d.choice == c.choice) {
        EXPECT_GT(c.device_bytes, d.device_bytes) << c.choice.Describe();
      }
    }
  }
  EXPECT_TRUE(offered);
}

TEST(MemoryPlan, BudgetBelowEverythingNamesTheSmallestThatFits) {
  const Config base = TinyJob(1, 5);
  const MemoryPlan generous = PlanOk(base, 1, Budget(kGiB));
  const int64_t smallest = LeastDevice(generous, [](const PlanChoice&) { return true; });
  // The first in the plan's order of those that need the least.
  const auto at_least =
      std::find_if(generous.candidates.begin(), generous.candidates.end(),
                   [&](const PlanCandidate& c) { return c.device_bytes == smallest; });
  ASSERT_NE(at_least, generous.candidates.end());
  const StatusOr<MemoryPlan> plan = PlanMemory(base, 1, Budget(smallest - 1));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("the smallest device budget that fits is " + FormatBytes(smallest) + " (" +
                        std::to_string(smallest) + " bytes)"));
  EXPECT_THAT(plan.status().message(), HasSubstr("with " + at_least->choice.Describe()));
  // That budget itself fits.
  EXPECT_TRUE(PlanMemory(base, 1, Budget(smallest)).ok());
}

TEST(MemoryPlan, HostBudgetTooSmallForCpuOffloadIsNamed) {
  const Config base = TinyJob(1, 5);
  const MemoryPlan generous = PlanOk(base, 1, Budget(kGiB));
  // A device budget only offload meets, and a host budget that holds what every setting keeps on
  // the host (the built-in data) but not the offloaded states.
  const int64_t device =
      LeastDevice(generous, [](const PlanChoice& c) { return !Offloads(c); }) - 1;
  int64_t host = 0;
  for (const PlanCandidate& c : generous.candidates) {
    if (!Offloads(c.choice) && !c.choice.cpu_checkpointing) {
      host = std::max(host, c.host_bytes_per_node);
    }
  }
  PlanOptions options = Budget(device);
  options.host_budget_bytes = host;
  const StatusOr<MemoryPlan> plan = PlanMemory(base, 1, options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(plan.status().message(), HasSubstr("fit the device budget but not the node's"));
  EXPECT_THAT(plan.status().message(), HasSubstr("raise the host-memory budget to at least"));
  EXPECT_THAT(plan.status().message(), HasSubstr("offload optimizer cpu"));
}

TEST(MemoryPlan, NvmeNeedsABudgetAndAPath) {
  const Config base = TinyJob(1, 5);
  auto has_nvme = [](const MemoryPlan& plan) {
    for (const PlanCandidate& c : plan.candidates) {
      if (c.choice.offload_optimizer == Placement::kNvme ||
          c.choice.offload_param == Placement::kNvme) {
        return true;
      }
    }
    return false;
  };
  PlanOptions options = Budget(kGiB);
  options.nvme_budget_bytes = kGiB;
  const MemoryPlan no_path = PlanOk(base, 1, options);
  EXPECT_FALSE(has_nvme(no_path));
  EXPECT_THAT(no_path.notes, ::testing::Contains(HasSubstr("names no nvme_path")));

  const MemoryPlan no_budget = PlanOk(base, 1, Budget(kGiB));
  EXPECT_FALSE(has_nvme(no_budget));
  EXPECT_THAT(no_budget.notes, ::testing::Contains(HasSubstr("no NVMe budget")));

  // With a directory, NVMe is what a device budget that needs offload gets when the host
  // budget is too small for the optimizer states in host memory: small sub-groups streamed
  // through one buffer keep the NVMe swapper's host memory below them.
  const Config small = TinyJob(1, 5,
                               {"zero_optimization.sub_group_size=2000",
                                "zero_optimization.offload_optimizer.buffer_count=1"});
  options.nvme_path = "/var/tmp/hoist-plan-test";
  const MemoryPlan with_path = PlanOk(small, 1, options);
  EXPECT_TRUE(has_nvme(with_path));
  int64_t cpu_host = INT64_MAX, nvme_host = INT64_MAX;
  for (const PlanCandidate& c : with_path.candidates) {
    if (c.choice.offload_optimizer == Placement::kHost) {
      cpu_host = std::min(cpu_host, c.host_bytes_per_node);
    }
    if (c.choice.offload_optimizer == Placement::kNvme) {
      nvme_host = std::min(nvme_host, c.host_bytes_per_node);
    }
  }
  ASSERT_LT(nvme_host, cpu_host);
  options.device_budget_bytes =
      LeastDevice(with_path, [](const PlanChoice& c) { return !Offloads(c); }) - 1;
  options.host_budget_bytes = cpu_host - 1;
  const StatusOr<MemoryPlan> nvme = PlanMemory(small, 1, options);
  ASSERT_TRUE(nvme.ok()) << nvme.status().ToString();
  EXPECT_EQ(nvme->best.zero.offload_optimizer.device, Placement::kNvme);
  EXPECT_EQ(nvme->best.zero.offload_optimizer.nvme_path, "/var/tmp/hoist-plan-test");
  EXPECT_THAT(nvme->overrides, ::testing::Contains("zero_optimization.offload_optimizer.nvme_path="
                                                   "\"/var/tmp/hoist-plan-test\""));
}

TEST(MemoryPlan, UnlimitedNvmeConsidersNvmeAndLeavesTheLimitOutOfRefusals) {
  const Config base = TinyJob(1, 5);
  PlanOptions options = Budget(kGiB);
  options.nvme_budget_bytes = kNoNvmeLimit;
  options.nvme_path = "/var/tmp/hoist-plan-test";
  const MemoryPlan generous = PlanOk(base, 1, options);
  EXPECT_TRUE(std::any_of(
      generous.candidates.begin(), generous.candidates.end(),
      [](const PlanCandidate& c) { return c.choice.offload_optimizer == Placement::kNvme; }));

  // Too small a device budget: the refusal names it, and no NVMe size.
  options.device_budget_bytes = 1024;
  const StatusOr<MemoryPlan> tiny = PlanMemory(base, 1, options);
  ASSERT_FALSE(tiny.ok());
  EXPECT_EQ(tiny.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(tiny.status().message(), HasSubstr("the smallest device budget that fits is"));
  EXPECT_THAT(tiny.status().message(), ::testing::Not(HasSubstr("NVMe")));
  EXPECT_THAT(tiny.status().message(), ::testing::Not(HasSubstr("TiB")));

  // A host limit nothing meets: the host limit blocks, the NVMe budget is still not named.
  options.device_budget_bytes = kGiB;
  options.host_budget_bytes = 1;
  const StatusOr<MemoryPlan> host = PlanMemory(base, 1, options);
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(host.status().message(), HasSubstr("with 1 B of host memory per node ("));
  EXPECT_THAT(host.status().message(),
              HasSubstr("no setting fits the host-memory limit at any device budget"));
  EXPECT_THAT(host.status().message(), ::testing::Not(HasSubstr("NVMe")));
  EXPECT_THAT(host.status().message(), ::testing::Not(HasSubstr("TiB")));
}

TEST(MemoryPlan, LimitsJudgeEachBudgetAlone) {
  PlanCandidate c;
  c.device_bytes = 100;
  c.host_bytes_per_node = 200;
  c.nvme_bytes_per_node = 300;
  PlanOptions o = Budget(100);
  EXPECT_TRUE(o.DeviceOk(c));
  EXPECT_TRUE(o.HostOk(c));   // no host limit
  EXPECT_FALSE(o.NvmeOk(c));  // NVMe not considered: nothing may go there
  o.nvme_budget_bytes = kNoNvmeLimit;
  EXPECT_TRUE(o.NvmeOk(c));
  EXPECT_FALSE(o.NvmeLimited());
  o.host_budget_bytes = 199;
  EXPECT_FALSE(o.HostOk(c));
  EXPECT_TRUE(o.DeviceOk(c));
  EXPECT_FALSE(o.Fits(c));
  o.nvme_budget_bytes = 299;
  EXPECT_FALSE(o.NvmeOk(c));
  o.nvme_budget_bytes = 300;
  EXPECT_TRUE(o.NvmeOk(c));
  c.nvme_bytes_per_node = 0;
  o.nvme_budget_bytes = 0;
  EXPECT_TRUE(o.NvmeOk(c));
}

TEST(MemoryPlan, RefusesBudgetsThatAreNotPositive) {
  const Config base = TinyJob(1, 5);
  const StatusOr<MemoryPlan> plan = PlanMemory(base, 1, Budget(0));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("device-memory budget must be > 0"));
  PlanOptions negative = Budget(kGiB);
  negative.nvme_budget_bytes = -2;
  EXPECT_EQ(PlanMemory(base, 1, negative).status().code(), StatusCode::kInvalidArgument);
  const StatusOr<int64_t> bad = ParseBytes("16 gigs", "--memory");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("--memory"));
}

TEST(MemoryPlan, ParsesQuietlyAndTheBestReparsesFromTheOverrides) {
  // A base with an accepted-but-ignored key: each candidate parse keeps its notice without
  // logging it, and the best is the base text with the overrides.
  const Config base = TinyJob(1, 5, {"wall_clock_breakdown=true"});
  ASSERT_FALSE(base.notices.empty());
  PlanOptions options = Budget(kGiB);
  const MemoryPlan generous = PlanOk(base, 1, options);
  options.device_budget_bytes = generous.candidates.front().device_bytes - 1;
  ::testing::internal::CaptureStderr();
  const MemoryPlan plan = PlanOk(base, 1, options);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(logged, "");
  EXPECT_FALSE(plan.best.notices.empty());
  const StatusOr<Config> again =
      ParseConfigQuietly(base.raw->dump(), plan.overrides, 1, "again.json");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(PlanChoice::Of(*again), plan.candidates.front().choice);
  EXPECT_EQ(*again->raw, *plan.best.raw);
}

}  // namespace
}  // namespace hoist::runtime

// `hoist plan`: the settings that fit a job into a memory budget (runtime/memory/memory_plan.h), as
// a ranked table and a config file; and the planning step of `hoist train --memory-budget`.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "comm/node.h"
#include "core/file_system.h"
#include "core/memory_tracker.h"
#include "kernels/device_facts.h"
#include "launcher/commands.h"
#include "runtime/config/config.h"
#include "runtime/memory/memory_estimate.h"
#include "runtime/memory/memory_plan.h"

namespace hoist::launcher {
namespace {

using runtime::MemoryPlan;
using runtime::PlanCandidate;
using runtime::PlanChoice;

std::string Seconds(double s) {
  char text[32];
  if (s == 0) return "0";
  if (s >= 1) {
    std::snprintf(text, sizeof(text), "%.3g s", s);
  } else if (s >= 1e-3) {
    std::snprintf(text, sizeof(text), "%.3g ms", s * 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.3g us", s * 1e6);
  }
  return text;
}

std::string Rate(double per_s, const char* unit) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.3g G%s/s", per_s / 1e9, unit);
  return text;
}

// "--set a=b --set c=d", each value quoted for a POSIX shell where it needs it.
std::string SetFlags(const std::vector<std::string>& overrides) {
  std::string out;
  for (const std::string& o : overrides) {
    if (!out.empty()) out += " ";
    const bool plain = o.find_first_of(" \"'$`\\*?[]{}()<>|&;#~!") == std::string::npos;
    out += "--set " + (plain ? o : "'" + o + "'");
  }
  return out;
}

std::string Limit(int64_t bytes, const char* none) {
  if (bytes == 0) return none;
  if (bytes == runtime::kNoNvmeLimit) return "no limit";
  return FormatBytes(bytes) + " per node";
}

std::string Table(const MemoryPlan& plan, int top) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof(line),
                "  %4s %5s  %-13s  %-16s %9s  %11s %11s %11s  %9s %9s %9s %9s %9s\n", "#", "stage",
                "offload", "checkpointing", "micro", "device", "host/node", "nvme/node", "step",
                "compute", "recompute", "comm", "offload");
  out << line;
  const int shown = top > 0 ? std::min<int>(top, static_cast<int>(plan.candidates.size()))
                            : static_cast<int>(plan.candidates.size());
  for (int i = 0; i < shown; ++i) {
    const PlanCandidate& c = plan.candidates[static_cast<size_t>(i)];
    const PlanChoice& ch = c.choice;
    // A partial optimizer offload shows its ratio: "cpu 0.5/none".
    std::string offload = OffloadDeviceName(ch.offload_optimizer);
    if (ch.offload_optimizer == Placement::kHost && ch.offload_ratio < 1) {
      char ratio[16];
      std::snprintf(ratio, sizeof(ratio), " %g", ch.offload_ratio);
      offload += ratio;
    }
    offload += std::string("/") + OffloadDeviceName(ch.offload_param);
    if (ch.optimizer_8bit) offload += " 8bit";
    const std::string micro =
        std::to_string(ch.micro_batch) + " x " + std::to_string(ch.accumulation);
    std::snprintf(line, sizeof(line),
                  "%s %4d %5d  %-13s  %-16s %9s  %11s %11s %11s  %9s %9s %9s %9s %9s\n",
                  i == 0 ? "*" : " ", i + 1, ch.stage, offload.c_str(), ch.PolicyName().c_str(),
                  micro.c_str(), FormatBytes(c.device_bytes).c_str(),
                  FormatBytes(c.host_bytes_per_node).c_str(),
                  FormatBytes(c.nvme_bytes_per_node).c_str(), Seconds(c.cost.total_s).c_str(),
                  Seconds(c.cost.compute_s).c_str(), Seconds(c.cost.recompute_s).c_str(),
                  Seconds(c.cost.comm_s).c_str(), Seconds(c.cost.offload_s).c_str());
    out << line;
  }
  if (shown < static_cast<int>(plan.candidates.size())) {
    out << "  (" << shown << " of " << plan.candidates.size()
        << " shown; --top 0 shows them all)\n";
  }
  return out.str();
}

// Why the plan differs from the config as given, in one line.
std::string Why(const MemoryPlan& plan) {
  const PlanCandidate& best = plan.candidates.front();
  if (!plan.base) return "";
  const PlanCandidate& base = *plan.base;
  const runtime::PlanOptions& o = plan.options;
  std::ostringstream out;
  out << "the config as given (" << base.choice.Describe() << ") ";
  if (!plan.base_fits) {
    // Each limit it exceeds, with the excess: the two sizes alone can round to the same text.
    std::vector<std::string> over;
    auto add = [&](int64_t need, const char* what, int64_t limit, const char* kind) {
      over.push_back(FormatBytes(need) + " of " + what + ", " + FormatBytes(need - limit) +
                     " over its " + FormatBytes(limit) + " " + kind);
    };
    if (!o.DeviceOk(base)) {
      add(base.device_bytes, "device memory per rank", o.device_budget_bytes, "budget");
    }
    if (!o.HostOk(base)) {
      add(base.host_bytes_per_node, "host memory per node", o.host_budget_bytes, "limit");
    }
    if (!o.NvmeOk(base)) {
      if (o.NvmeLimited()) {
        add(base.nvme_bytes_per_node, "NVMe per node", o.nvme_budget_bytes, "limit");
      } else {
        over.push_back(FormatBytes(base.nvme_bytes_per_node) +
                       " of NVMe per node, with no NVMe budget given");
      }
    }
    out << "needs ";
    for (size_t i = 0; i < over.size(); ++i) out << (i > 0 ? " and " : "") << over[i];
    out << ": it does not fit";
  } else if (plan.overrides.empty()) {
    out << "fits (" << FormatBytes(base.device_bytes)
        << " of device memory per rank) and is the fastest setting that does";
  } else {
    out << "fits (" << FormatBytes(base.device_bytes) << " of device memory per rank), but "
        << "the plan is predicted faster: " << Seconds(best.cost.total_s) << " per step against "
        << Seconds(base.cost.total_s);
  }
  return out.str();
}

nlohmann::json ChoiceJson(const PlanChoice& c) {
  return {{"stage", c.stage},
          {"offload_optimizer", OffloadDeviceName(c.offload_optimizer)},
          {"offload_optimizer_ratio", c.offload_ratio},
          {"offload_param", OffloadDeviceName(c.offload_param)},
          {"checkpointing", runtime::CheckpointPolicyName(c.policy)},
          {"every_k", c.every_k},
          {"cpu_checkpointing", c.cpu_checkpointing},
          {"micro_batch", c.micro_batch},
          {"gradient_accumulation_steps", c.accumulation},
          {"optimizer_8bit", c.optimizer_8bit}};
}

nlohmann::json CandidateJson(const PlanCandidate& c) {
  const runtime::StepCost& s = c.cost;
  return {{"choice", ChoiceJson(c.choice)},
          {"device_bytes", c.device_bytes},
          {"host_bytes_per_node", c.host_bytes_per_node},
          {"nvme_bytes_per_node", c.nvme_bytes_per_node},
          {"cost",
           {{"total_s", s.total_s},
            {"compute_s", s.compute_s},
            {"recompute_s", s.recompute_s},
            {"comm_s", s.comm_s},
            {"offload_s", s.offload_s},
            {"model_flops", s.model_flops},
            {"recompute_flops", s.recompute_flops},
            {"comm_bytes", s.comm_bytes},
            {"host_link_bytes", s.host_link_bytes},
            {"nvme_bytes", s.nvme_bytes}}},
          {"estimate", runtime::MemoryEstimateJson(c.estimate)}};
}

nlohmann::json PlanJson(const MemoryPlan& plan) {
  const runtime::PlanOptions& o = plan.options;
  nlohmann::json candidates = nlohmann::json::array();
  for (const PlanCandidate& c : plan.candidates) candidates.push_back(CandidateJson(c));
  nlohmann::json json = {{"world_size", plan.world_size},
                         {"ranks_per_node", plan.ranks_per_node},
                         {"budget",
                          {{"device_bytes", o.device_budget_bytes},
                           {"host_bytes_per_node", o.host_budget_bytes},
                           // null: NVMe considered without a limit.
                           {"nvme_bytes_per_node", o.nvme_budget_bytes == runtime::kNoNvmeLimit
                                                       ? nlohmann::json()
                                                       : nlohmann::json(o.nvme_budget_bytes)}}},
                         {"rates",
                          {{"flops_per_s", o.rates.flops_per_s},
                           {"link_bytes_per_s", o.rates.link_bytes_per_s},
                           {"host_link_bytes_per_s", o.rates.host_link_bytes_per_s},
                           {"nvme_bytes_per_s", o.rates.nvme_bytes_per_s}}},
                         {"evaluated", plan.evaluated},
                         {"refused", plan.refused},
                         {"notes", plan.notes},
                         {"best",
                          {{"choice", ChoiceJson(plan.candidates.front().choice)},
                           {"overrides", plan.overrides},
                           {"config", *plan.best.raw}}},
                         {"candidates", std::move(candidates)}};
  if (plan.base) {
    json["base"] = CandidateJson(*plan.base);
    json["base"]["fits"] = plan.base_fits;
  }
  return json;
}

Status WriteConfig(const std::string& path, const runtime::Config& config) {
  const std::string text = config.raw->dump(2) + "\n";
  const std::string_view pieces[] = {text};
  return WriteFileAtomically(FileSystem::Posix(), path, pieces)
      .WithContext("writing the planned config to '" + path + "'");
}

StatusOr<int64_t> OptionalBytes(const std::string& text, const std::string& what) {
  if (text.empty()) return int64_t{0};
  return runtime::ParseBytes(text, what);
}

}  // namespace

StatusOr<runtime::Config> PlanForTraining(const runtime::Config& config, int64_t budget_bytes,
                                          comm::Communicator& comm, std::ostream* out,
                                          DeviceKind device, bool allow_8bit_optimizer) {
  runtime::PlanOptions options;
  options.device = device;
  options.allow_8bit_optimizer = allow_8bit_optimizer;
  options.device_budget_bytes = budget_bytes;
  options.host_budget_bytes = config.offload.max_host_bytes;
  const bool has_nvme_path = !config.zero.offload_optimizer.nvme_path.empty() ||
                             !config.zero.offload_param.nvme_path.empty();
  // The job's start checks the drive's free space itself (runtime/memory/offload_preflight.h).
  options.nvme_budget_bytes = has_nvme_path ? runtime::kNoNvmeLimit : 0;
  HOIST_ASSIGN_OR_RETURN(const comm::NodeCounts nodes, comm::CountRanksPerNode(comm));
  options.ranks_per_node = nodes.most_on_a_node;
  // Every rank and every restart must choose alike, so nothing here is measured.
  options.rates.flops_per_s = runtime::kNominalFlopsPerS;
  StatusOr<MemoryPlan> plan = runtime::PlanMemory(config, comm.world_size(), options);
  if (!plan.ok()) {
    return plan.status().WithContext("--memory-budget " + FormatBytes(budget_bytes));
  }
  if (out != nullptr) {
    const PlanCandidate& best = plan->candidates.front();
    *out << "hoist: memory budget " << FormatBytes(budget_bytes)
         << " per rank: " << best.choice.Describe() << ", predicted device peak "
         << FormatBytes(best.device_bytes) << " (" << plan->candidates.size() << " of "
         << plan->evaluated << " settings fit)\n";
    const std::string why = Why(*plan);
    if (!why.empty()) *out << "hoist: " << why << "\n";
    if (!plan->overrides.empty()) {
      *out << "hoist: planned changes: " << SetFlags(plan->overrides) << "\n";
    }
  }
  return std::move(plan->best);
}

void AddPlanCommand(CLI::App& app, int* exit_code) {
  struct Args {
    std::string config_path;
    std::vector<std::string> overrides;
    std::string memory, host_memory, nvme, nvme_path, output;
    std::string device = "cpu";
    int ranks = 1;
    int nodes = 1;
    int top = 20;
    bool json = false;
    bool allow_8bit = false;
    double flops = 0;
    runtime::CostRates rates;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Find the ZeRO stage, offload, activation checkpointing and micro-batch size that fit a "
      "job into a memory budget, ranked by predicted step time");
  cmd->add_option("-c,--config", args->config_path,
                  "Job config (JSON, DeepSpeed's keys); without it, the demo job");
  cmd->add_option("--memory", args->memory, "Device memory per rank: 16GiB, 512MiB, 80GB, ...")
      ->required();
  cmd->add_option("--host-memory", args->host_memory,
                  "Host memory per node for all its ranks (pinned and pageable); default: no "
                  "limit");
  cmd->add_option("--nvme", args->nvme,
                  "NVMe space per node; without it NVMe offload is not "
                  "considered");
  cmd->add_option("-n,--ranks", args->ranks, "Number of ranks (data-parallel world size)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--nodes", args->nodes, "Number of nodes the ranks are spread over")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--nvme-path", args->nvme_path,
                  "Directory for NVMe offload when the config names no nvme_path");
  cmd->add_option("--set", args->overrides, "Override a config key: --set optimizer.params.lr=3e-4")
      ->take_all();
  cmd->add_option("--device", args->device,
                  "What the ranks train on: cpu, or cuda (--memory is then the GPU's; no GPU "
                  "needed to plan)")
      ->check(CLI::IsMember(kernels::DeviceFactNames()));
  cmd->add_flag("--allow-8bit-optimizer", args->allow_8bit,
                "Also consider 8-bit AdamW moments (optimizer.type AdamW8bit) for an AdamW job: "
                "a quarter of the optimizer's bytes, taken where 32-bit moments do not fit or "
                "a faster setting then fits");
  cmd->add_option("-o,--output", args->output, "Write the best config here (JSON)");
  cmd->add_flag("--json", args->json, "Print the plan as JSON");
  cmd->add_option("--top", args->top, "Rows of the table (0: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--flops", args->flops,
                  "Compute rate in FLOP/s (default: measured with a matmul on this machine)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--link-bandwidth", args->rates.link_bytes_per_s,
                  "Bytes/s between ranks (default 12.5e9)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--host-bandwidth", args->rates.host_link_bytes_per_s,
                  "Bytes/s between device and host (default 24e9)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--nvme-bandwidth", args->rates.nvme_bytes_per_s,
                  "Bytes/s of the NVMe drive of a node (default 3e9)")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, exit_code] {
    auto run = [&]() -> Status {
      if (args->nodes > args->ranks) {
        return InvalidArgumentError("--nodes " + std::to_string(args->nodes) +
                                    " is more than the " + std::to_string(args->ranks) +
                                    " ranks (-n); give at most one node per rank");
      }
      runtime::PlanOptions options;
      HOIST_ASSIGN_OR_RETURN(options.device_budget_bytes,
                             runtime::ParseBytes(args->memory, "--memory"));
      HOIST_ASSIGN_OR_RETURN(options.host_budget_bytes,
                             OptionalBytes(args->host_memory, "--host-memory"));
      HOIST_ASSIGN_OR_RETURN(options.nvme_budget_bytes, OptionalBytes(args->nvme, "--nvme"));
      options.ranks_per_node = (args->ranks + args->nodes - 1) / args->nodes;
      options.nvme_path = args->nvme_path;
      options.allow_8bit_optimizer = args->allow_8bit;
      options.device = kernels::FindDeviceFacts(args->device)->kind;
      options.rates = args->rates;
      options.rates.flops_per_s = args->flops;
      HOIST_ASSIGN_OR_RETURN(runtime::Config config,
                             runtime::LoadConfig(args->config_path, args->overrides, args->ranks));
      HOIST_ASSIGN_OR_RETURN(MemoryPlan plan, runtime::PlanMemory(config, args->ranks, options));
      if (!args->output.empty()) HOIST_RETURN_IF_ERROR(WriteConfig(args->output, plan.best));
      if (args->json) {
        std::cout << PlanJson(plan).dump(2) << "\n";
        return Status::Ok();
      }
      const runtime::PlanOptions& o = plan.options;
      const runtime::ModelConfig& m = config.model;
      std::cout << "job: GPT-2, " << m.n_layer << " layers, " << m.n_embd << " wide, "
                << DTypeName(config.precision()) << ", train_batch_size " << config.train_batch_size
                << " on " << plan.world_size << (plan.world_size == 1 ? " rank" : " ranks") << " ("
                << plan.ranks_per_node << " per node)\n";
      std::cout << "budget: device " << FormatBytes(o.device_budget_bytes) << " per rank, host "
                << Limit(o.host_budget_bytes, "no limit") << ", NVMe "
                << Limit(o.nvme_budget_bytes, "not considered") << "\n";
      std::cout << "rates: " << Rate(o.rates.flops_per_s, "FLOP")
                << (args->flops > 0 ? "" : " (measured matmul)") << ", link "
                << Rate(o.rates.link_bytes_per_s, "B") << ", host link "
                << Rate(o.rates.host_link_bytes_per_s, "B") << ", NVMe "
                << Rate(o.rates.nvme_bytes_per_s, "B") << " per node\n";
      std::cout << plan.candidates.size() << " of " << plan.evaluated
                << " settings fit; predicted peaks, step time and its parts (* best; offload is "
                   "optimizer/params):\n"
                << Table(plan, args->top);
      for (const std::string& note : plan.notes) std::cout << "note: " << note << "\n";
      const PlanCandidate& best = plan.candidates.front();
      std::cout << "best: " << best.choice.Describe() << ": device "
                << FormatBytes(best.device_bytes) << " per rank, step "
                << Seconds(best.cost.total_s) << "\n";
      const std::string why = Why(plan);
      if (!why.empty()) std::cout << why << "\n";
      std::cout << "changes from the config: "
                << (plan.overrides.empty() ? "none" : SetFlags(plan.overrides)) << "\n";
      if (args->output.empty()) {
        std::cout << "(-o FILE writes the best config)\n";
      } else {
        std::cout << "wrote " << args->output << " (for " << plan.world_size
                  << (plan.world_size == 1 ? " rank" : " ranks")
                  << "; train it with hoist train -c " << args->output << ")\n";
      }
      return Status::Ok();
    };
    Status status = run();
    *exit_code = status.ok() ? 0 : ReportError(status);
  });
}

}  // namespace hoist::launcher

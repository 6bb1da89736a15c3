// `hoist estimate -c job.json [-n RANKS] [--nodes M] [--device cpu|cuda] [--set k=v ...]
// [--json]`: the memory each rank of the job will hold, by place and category, predicted from
// the config alone (runtime/memory/memory_estimate.h), on the device it would train on.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device_facts.h"
#include "launcher/commands.h"
#include "runtime/config/config.h"
#include "runtime/memory/memory_estimate.h"

namespace hoist::launcher {

void AddEstimateCommand(CLI::App& app, int* exit_code) {
  struct Args {
    std::string config_path;
    std::vector<std::string> overrides;
    int ranks = 1;
    int nodes = 1;
    std::string device = "cpu";
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "estimate",
      "Predict the memory of each rank (by place and category, with the peak and its phase) "
      "from the config, without running it. Without -c, the embedded demo job.");
  cmd->add_option("-c,--config", args->config_path, "Job config (JSON, DeepSpeed's keys)");
  cmd->add_option("-n,--ranks", args->ranks, "Ranks (data-parallel world size)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--nodes", args->nodes, "Nodes the ranks are spread over (for per-node totals)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--device", args->device,
                  "What the ranks train on: cpu, or cuda (the GPU's memory as place device; "
                  "no GPU needed to estimate)")
      ->check(CLI::IsMember(kernels::DeviceFactNames()));
  cmd->add_option("--set", args->overrides,
                  "Override a config key: --set zero_optimization.stage=3")
      ->take_all();
  cmd->add_flag("--json", args->json,
                "Print JSON: peak {place: {category: bytes}} and peak_total {place: bytes}, as "
                "in the JSONL log's end record");
  cmd->callback([args, exit_code] {
    if (args->nodes > args->ranks) {
      *exit_code = ReportError(InvalidArgumentError(
          "--nodes " + std::to_string(args->nodes) + " is more than --ranks " +
          std::to_string(args->ranks) + "; every node runs at least one rank"));
      return;
    }
    StatusOr<runtime::Config> config =
        runtime::LoadConfig(args->config_path, args->overrides, args->ranks);
    if (!config.ok()) {
      *exit_code = ReportError(config.status());
      return;
    }
    // Every device with facts, whether or not this build trains on it: no GPU needed.
    const DeviceKind device = kernels::FindDeviceFacts(args->device)->kind;
    StatusOr<runtime::MemoryEstimate> estimate =
        runtime::EstimateMemory(*config, args->ranks, device);
    if (!estimate.ok()) {
      *exit_code = ReportError(estimate.status());
      return;
    }
    const int ranks_per_node = (args->ranks + args->nodes - 1) / args->nodes;
    if (args->json) {
      nlohmann::json json = runtime::MemoryEstimateJson(*estimate);
      json["ranks_per_node"] = ranks_per_node;
      std::cout << json.dump(2) << "\n";
    } else {
      std::cout << runtime::FormatMemoryEstimate(*estimate, *config, ranks_per_node);
    }
    *exit_code = 0;
  });
}

}  // namespace hoist::launcher

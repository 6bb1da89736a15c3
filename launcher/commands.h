// The subcommands of the `hoist` binary. Each registers its flags on a CLI11 app and runs when
// chosen; a Status failure ends as one "hoist: error: ..." line and exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/status.h"
#include "runtime/config/config.h"

namespace hoist::launcher {

// Registers the subcommand on `app`; the returned callback runs it and gives the exit code.
void AddTrainCommand(CLI::App& app, int* exit_code);
void AddDataCommand(CLI::App& app, int* exit_code);
void AddSampleCommand(CLI::App& app, int* exit_code);
void AddReportCommand(CLI::App& app, int* exit_code);
// `hoist launch`, the process supervisor (launcher/launch_command.cc).
void AddLaunchCommand(CLI::App& app, int* exit_code);
// `hoist ctl`, the control service's client (launcher/ctl_command.cc).
void AddCtlCommand(CLI::App& app, int* exit_code);
// `hoist plan`, the memory-budget planner (launcher/plan_command.cc).
void AddPlanCommand(CLI::App& app, int* exit_code);

// `hoist train --memory-budget`: `config` planned for `budget_bytes` of device memory per rank on
// comm's ranks (runtime/memory/memory_plan.h, with nominal rates so that every rank and every
// restart choose alike; the host limit is offload.max_host_bytes; NVMe only where the config names
// an nvme_path). A collective: every rank calls it. Prints the choice and the changes to `out`
// (rank 0's stdout; null: silent). Errors: the planner's, naming the budget.
// `device`: what the ranks train on (the GPU: its memory is the budget);
// `allow_8bit_optimizer`: PlanOptions' (--allow-8bit-optimizer).
StatusOr<runtime::Config> PlanForTraining(const runtime::Config& config, int64_t budget_bytes,
                                          comm::Communicator& comm, std::ostream* out,
                                          DeviceKind device = DeviceKind::kCpu,
                                          bool allow_8bit_optimizer = false);
// `hoist estimate`, the per-rank memory of a config without running it
// (launcher/estimate_command.cc).
void AddEstimateCommand(CLI::App& app, int* exit_code);
// `hoist export`, a checkpoint's weights for other tools (launcher/export_command.cc).
void AddExportCommand(CLI::App& app, int* exit_code);

// Prints `status` as the one-line error of the program and returns the exit code for it.
int ReportError(const Status& status);

}  // namespace hoist::launcher

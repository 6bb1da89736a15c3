// The `hoist` binary: one program, several subcommands (train, data, sample, report, launch,
// ctl, plan).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "launcher/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"hoist: train language models larger than your memory, natively", "hoist"};
  app.require_subcommand(1);
  app.set_version_flag("--version", HOIST_VERSION);
  int exit_code = 0;
  hoist::launcher::AddTrainCommand(app, &exit_code);
  hoist::launcher::AddDataCommand(app, &exit_code);
  hoist::launcher::AddSampleCommand(app, &exit_code);
  hoist::launcher::AddReportCommand(app, &exit_code);
  hoist::launcher::AddLaunchCommand(app, &exit_code);
  hoist::launcher::AddCtlCommand(app, &exit_code);
  hoist::launcher::AddPlanCommand(app, &exit_code);
  hoist::launcher::AddEstimateCommand(app, &exit_code);
  hoist::launcher::AddExportCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    // Every expected failure is a Status; this is the last line of defence against a library
    // exception, so that it still ends in one message and a non-zero exit instead of an abort.
    std::fprintf(stderr, "hoist: error: unexpected failure: %s\n", e.what());
    return 1;
  }
  return exit_code;
}

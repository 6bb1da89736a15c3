// The host memory of importing a Hugging Face checkpoint: what one rank's resident set grows by
// while it reads the weights it keeps (runtime/interchange/hf_checkpoint.h FillRange, as
// ZeroEngine::Initialize asks for them), against the file's size and the rank's share.
//
//   import_memory_bench [--layers 24] [--width 1024] [--world 8] [--dir /tmp/hoist_import_bench]
//
// It writes a GPT-2 of that shape (random weights, fp32) as a Hugging Face directory, then runs
// itself as a child process per measurement, so that each peak resident set (VmHWM) is its own:
//   shard   what a rank at ZeRO stage 3 on `world` ranks reads: its shard of every unit, kept in
//           one buffer of the shard's size (as the engine keeps its master weights);
//   unit    what a rank below stage 3 reads: every unit whole, one at a time, into one buffer;
//   whole   the file read whole into memory, the anchor: what a loader without ranges holds.
// It prints each peak above the process's baseline, the shard's and the file's bytes and the
// ratios. The page cache is not part of a resident set (pread, not mmap).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "runtime/config/config.h"
#include "runtime/interchange/hf_checkpoint.h"
#include "runtime/model/model.h"
#include "zero/partition.h"

extern char** environ;

namespace {

using hoist::runtime::ModelConfig;

struct Args {
  int layers = 24;
  int width = 1024;
  int world = 8;
  std::string dir = "/tmp/hoist_import_bench";
  std::string mode;  // the child's measurement
};

int64_t Mib(int64_t bytes) { return bytes >> 20; }

// This process's peak resident set (VmHWM). Not getrusage's ru_maxrss: that survives exec, so a
// child would start from its parent's peak.
int64_t PeakResident() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  }
  return 0;
}

ModelConfig Model(const Args& args) {
  ModelConfig m;
  m.n_layer = args.layers;
  m.n_embd = args.width;
  m.n_head = args.width / 64;
  m.vocab_size = 50257;
  m.seq_len = 1024;
  return m;
}

void Check(const hoist::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "import_memory_bench: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

// The child: one measurement, printing "peak_delta_bytes".
int Measure(const Args& args) {
  const int64_t baseline = PeakResident();
  const std::string hf = args.dir + "/hf";
  if (args.mode == "whole") {
    std::ifstream in(hf + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::printf("%lld\n",
                static_cast<long long>(PeakResident() - baseline + (bytes.empty() ? 1 : 0)));
    return 0;
  }
  auto source = hoist::runtime::OpenWeightSource(hf);
  Check(source.status(), "opening the checkpoint");
  const std::vector<hoist::zero::UnitSpec> units = hoist::runtime::ModelUnits((*source)->model());
  auto plan = hoist::zero::PartitionPlan::Build(units, args.world, /*rank=*/0);
  Check(plan.status(), "partitioning");
  if (args.mode == "shard") {
    std::vector<float> shard(static_cast<size_t>(plan->total_shard()));
    for (int u = 0; u < plan->num_units(); ++u) {
      const hoist::zero::UnitPartition& part = plan->unit(u);
      Check((*source)->FillRange(u, part.owned_begin, part.shard, shard.data() + part.shard_offset),
            "reading a shard");
    }
  } else {
    std::vector<float> unit;
    for (int u = 0; u < plan->num_units(); ++u) {
      unit.resize(static_cast<size_t>(units[static_cast<size_t>(u)].size));
      Check((*source)->FillUnit(u, unit.data()), "reading a unit");
    }
  }
  std::printf("%lld\n", static_cast<long long>(PeakResident() - baseline));
  return 0;
}

int64_t RunChild(const Args& args, const char* mode) {
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string out = args.dir + "/" + mode + ".out";
  std::vector<std::string> argv = {exe,
                                   "--layers",
                                   std::to_string(args.layers),
                                   "--width",
                                   std::to_string(args.width),
                                   "--world",
                                   std::to_string(args.world),
                                   "--dir",
                                   args.dir,
                                   "--measure",
                                   mode};
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  if (posix_spawn(&pid, exe.c_str(), &actions, nullptr, raw.data(), environ) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&actions);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "import_memory_bench: the %s measurement failed\n", mode);
    std::exit(1);
  }
  std::ifstream in(out);
  long long bytes = -1;
  in >> bytes;
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--layers")
      args.layers = std::atoi(value.c_str());
    else if (key == "--width")
      args.width = std::atoi(value.c_str());
    else if (key == "--world")
      args.world = std::atoi(value.c_str());
    else if (key == "--dir")
      args.dir = value;
    else if (key == "--measure")
      args.mode = value;
    else {
      std::fprintf(stderr, "import_memory_bench: unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (args.layers < 1 || args.width < 64 || args.width % 64 != 0 || args.world < 1) {
    std::fprintf(stderr, "import_memory_bench: --width must be a multiple of 64 (64-wide heads)\n");
    return 2;
  }
  if (!args.mode.empty()) return Measure(args);

  // The checkpoint: random weights, written once per shape.
  const ModelConfig model = Model(args);
  const int64_t parameters = hoist::runtime::ModelParameterCount(model);
  const std::string hf = args.dir + "/hf";
  if (!std::filesystem::exists(hf + "/model.safetensors")) {
    std::vector<float> weights(static_cast<size_t>(parameters));
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& w : weights) w = normal(rng);
    Check(hoist::runtime::WriteHfCheckpoint(hf, model, weights.data(), {}), "writing");
  }
  const int64_t file = static_cast<int64_t>(std::filesystem::file_size(hf + "/model.safetensors"));
  auto plan = hoist::zero::PartitionPlan::Build(hoist::runtime::ModelUnits(model), args.world, 0);
  Check(plan.status(), "partitioning");
  const int64_t shard_bytes = plan->total_shard() * 4;
  int64_t largest_unit = 0;
  for (const auto& unit : hoist::runtime::ModelUnits(model)) {
    largest_unit = std::max(largest_unit, unit.size * 4);
  }
  std::printf(
      "GPT-2, %d layers, %d wide: %lld parameters; model.safetensors %lld MiB; rank 0 of "
      "%d at stage 3 keeps %lld MiB; the largest unit is %lld MiB\n",
      args.layers, args.width, static_cast<long long>(parameters),
      static_cast<long long>(Mib(file)), args.world, static_cast<long long>(Mib(shard_bytes)),
      static_cast<long long>(Mib(largest_unit)));
  const int64_t whole = RunChild(args, "whole");
  const int64_t unit = RunChild(args, "unit");
  const int64_t shard = RunChild(args, "shard");
  std::printf("peak resident set above the process's baseline:\n");
  std::printf("  whole file read into memory (anchor)   %6lld MiB  %.2fx the file\n",
              static_cast<long long>(Mib(whole)), double(whole) / double(file));
  std::printf("  every unit whole, one at a time        %6lld MiB  %.2fx the largest unit\n",
              static_cast<long long>(Mib(unit)), double(unit) / double(largest_unit));
  std::printf(
      "  stage-3 shard of every unit (rank 0)   %6lld MiB  %.2fx the shard, %.3fx the file\n",
      static_cast<long long>(Mib(shard)), double(shard) / double(shard_bytes),
      double(shard) / double(file));
  return 0;
}

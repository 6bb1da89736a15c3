// A small `hoist train` job for the launcher's tests that run real training: its --set
// arguments, its JSONL log and its checkpoint directory.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/background_hoist.h"

namespace hoist::launcher::testing {

namespace fs = std::filesystem;

// A small job whose learning rate does not depend on train.steps, so that runs of different
// lengths take the same steps.
inline std::vector<std::string> JobSets(const fs::path& dir, const std::string& log,
                                        int64_t steps) {
  return {"model.n_layer=1",
          "model.n_embd=32",
          "model.n_head=2",
          "model.seq_len=32",
          "train_batch_size=8",
          "train_micro_batch_size_per_gpu=4",
          "gradient_accumulation_steps=null",
          "train.steps=" + std::to_string(steps),
          "scheduler.params.total_num_steps=1000000",
          "scheduler.params.warmup_num_steps=2",
          "train.eval_interval=0",
          "steps_per_print=0",
          "checkpoint.interval_steps=0",
          "checkpoint.dir=" + (dir / "ck").string(),
          "monitor.jsonl.path=" + (dir / log).string()};
}

inline std::vector<std::string> TrainArgs(const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"train"};
  for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
  return args;
}

inline std::string ShellArgs(const std::vector<std::string>& args) {
  std::string text;
  for (const std::string& arg : args) text += " '" + arg + "'";
  return text;
}

// The JSONL log's records: step records by step number, and the end record (null if none).
struct Log {
  std::map<int64_t, float> losses;
  nlohmann::json end;
};

inline Log ReadLog(const fs::path& path) {
  Log log;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded()) continue;  // a line still being written
    if (record.contains("event")) {
      log.end = record;
    } else {
      log.losses[record["step"].get<int64_t>()] = record["loss"].get<float>();
    }
  }
  return log;
}

// Waits until the log holds `steps` step records (or the job ended); false after 60 s.
inline bool WaitForSteps(Background& job, const fs::path& log, size_t steps) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ReadLog(log).losses.size() < steps) {
    if (job.Wait(0) != -1 || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The step directory `latest` points at, "" without one.
inline std::string Latest(const fs::path& ck) {
  std::ifstream in(ck / "latest");
  std::string name;
  in >> name;
  return name;
}

}  // namespace hoist::launcher::testing

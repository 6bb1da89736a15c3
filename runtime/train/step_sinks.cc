#include "runtime/train/step_sinks.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <utility>

#include "runtime/memory/memory_report.h"

namespace hoist::runtime {
namespace {

class Progress final : public StepSink {
 public:
  Progress(std::ostream* out, int64_t print_every) : out_(out), print_every_(print_every) {}

  Status Take(const StepReport& report) override {
    const StepRecord& r = report.record;
    if (report.val_loss) {
      char text[96];
      std::snprintf(text, sizeof(text), "step %6lld/%lld | val loss %.4f\n",
                    static_cast<long long>(r.step), static_cast<long long>(report.total_steps),
                    static_cast<double>(*report.val_loss));
      *out_ << text;
    }
    if (print_every_ <= 0 || !(r.step % print_every_ == 0 || r.step == 1 || report.last())) {
      return Status::Ok();
    }
    const MemorySnapshot& memory = report.memory;
    char line[320];
    int n =
        std::snprintf(line, sizeof(line),
                      "step %6lld/%lld | loss %.4f | lr %.3e | norm %.3f | %8.0f tok/s | "
                      "%7.1f ms | mem %s (peak %s)",
                      static_cast<long long>(r.step), static_cast<long long>(report.total_steps),
                      r.loss, r.lr, r.grad_norm, r.tokens_per_s, r.step_s * 1e3,
                      FormatBytes(memory.CurrentTotal(Place::kDevice)).c_str(),
                      FormatBytes(memory.peak_total[int(Place::kDevice)]).c_str());
    if (report.loss_scaled && n > 0 && n < static_cast<int>(sizeof(line))) {
      std::snprintf(line + n, sizeof(line) - static_cast<size_t>(n), " | scale %g%s",
                    static_cast<double>(r.loss_scale), r.skipped ? " (skipped)" : "");
    }
    *out_ << line << "\n" << std::flush;
    return Status::Ok();
  }

 private:
  std::ostream* out_;
  int64_t print_every_;
};

class Jsonl final : public StepSink {
 public:
  explicit Jsonl(JsonlLog* log) : log_(log) {}

  Status Take(const StepReport& report) override {
    const StepRecord& r = report.record;
    nlohmann::json phases = nlohmann::json::object();
    for (int p = 0; p < kNumTimedPhases; ++p) {
      phases[PhaseName(static_cast<Phase>(p))] = r.phase_s[p];
    }
    nlohmann::json line = {{"step", r.step},
                           {"rank", report.rank},
                           {"loss", r.loss},
                           {"lr", r.lr},
                           {"grad_norm", r.grad_norm},
                           {"loss_scale", r.loss_scale},
                           {"skipped", r.skipped},
                           {"tokens_per_s", r.tokens_per_s},
                           {"step_s", r.step_s},
                           {"phase_s", std::move(phases)},
                           {"memory", MemoryTableJson(report.memory.current)},
                           {"peak", MemoryTableJson(report.memory.peak)}};
    if (!std::isfinite(r.grad_norm)) line["grad_norm"] = nullptr;
    if (report.recompute_timed) line["recompute_s"] = r.recompute_s;
    if (report.val_loss) line["val_loss"] = *report.val_loss;
    return log_->Write(line);
  }

 private:
  JsonlLog* log_;
};

class Metrics final : public StepSink {
 public:
  explicit Metrics(MetricsExporter* exporter) : exporter_(exporter) {}

  Status Take(const StepReport& report) override {
    const StepRecord& r = report.record;
    StepMetrics metrics;
    metrics.steps = r.step;
    metrics.skipped_steps = report.skipped_steps;
    metrics.loss = r.loss;
    metrics.lr = r.lr;
    metrics.grad_norm = r.grad_norm;
    metrics.loss_scale = r.loss_scale;
    metrics.tokens_per_s = r.tokens_per_s;
    metrics.step_s = r.step_s;
    metrics.phase_s = r.phase_s;
    metrics.comm_bytes = report.comm_bytes;
    metrics.offload_bytes = report.offload_bytes;
    exporter_->RecordStep(metrics);
    exporter_->RecordMemory(report.memory);
    return Status::Ok();
  }

 private:
  MetricsExporter* exporter_;
};

class ControlStatus final : public StepSink {
 public:
  ControlStatus(comm::Communicator* comm, JobController* controller)
      : comm_(comm), controller_(controller) {}

  Status Take(const StepReport& report) override {
    // Every rank's memory tables travel bit for bit as fp32 words through an all-gather (a copy,
    // no arithmetic), so that rank 0 can answer GetStatus with the whole job's memory.
    constexpr size_t kTableBytes = sizeof(MemorySnapshot::Table);
    constexpr int64_t kWords = 2 * kTableBytes / sizeof(float);
    const int world_size = comm_->world_size();
    gathered_.resize(static_cast<size_t>(kWords * (world_size + 1)));
    float* mine = gathered_.data() + kWords * world_size;
    std::memcpy(mine, &report.memory.current, kTableBytes);
    std::memcpy(reinterpret_cast<char*>(mine) + kTableBytes, &report.memory.peak, kTableBytes);
    HOIST_RETURN_IF_ERROR(comm_->AllGather(mine, gathered_.data(), kWords, DType::kFloat32));
    if (controller_ == nullptr) return Status::Ok();
    const StepRecord& r = report.record;
    JobStatus status;
    status.step = r.step;
    status.loss = r.loss;
    status.lr = r.lr;
    status.grad_norm = r.grad_norm;
    status.loss_scale = r.loss_scale;
    status.tokens_per_s = r.tokens_per_s;
    status.step_s = r.step_s;
    status.skipped_steps = report.skipped_steps;
    status.memory.resize(static_cast<size_t>(world_size));
    for (int rank = 0; rank < world_size; ++rank) {
      const char* words = reinterpret_cast<const char*>(gathered_.data() + kWords * rank);
      RankMemory& rank_memory = status.memory[static_cast<size_t>(rank)];
      rank_memory.rank = rank;
      std::memcpy(&rank_memory.current, words, kTableBytes);
      std::memcpy(&rank_memory.peak, words + kTableBytes, kTableBytes);
    }
    controller_->Publish(status);
    return Status::Ok();
  }

 private:
  comm::Communicator* comm_;
  JobController* controller_;
  std::vector<float> gathered_;  // the all-gather's buffer, kept between steps
};

}  // namespace

std::unique_ptr<StepSink> ProgressSink(std::ostream* out, int64_t print_every) {
  return std::make_unique<Progress>(out, print_every);
}

std::unique_ptr<StepSink> JsonlSink(JsonlLog* log) { return std::make_unique<Jsonl>(log); }

std::unique_ptr<StepSink> MetricsSink(MetricsExporter* exporter) {
  return std::make_unique<Metrics>(exporter);
}

std::unique_ptr<StepSink> ControlStatusSink(comm::Communicator* comm, JobController* controller) {
  return std::make_unique<ControlStatus>(comm, controller);
}

}  // namespace hoist::runtime

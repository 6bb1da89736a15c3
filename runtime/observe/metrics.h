// MetricsExporter: the Prometheus endpoint of one rank. It serves the text exposition format at
// http://<metrics.bind>:<metrics.port + local rank>/metrics (any port the system picks when
// metrics.port is 0) from its own server thread, with the names of DESIGN.md, every series
// labelled with the rank:
//
//   hoist_memory_bytes{place,category}       bytes held now, as the memory tracker counts them
//   hoist_memory_peak_bytes{place,category}  the most ever held
//   hoist_memory_peak_total_bytes{place}     the largest simultaneous sum over categories
//   hoist_steps_total, hoist_skipped_steps_total
//   hoist_loss, hoist_lr, hoist_grad_norm, hoist_loss_scale    of the last optimizer step
//   hoist_tokens_per_second, hoist_step_seconds                of the last optimizer step
//   hoist_step_phase_seconds{phase}          the last step's seconds in each phase (hoist::Phase)
//   hoist_comm_bytes_total{op}               bytes handed to collectives
//   (comm/counting_communicator.h) hoist_offload_bytes_total{direction,target}  bytes read from and
//   written to offload storage hoist_paused                             1 while the job is paused
//   by its control service hoist_process_resident_memory_bytes, hoist_process_threads,
//   hoist_process_cpu_seconds_total
//                                            read from /proc/self/stat when scraped
//
// Every series exists from the start (memory rows at 0 until a place holds bytes), so a
// dashboard's stacks and queries never find a hole. The handles behind the Record* calls are
// made once in Start: recording sets atomics, allocates nothing and takes no lock the scrape
// holds for long. The metrics live in a prometheus-cpp Registry and are written by its text
// serializer; the HTTP side is a small server of hoist's own, one thread that serves every
// connection at once with a deadline each (runtime/observe/metrics_http.h, which says why not a
// library). A metrics.bind other than loopback is served with a one-line warning: the metrics carry
// no authentication. Builds without prometheus-cpp compile this class too, and Start then fails
// with what to install.
//
// Thread-safety: Record* are called from one thread at a time (the training loop), concurrently
// with scrapes served by the exporter's thread. Start blocks until the port is bound; the
// destructor blocks until the server thread has stopped (at most one serialisation in progress).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "comm/counting_communicator.h"
#include "core/memory_tracker.h"
#include "core/phase.h"
#include "core/status.h"
#include "runtime/config/config.h"

namespace hoist::runtime {

// The trainer times the first kNumTimedPhases phases of core/phase.h (the metric's `phase`
// label): data, forward (the loss included), backward, reduce, optimizer.

// Offload traffic (the metric's labels): direction read/write, target host_pinned/nvme.
inline constexpr int kNumOffloadDirections = 2;  // 0 read, 1 write
inline constexpr int kNumOffloadTargets = 2;     // 0 host_pinned, 1 nvme

// What the exporter publishes after an optimizer step.
struct StepMetrics {
  int64_t steps = 0;          // optimizer steps taken so far in the run (resumed ones included)
  int64_t skipped_steps = 0;  // of them, those skipped for inf/NaN gradients
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;  // may be NaN or inf on a skipped step; served as such
  double loss_scale = 1;
  double tokens_per_s = 0;
  double step_s = 0;
  std::array<double, kNumTimedPhases> phase_s{};  // by Phase
  // Totals since the start of the process; the counters follow them (never down).
  std::array<int64_t, comm::kNumCollectiveOps> comm_bytes{};  // by comm::CollectiveOp
  std::array<std::array<int64_t, kNumOffloadTargets>, kNumOffloadDirections> offload_bytes{};
};

class MetricsExporter {
 public:
  // Whether this build has prometheus-cpp (HOIST_WITH_PROMETHEUS found it).
  static bool Available();

  // Binds metrics.bind on metrics.port + local_rank (or an ephemeral port when metrics.port is
  // 0) and starts serving. A port that cannot be bound (in use, not permitted, an address this
  // machine lacks) is an Unavailable error naming the address and port; a build without
  // prometheus-cpp is a FailedPrecondition error naming what to install.
  static StatusOr<std::unique_ptr<MetricsExporter>> Start(const MetricsConfig& config, int rank,
                                                          int local_rank);

  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  // The port actually bound (the system's choice when metrics.port is 0).
  int port() const;
  // "http://127.0.0.1:9400/metrics" (IPv6 addresses in brackets).
  const std::string& url() const;

  // Publishes one optimizer step. The step and skipped counters follow `step`'s totals (they
  // never go down: a smaller total than already published leaves them as they are).
  void RecordStep(const StepMetrics& step);
  // Publishes the memory tracker's current and peak bytes.
  void RecordMemory(const MemorySnapshot& memory);
  // Publishes whether the job is paused.
  void RecordPaused(bool paused);

 private:
  struct Impl;
  explicit MetricsExporter(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace hoist::runtime

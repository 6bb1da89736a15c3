// What `hoist ctl` shows and what it accepts, apart from talking to the server: the status as a
// block for people, as one line per update for `watch`, as JSON for tools, and the client-side
// checks of its arguments (`set KEY=VALUE`, `--addr HOST:PORT`). Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/observe/control.h"

#if HOIST_HAVE_GRPC
#include "hoist/v1/control.pb.h"
#endif

namespace hoist::launcher {

// The keys `hoist ctl set` accepts, in the order its messages list them.
inline constexpr const char* kCtlSetKeys[] = {"lr", "gradient_clipping"};

// Parses `set`'s "lr=3e-4 gradient_clipping=1" into an update. An unknown key (naming the
// allowed ones), a value that is not a number, or a key given twice is InvalidArgument. The
// ranges are the server's to check.
StatusOr<runtime::HyperparamUpdate> ParseSetAssignments(const std::vector<std::string>& args);

// The host of "HOST:PORT" or "[V6]:PORT"; InvalidArgument (saying the expected form) when
// `address` has no host or no port in [1, 65535].
StatusOr<std::string> AddressHost(const std::string& address);

// Whether `host` is this machine by a loopback address: "localhost", 127.0.0.0/8, "::1".
bool IsLoopbackHost(const std::string& host);

#if HOIST_HAVE_GRPC

// "running", "paused", ... (the JobState names of runtime/observe/control.h).
std::string StateName(hoist::v1::JobState state);

// The `status` block: state, step, loss, lr, gradient norm, throughput, the last checkpoint and
// each rank's memory by place and category (current / peak, in binary units).
std::string FormatStatus(const hoist::v1::JobStatus& status);

// One line for `watch`: "step 120/1000  running  loss 3.4521  lr 3.000e-04  ...".
std::string FormatWatchLine(const hoist::v1::JobStatus& status);

// The status as one JSON object with the proto's field names; memory as
// [{"rank": r, "current": {place: {category: bytes}}, "peak": {...}}] (the JSONL log's shape).
nlohmann::json StatusJson(const hoist::v1::JobStatus& status);

#endif  // HOIST_HAVE_GRPC

}  // namespace hoist::launcher

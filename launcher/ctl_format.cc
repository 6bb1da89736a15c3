#include "launcher/ctl_format.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/memory_tracker.h"

namespace hoist::launcher {
namespace {

std::string AllowedKeys() {
  std::string keys;
  for (const char* key : kCtlSetKeys) keys += (keys.empty() ? "" : " and ") + std::string(key);
  return keys;
}

[[maybe_unused]] std::string Printf(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

}  // namespace

StatusOr<runtime::HyperparamUpdate> ParseSetAssignments(const std::vector<std::string>& args) {
  runtime::HyperparamUpdate update;
  if (args.empty()) {
    return InvalidArgumentError("set needs KEY=VALUE, e.g. set lr=3e-4; the keys are " +
                                AllowedKeys());
  }
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      return InvalidArgumentError("set: \"" + arg + "\" is not KEY=VALUE (e.g. lr=3e-4)");
    }
    const std::string key = arg.substr(0, eq), text = arg.substr(eq + 1);
    std::optional<double>* slot = nullptr;
    if (key == "lr") slot = &update.lr;
    if (key == "gradient_clipping") slot = &update.gradient_clipping;
    if (slot == nullptr) {
      return InvalidArgumentError("set: unknown key \"" + key + "\"; the keys are " +
                                  AllowedKeys());
    }
    if (slot->has_value()) return InvalidArgumentError("set: " + key + " is given twice");
    errno = 0;
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE) {
      return InvalidArgumentError("set: " + key + " must be a number, got \"" + text + "\"");
    }
    *slot = value;
  }
  return update;
}

StatusOr<std::string> AddressHost(const std::string& address) {
  const Status bad = InvalidArgumentError(
      "--addr must be HOST:PORT (e.g. 127.0.0.1:7070, or [::1]:7070 for IPv6), got \"" + address +
      "\"");
  std::string host, port;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return bad;
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || address.find(':') != colon) return bad;
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return bad;
  }
  const int number = std::atoi(port.c_str());
  if (number < 1 || number > 65535) return bad;
  return host;
}

bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

#if HOIST_HAVE_GRPC

std::string StateName(hoist::v1::JobState state) {
  switch (state) {
    case hoist::v1::JOB_STATE_STARTING: return "starting";
    case hoist::v1::JOB_STATE_RUNNING: return "running";
    case hoist::v1::JOB_STATE_PAUSED: return "paused";
    case hoist::v1::JOB_STATE_STOPPING: return "stopping";
    case hoist::v1::JOB_STATE_FINISHED: return "finished";
    case hoist::v1::JOB_STATE_FAILED: return "failed";
    default: return "unknown";
  }
}

std::string FormatStatus(const hoist::v1::JobStatus& s) {
  std::ostringstream out;
  auto row = [&out](const char* name, const std::string& value) {
    char label[24];
    std::snprintf(label, sizeof(label), "%-14s", name);
    out << label << value << "\n";
  };
  row("state", StateName(s.state()));
  row("step", std::to_string(s.step()) + " / " + std::to_string(s.total_steps()));
  row("loss", Printf("%.4f", s.loss()));
  row("lr", Printf("%.3e", s.lr()) + (s.has_lr_override()
                                          ? " (set to " + Printf("%.3e", s.lr_override()) + ")"
                                          : " (schedule)"));
  row("grad norm", Printf("%.4g", s.grad_norm()));
  row("clipping", s.gradient_clipping() > 0 ? Printf("%g", s.gradient_clipping()) : "off");
  row("loss scale", Printf("%g", s.loss_scale()));
  row("tokens/s", Printf("%.0f", s.tokens_per_s()));
  row("step time", Printf("%.3f s", s.step_s()));
  row("skipped", std::to_string(s.skipped_steps()));
  row("checkpoint", s.last_checkpoint().empty() ? "none yet" : s.last_checkpoint());
  row("world size", std::to_string(s.world_size()));
  out << "memory (current / peak)\n";
  for (const hoist::v1::RankMemory& rank : s.memory()) {
    out << "  rank " << rank.rank() << "\n";
    if (rank.entries().empty()) out << "    nothing allocated yet\n";
    for (const hoist::v1::MemoryEntry& e : rank.entries()) {
      char line[160];
      std::snprintf(line, sizeof(line), "    %-12s %-11s %12s / %s\n", e.place().c_str(),
                    e.category().c_str(), FormatBytes(e.current_bytes()).c_str(),
                    FormatBytes(e.peak_bytes()).c_str());
      out << line;
    }
  }
  return out.str();
}

std::string FormatWatchLine(const hoist::v1::JobStatus& s) {
  int64_t device_bytes = 0;
  if (!s.memory().empty()) {
    for (const hoist::v1::MemoryEntry& e : s.memory(0).entries()) {
      if (e.place() == "device") device_bytes += e.current_bytes();
    }
  }
  std::ostringstream out;
  out << "step " << s.step() << "/" << s.total_steps() << "  " << StateName(s.state()) << "  loss "
      << Printf("%.4f", s.loss()) << "  lr " << Printf("%.3e", s.lr()) << "  norm "
      << Printf("%.3g", s.grad_norm()) << "  " << Printf("%.0f", s.tokens_per_s()) << " tok/s  "
      << Printf("%.3f", s.step_s()) << " s/step  rank 0 device " << FormatBytes(device_bytes);
  return out.str();
}

nlohmann::json StatusJson(const hoist::v1::JobStatus& s) {
  nlohmann::json j = {
      {"state", StateName(s.state())},
      {"step", s.step()},
      {"total_steps", s.total_steps()},
      {"loss", s.loss()},
      {"lr", s.lr()},
      {"grad_norm", s.grad_norm()},
      {"loss_scale", s.loss_scale()},
      {"tokens_per_s", s.tokens_per_s()},
      {"step_s", s.step_s()},
      {"skipped_steps", s.skipped_steps()},
      {"gradient_clipping", s.gradient_clipping()},
      {"lr_override", s.has_lr_override() ? nlohmann::json(s.lr_override()) : nlohmann::json()},
      {"last_checkpoint", s.last_checkpoint()},
      {"world_size", s.world_size()},
      {"version", s.version()},
  };
  nlohmann::json memory = nlohmann::json::array();
  for (const hoist::v1::RankMemory& rank : s.memory()) {
    nlohmann::json current = nlohmann::json::object(), peak = nlohmann::json::object();
    for (const hoist::v1::MemoryEntry& e : rank.entries()) {
      current[e.place()][e.category()] = e.current_bytes();
      peak[e.place()][e.category()] = e.peak_bytes();
    }
    memory.push_back({{"rank", rank.rank()}, {"current", current}, {"peak", peak}});
  }
  j["memory"] = std::move(memory);
  return j;
}

#endif  // HOIST_HAVE_GRPC

}  // namespace hoist::launcher

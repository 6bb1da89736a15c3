#include "launcher/launch_plan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/cpu_share.h"

namespace hoist::launcher {
namespace {

constexpr int kMaxSlots = 1 << 20;

std::string_view Trim(std::string_view text) {
  const char* space = " \t\r\n\v\f";
  size_t begin = text.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(space);
  return text.substr(begin, end - begin + 1);
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t at = text.find(separator, start);
    parts.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    size_t start = i;
    while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) words.push_back(text.substr(start, i - start));
  }
  return words;
}

// A whole decimal number in [low, high], or false.
bool ParseInt(std::string_view text, int low, int high, int* value) {
  int parsed = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return false;
  if (parsed < low || parsed > high) return false;
  *value = parsed;
  return true;
}

std::string Join(const std::vector<std::string>& words, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += separator;
    out += words[i];
  }
  return out;
}

std::string HostNames(const std::vector<HostfileEntry>& hosts) {
  std::vector<std::string> names;
  for (const HostfileEntry& entry : hosts) names.push_back(entry.host);
  return Join(names, ", ");
}

const char kHostfileShape[] = "expected `HOST slots=N`, e.g. `worker-0 slots=8`";

// One NODE_SPEC of --include/--exclude: a host and its slots (empty: all of them).
struct NodeSpec {
  const HostfileEntry* entry = nullptr;
  std::vector<int> slots;
};

StatusOr<std::vector<NodeSpec>> ParseNodeSpecs(const std::string& flag, const std::string& text,
                                               const std::vector<HostfileEntry>& hosts) {
  const std::string shape =
      "; write HOST or HOST:SLOT[,SLOT...], several joined by @ (e.g. worker-0:0,2@worker-1)";
  std::vector<NodeSpec> specs;
  for (std::string_view part : Split(text, '@')) {
    part = Trim(part);
    if (part.empty()) {
      return InvalidArgumentError(flag + " '" + text + "' has an empty node spec" + shape);
    }
    size_t colon = part.find(':');
    std::string host(Trim(part.substr(0, colon)));
    if (host.empty()) {
      return InvalidArgumentError(flag + " '" + text + "': '" + std::string(part) +
                                  "' has no host name" + shape);
    }
    auto found = std::find_if(hosts.begin(), hosts.end(),
                              [&](const HostfileEntry& entry) { return entry.host == host; });
    if (found == hosts.end()) {
      return InvalidArgumentError(
          flag + " names host '" + host +
          "', which is not in the hostfile (its hosts: " + HostNames(hosts) + ")");
    }
    NodeSpec spec;
    spec.entry = &*found;
    if (colon != std::string_view::npos) {
      std::string_view list = part.substr(colon + 1);
      if (Trim(list).empty()) {
        return InvalidArgumentError(flag + " '" + text + "': no slots after '" + host + ":'" +
                                    shape);
      }
      for (std::string_view slot_text : Split(list, ',')) {
        slot_text = Trim(slot_text);
        int slot = 0;
        if (!ParseInt(slot_text, 0, kMaxSlots, &slot)) {
          return InvalidArgumentError(flag + " '" + text + "': slot '" + std::string(slot_text) +
                                      "' on " + host + " is not a slot number" + shape);
        }
        if (slot >= found->slots) {
          return InvalidArgumentError(flag + " asks for slot " + std::to_string(slot) + " on " +
                                      host + ", which has slots 0-" +
                                      std::to_string(found->slots - 1) +
                                      " (slots=" + std::to_string(found->slots) +
                                      " on hostfile line " + std::to_string(found->line) + ")");
        }
        spec.slots.push_back(slot);
      }
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::vector<int> AllSlots(int count) {
  std::vector<int> slots(count);
  for (int i = 0; i < count; ++i) slots[i] = i;
  return slots;
}

bool IsSlotPrefix(const HostSlots& host) {
  for (size_t i = 0; i < host.slots.size(); ++i) {
    if (host.slots[i] != static_cast<int>(i)) return false;
  }
  return true;
}

// A value that travels inside `-x K=V`, `--export=ALL,K=V` and the environment.
Status CheckPlainValue(const std::string& flag, const std::string& value) {
  if (value.empty()) return InvalidArgumentError(flag + " is empty; give a host name or address");
  for (char c : value) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == '=' || c == '\'' ||
        c == '"') {
      return InvalidArgumentError(flag + " '" + value +
                                  "' contains a space, comma, quote or '='; give a plain host "
                                  "name or address");
    }
  }
  return Status::Ok();
}

// The program an --exec worker runs, found the way a shell would find it.
StatusOr<std::string> ResolveProgram(const std::string& name, const std::string& path_env) {
  auto runnable = [](const std::string& path) {
    struct stat info;
    return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    struct stat info;
    if (::stat(name.c_str(), &info) != 0) {
      return NotFoundError("--exec program '" + name + "' does not exist");
    }
    if (!runnable(name)) {
      return InvalidArgumentError("--exec program '" + name +
                                  "' is not an executable file; chmod +x it, or run it through "
                                  "its interpreter (-- /bin/sh " +
                                  name + ")");
    }
    return name;
  }
  for (std::string_view dir : Split(path_env, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + name;
    if (runnable(candidate)) return candidate;
  }
  return NotFoundError("--exec program '" + name + "' is not on PATH (" + path_env +
                       "); give its path");
}

StatusOr<std::vector<std::string>> WorkerArgv(const LaunchRequest& request,
                                              const LaunchContext& context) {
  if (request.command.empty()) {
    return InvalidArgumentError(
        "hoist launch needs the command for its workers after --, e.g. "
        "`hoist launch -n 2 -- train -c job.json`");
  }
  const std::string& first = request.command.front();
  if (request.exec) {
    std::string program = first;
    if (request.launcher == LauncherKind::kLocal) {
      HOIST_ASSIGN_OR_RETURN(program, ResolveProgram(first, context.path_env));
    }
    std::vector<std::string> argv = request.command;
    argv.front() = program;
    return argv;
  }
  if (!first.empty() && first.front() == '-') {
    return InvalidArgumentError("the worker command starts with '" + first +
                                "'; put hoist launch's own flags before -- and the hoist "
                                "subcommand after it (-- train -c job.json)");
  }
  if (first == "launch") {
    return InvalidArgumentError(
        "the worker command is `launch`; a worker cannot start another launcher. Give the "
        "subcommand each rank runs (-- train -c job.json)");
  }
  const std::vector<std::string>& known = context.subcommands;
  if (!known.empty() && std::find(known.begin(), known.end(), first) == known.end()) {
    std::vector<std::string> choices;
    for (const std::string& name : known) {
      if (name != "launch") choices.push_back(name);
    }
    return InvalidArgumentError("'" + first + "' is not a hoist subcommand (choices: " +
                                Join(choices, ", ") + "); to run another program add --exec");
  }
  std::vector<std::string> argv;
  argv.push_back(context.self_exe);
  argv.insert(argv.end(), request.command.begin(), request.command.end());
  return argv;
}

// The hosts the workers run on; empty when mpirun or srun decide without a hostfile.
StatusOr<std::vector<HostSlots>> ChooseHosts(const LaunchRequest& request, int* world_size) {
  const bool filtered = !request.include.empty() || !request.exclude.empty();
  if (request.hostfile.empty()) {
    if (filtered) {
      return InvalidArgumentError(
          std::string(request.include.empty() ? "--exclude" : "--include") +
          " picks slots of a --hostfile, and none was given; without one, -n N runs N workers "
          "on this node (or write a hostfile such as `localhost slots=8`)");
    }
    if (request.num_nodes > 0 && request.launcher != LauncherKind::kSrun) {
      return InvalidArgumentError(
          "--num_nodes picks the first hosts of a --hostfile, and none was given");
    }
    if (request.num_workers <= 0) {
      return InvalidArgumentError(
          "hoist launch needs -n N (how many workers) or a --hostfile whose slots say it");
    }
    *world_size = request.num_workers;
    if (request.launcher != LauncherKind::kLocal) return std::vector<HostSlots>{};
    return std::vector<HostSlots>{{"localhost", AllSlots(request.num_workers)}};
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<HostfileEntry> entries, ReadHostfile(request.hostfile));
  if (filtered && request.num_nodes > 0) {
    return InvalidArgumentError(
        "--num_nodes cannot be combined with --include or --exclude; name the hosts in the "
        "filter instead");
  }
  HOIST_ASSIGN_OR_RETURN(std::vector<HostSlots> hosts,
                         SelectSlots(entries, request.include, request.exclude));
  if (request.num_nodes > 0) {
    if (request.num_nodes > static_cast<int>(hosts.size())) {
      return InvalidArgumentError("--num_nodes " + std::to_string(request.num_nodes) +
                                  " asks for more hosts than hostfile " + request.hostfile +
                                  " has (" + std::to_string(hosts.size()) + ")");
    }
    hosts.resize(request.num_nodes);
  }
  int total = 0;
  for (const HostSlots& host : hosts) total += static_cast<int>(host.slots.size());
  if (request.num_workers > total) {
    std::vector<std::string> counts;
    for (const HostSlots& host : hosts) {
      counts.push_back(host.host + ": " + std::to_string(host.slots.size()));
    }
    return InvalidArgumentError("-n " + std::to_string(request.num_workers) +
                                " asks for more workers than the " + std::to_string(total) +
                                " slots selected from hostfile " + request.hostfile + " (" +
                                Join(counts, ", ") + "); lower -n or add slots");
  }
  *world_size = request.num_workers > 0 ? request.num_workers : total;
  // Ranks fill hosts in order and each host's slots in order; keep the first world_size.
  int left = *world_size;
  std::vector<HostSlots> used;
  for (HostSlots& host : hosts) {
    if (left == 0) break;
    if (static_cast<int>(host.slots.size()) > left) host.slots.resize(left);
    left -= static_cast<int>(host.slots.size());
    used.push_back(std::move(host));
  }
  return used;
}

Status CheckLocalHosts(const std::vector<HostSlots>& hosts, const LaunchContext& context) {
  for (const HostSlots& host : hosts) {
    const std::vector<std::string>& local = context.local_host_names;
    if (std::find(local.begin(), local.end(), host.host) == local.end()) {
      return InvalidArgumentError(
          "the local launcher starts workers on this node only, and the selection includes "
          "host '" +
          host.host + "'; use --launcher mpirun or --launcher srun for several nodes, or " +
          "--include localhost");
    }
  }
  if (hosts.size() > 1) {
    return InvalidArgumentError("the hostfile names this node twice ('" + hosts[0].host +
                                "' and '" + hosts[1].host + "'); keep one line for it");
  }
  return Status::Ok();
}

// mpirun and srun give ranks of a host consecutive device ids from 0, so a selection that skips
// a slot (worker-0:1,3) cannot be expressed to them.
Status CheckSlotPrefixes(const std::vector<HostSlots>& hosts, LauncherKind launcher) {
  for (const HostSlots& host : hosts) {
    if (!IsSlotPrefix(host)) {
      return InvalidArgumentError(
          std::string(LauncherKindName(launcher)) +
          " places ranks by slot count, not by slot number, and the selection on " + host.host +
          " skips a slot; select slots 0..k-1 (or whole hosts), or use --launcher local");
    }
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> SharedEnv(const LaunchRequest& request,
                                                           const LaunchContext& context,
                                                           const std::string& master_addr) {
  std::vector<std::pair<std::string, std::string>> env;
  if (!master_addr.empty()) env.emplace_back("MASTER_ADDR", master_addr);
  env.emplace_back("MASTER_PORT", std::to_string(request.master_port));
  env.emplace_back("HOIST_JOB_ID", context.job_id);
  return env;
}

// The first count of an OMP_NUM_THREADS value ("8", or "8,2" for nested levels), as the OpenMP
// runtime reads it; 0 when there is none (the runtime then ignores the value).
int FirstOmpThreadCount(std::string_view value) {
  const std::string_view first = Trim(value.substr(0, value.find(',')));
  int count = 0;
  const auto [end, error] = std::from_chars(first.data(), first.data() + first.size(), count);
  if (error != std::errc() || end != first.data() + first.size() || count <= 0) return 0;
  return count;
}

// The threads of each local worker: --threads-per-rank, else the OMP_NUM_THREADS of the
// launcher's environment (left to the workers as it is), else an equal share of this process's
// cores; OMP_WAIT_POLICY=passive where the workers' threads outnumber the cores, so that waiting
// threads sleep instead of spinning. An inherited count is the usual case on clusters, and it
// is the one that needs the passive policy most: 2 ranks of OMP_NUM_THREADS=2 on 2 cores took
// 317-802 ms a step with spinning threads against 7.5-10 ms shared.
struct ThreadShare {
  std::vector<std::pair<std::string, std::string>> env;
  std::string note;
};

ThreadShare ShareThreads(const LaunchRequest& request, const LaunchContext& context,
                         const std::vector<HostSlots>& hosts) {
  ThreadShare share;
  int workers = 0;
  for (const HostSlots& host : hosts) workers += static_cast<int>(host.slots.size());
  if (context.usable_cores <= 0 || workers == 0) return share;
  int threads = request.threads_per_rank;
  const bool inherited = threads == 0 && !context.omp_num_threads.empty();
  if (inherited) {
    threads = FirstOmpThreadCount(context.omp_num_threads);
    if (threads == 0 || workers == 1) return share;
  } else if (threads == 0) {
    if (workers == 1) return share;
    threads = ThreadsPerRank(context.usable_cores, workers);
  }
  const std::string count = std::to_string(threads);
  if (!inherited) share.env = {{"OMP_NUM_THREADS", count}, {"OPENBLAS_NUM_THREADS", count}};
  const bool oversubscribed = int64_t{threads} * workers > context.usable_cores;
  // The user's own count is theirs to choose: said only where it oversubscribes the cores.
  if (inherited && !oversubscribed) return share;
  std::string waiting;
  if (oversubscribed && context.omp_wait_policy.empty()) {
    share.env.emplace_back("OMP_WAIT_POLICY", "passive");
    waiting = "; more threads than cores, so they wait passively";
  } else if (oversubscribed) {
    // The user's setting stays; an active one spins against the other ranks' threads (on 2
    // cores, 2 ranks of 2 threads ran a third as fast as with passive).
    std::string policy = context.omp_wait_policy;
    std::transform(policy.begin(), policy.end(), policy.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    waiting = "; more threads than cores, and OMP_WAIT_POLICY=" + context.omp_wait_policy +
              " from your environment" +
              (policy == "passive" ? ""
                                   : ": waiting threads may spin against the other ranks' "
                                     "(unset it, or set it to passive)");
  }
  const std::string chosen_by = request.threads_per_rank > 0 ? " (--threads-per-rank)"
                                : inherited ? " (OMP_NUM_THREADS from your environment)"
                                            : " (set OMP_NUM_THREADS or --threads-per-rank to "
                                              "choose)";
  share.note = std::to_string(workers) + (workers == 1 ? " rank" : " ranks") + " on " +
               context.cores_text + ": " + count + " OpenMP thread" + (threads == 1 ? "" : "s") +
               " each" + chosen_by + waiting;
  return share;
}

}  // namespace

const char* const kInheritedRankVariables[] = {
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
};
const int kNumInheritedRankVariables =
    sizeof(kInheritedRankVariables) / sizeof(kInheritedRankVariables[0]);

StatusOr<LauncherKind> ParseLauncherKind(const std::string& text) {
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "local") return LauncherKind::kLocal;
  if (lower == "mpirun" || lower == "openmpi") return LauncherKind::kMpirun;
  if (lower == "srun" || lower == "slurm") return LauncherKind::kSrun;
  if (lower == "pdsh" || lower == "mpich" || lower == "impi" || lower == "mvapich") {
    return UnimplementedError("--launcher " + text +
                              " is not supported; use local, mpirun (Open MPI) or srun (Slurm)");
  }
  return InvalidArgumentError("--launcher '" + text + "' is not one of local, mpirun, srun");
}

const char* LauncherKindName(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kLocal: return "local";
    case LauncherKind::kMpirun: return "mpirun";
    case LauncherKind::kSrun: return "srun";
  }
  return "?";
}

StatusOr<std::vector<HostfileEntry>> ParseHostfile(std::string_view text,
                                                   const std::string& origin) {
  std::vector<HostfileEntry> entries;
  int line_number = 0;
  for (std::string_view raw : Split(text, '\n')) {
    ++line_number;
    std::string_view line = raw.substr(0, raw.find('#'));
    std::vector<std::string_view> words = Words(line);
    if (words.empty()) continue;
    auto bad = [&](const std::string& problem) {
      return InvalidArgumentError("hostfile " + origin + " line " + std::to_string(line_number) +
                                  ": " + problem + " in '" + std::string(Trim(raw)) + "'; " +
                                  kHostfileShape);
    };
    std::string host(words[0]);
    if (words.size() == 1) return bad("no slots=N after the host");
    constexpr std::string_view kSlots = "slots=";
    if (words[1].substr(0, kSlots.size()) != kSlots) {
      return bad("'" + std::string(words[1]) + "' where slots=N belongs");
    }
    int slots = 0;
    std::string_view count = words[1].substr(kSlots.size());
    if (!ParseInt(count, 1, kMaxSlots, &slots)) {
      return bad("slots='" + std::string(count) + "' is not a whole number from 1 to " +
                 std::to_string(kMaxSlots));
    }
    if (words.size() > 2) {
      return bad("unexpected '" + std::string(words[2]) + "' after slots=N");
    }
    if (host.find_first_of(":@,=") != std::string::npos) {
      return bad("host name '" + host +
                 "' contains ':', '@', ',' or '=', which --include and --exclude use as "
                 "separators");
    }
    for (const HostfileEntry& seen : entries) {
      if (seen.host == host) {
        return bad("host " + host + " is listed twice (first on line " + std::to_string(seen.line) +
                   "); keep one line per host");
      }
    }
    entries.push_back({host, slots, line_number});
  }
  if (entries.empty()) {
    return InvalidArgumentError("hostfile " + origin + " lists no hosts; " + kHostfileShape);
  }
  return entries;
}

StatusOr<std::vector<HostfileEntry>> ReadHostfile(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    return NotFoundError("hostfile '" + path + "' does not exist; give the path of a file with " +
                         "lines like `worker-0 slots=8`");
  }
  // A named pipe would block the read below until something writes to it.
  if (!S_ISREG(info.st_mode)) {
    return InvalidArgumentError("hostfile '" + path + "' is " +
                                (S_ISDIR(info.st_mode) ? "a directory" : "not a regular file") +
                                "; give a file");
  }
  std::ifstream in(path);
  if (!in) return IoError("cannot read hostfile '" + path + "'; check its permissions");
  std::stringstream text;
  text << in.rdbuf();
  return ParseHostfile(text.str(), path);
}

StatusOr<std::vector<HostSlots>> SelectSlots(const std::vector<HostfileEntry>& hosts,
                                             const std::string& include,
                                             const std::string& exclude) {
  if (!include.empty() && !exclude.empty()) {
    return InvalidArgumentError(
        "--include and --exclude cannot be used together; pick the slots with one of them");
  }
  std::map<std::string, std::set<int>> chosen;
  if (!include.empty()) {
    HOIST_ASSIGN_OR_RETURN(std::vector<NodeSpec> specs,
                           ParseNodeSpecs("--include", include, hosts));
    for (const NodeSpec& spec : specs) {
      std::set<int>& slots = chosen[spec.entry->host];
      for (int slot : spec.slots.empty() ? AllSlots(spec.entry->slots) : spec.slots) {
        slots.insert(slot);
      }
    }
  } else {
    for (const HostfileEntry& entry : hosts) {
      std::vector<int> all = AllSlots(entry.slots);
      chosen[entry.host] = std::set<int>(all.begin(), all.end());
    }
    if (!exclude.empty()) {
      HOIST_ASSIGN_OR_RETURN(std::vector<NodeSpec> specs,
                             ParseNodeSpecs("--exclude", exclude, hosts));
      for (const NodeSpec& spec : specs) {
        std::set<int>& slots = chosen[spec.entry->host];
        if (spec.slots.empty()) slots.clear();
        for (int slot : spec.slots) slots.erase(slot);
      }
    }
  }
  std::vector<HostSlots> selected;
  for (const HostfileEntry& entry : hosts) {
    auto found = chosen.find(entry.host);
    if (found == chosen.end() || found->second.empty()) continue;
    selected.push_back({entry.host, std::vector<int>(found->second.begin(), found->second.end())});
  }
  if (selected.empty()) {
    return InvalidArgumentError("--exclude '" + exclude +
                                "' leaves no slots to run on; exclude fewer slots");
  }
  return selected;
}

namespace {

// The worker command a restart runs: `train` resuming from the newest complete checkpoint (or
// starting fresh when there is none). --resume-from would go back to the same old step on every
// restart, so it gives way to --resume.
StatusOr<std::vector<std::string>> RestartArgv(const LaunchRequest& request,
                                               const std::vector<std::string>& worker_argv) {
  if (request.launcher != LauncherKind::kLocal) {
    return InvalidArgumentError(
        "--max-restarts needs --launcher local; with mpirun or srun, restart the job with their "
        "own means (e.g. Slurm's --requeue) and `train --resume`");
  }
  if (request.exec || request.command.front() != "train") {
    return InvalidArgumentError(
        "--max-restarts restarts `hoist train` with --resume, but the "
        "workers run '" +
        request.command.front() + "'; drop --max-restarts or give `-- train ...`");
  }
  std::vector<std::string> argv;
  bool resume = false;
  for (size_t i = 0; i < worker_argv.size(); ++i) {
    const std::string& word = worker_argv[i];
    if (i > 0 && word == "--") {
      argv.insert(argv.end(), worker_argv.begin() + static_cast<long>(i), worker_argv.end());
      break;
    }
    if (word == "--resume-from") {
      ++i;  // and its value
      continue;
    }
    if (word.rfind("--resume-from=", 0) == 0) continue;
    if (word == "--resume") resume = true;
    argv.push_back(word);
  }
  if (!resume) argv.insert(argv.begin() + 2, "--resume");
  return argv;
}

}  // namespace

StatusOr<LaunchPlan> BuildLaunchPlan(const LaunchRequest& request, const LaunchContext& context) {
  if (request.num_workers < 0) {
    return InvalidArgumentError("-n " + std::to_string(request.num_workers) +
                                " is not a number of workers; give 1 or more");
  }
  if (request.num_nodes < 0) {
    return InvalidArgumentError("--num_nodes " + std::to_string(request.num_nodes) +
                                " is not a number of hosts; give 1 or more");
  }
  if (request.master_port < 1 || request.master_port > 65535) {
    return InvalidArgumentError("--master_port " + std::to_string(request.master_port) +
                                " is not a TCP port; give 1-65535");
  }
  if (request.threads_per_rank < 0) {
    return InvalidArgumentError("--threads-per-rank " + std::to_string(request.threads_per_rank) +
                                " is not a number of threads; give 1 or more");
  }
  if (!(request.grace_period_s >= 0 && request.grace_period_s <= 3600)) {
    return InvalidArgumentError("--grace-period must be 0-3600 seconds");
  }
  if (request.max_restarts < 0 || request.max_restarts > 1000) {
    return InvalidArgumentError("--max-restarts " + std::to_string(request.max_restarts) +
                                " is not a number of restarts; give 0-1000");
  }
  LaunchPlan plan;
  plan.launcher = request.launcher;
  plan.job_id = context.job_id;
  plan.grace_period_s = request.grace_period_s;
  HOIST_ASSIGN_OR_RETURN(plan.worker_argv, WorkerArgv(request, context));
  plan.max_restarts = request.max_restarts;
  if (plan.max_restarts > 0) {
    HOIST_ASSIGN_OR_RETURN(plan.restart_argv, RestartArgv(request, plan.worker_argv));
  }
  HOIST_ASSIGN_OR_RETURN(plan.hosts, ChooseHosts(request, &plan.world_size));

  std::string master_addr = request.master_addr;
  if (!master_addr.empty()) HOIST_RETURN_IF_ERROR(CheckPlainValue("--master_addr", master_addr));
  const bool from_hostfile = !request.hostfile.empty();
  const bool filtered =
      !request.include.empty() || !request.exclude.empty() || request.num_nodes > 0;

  switch (request.launcher) {
    case LauncherKind::kLocal: {
      HOIST_RETURN_IF_ERROR(CheckLocalHosts(plan.hosts, context));
      const ThreadShare threads = ShareThreads(request, context, plan.hosts);
      plan.threads_note = threads.note;
      if (master_addr.empty()) master_addr = "127.0.0.1";
      int rank = 0;
      for (const HostSlots& host : plan.hosts) {
        const int local_world_size = static_cast<int>(host.slots.size());
        std::vector<std::string> visible;
        for (int slot : host.slots) visible.push_back(std::to_string(slot));
        for (int local_rank = 0; local_rank < local_world_size; ++local_rank, ++rank) {
          WorkerSpec worker;
          worker.rank = rank;
          worker.local_rank = local_rank;
          worker.host = host.host;
          worker.slot = host.slots[local_rank];
          worker.env = {
              {"RANK", std::to_string(rank)},
              {"WORLD_SIZE", std::to_string(plan.world_size)},
              {"LOCAL_RANK", std::to_string(local_rank)},
              {"LOCAL_WORLD_SIZE", std::to_string(local_world_size)},
          };
          for (auto& pair : SharedEnv(request, context, master_addr)) worker.env.push_back(pair);
          // A rank's device is LOCAL_RANK among the visible ones; when the selection skips a
          // slot, only the chosen ones may be visible for that to pick them.
          if (!IsSlotPrefix(host))
            worker.env.emplace_back("CUDA_VISIBLE_DEVICES", Join(visible, ","));
          for (const auto& pair : threads.env) worker.env.push_back(pair);
          plan.workers.push_back(std::move(worker));
        }
      }
      break;
    }
    case LauncherKind::kMpirun: {
      HOIST_RETURN_IF_ERROR(CheckSlotPrefixes(plan.hosts, request.launcher));
      if (master_addr.empty() && !plan.hosts.empty()) master_addr = plan.hosts.front().host;
      plan.launcher_argv = {"mpirun", "-np", std::to_string(plan.world_size)};
      if (from_hostfile && !filtered) {
        plan.launcher_argv.insert(plan.launcher_argv.end(), {"--hostfile", request.hostfile});
      } else if (from_hostfile) {
        std::vector<std::string> hosts;
        for (const HostSlots& host : plan.hosts) {
          hosts.push_back(host.host + ":" + std::to_string(host.slots.size()));
        }
        plan.launcher_argv.insert(plan.launcher_argv.end(), {"--host", Join(hosts, ",")});
      }
      for (auto& [name, value] : SharedEnv(request, context, master_addr)) {
        plan.launcher_argv.insert(plan.launcher_argv.end(), {"-x", name + "=" + value});
      }
      break;
    }
    case LauncherKind::kSrun: {
      HOIST_RETURN_IF_ERROR(CheckSlotPrefixes(plan.hosts, request.launcher));
      if (master_addr.empty() && !plan.hosts.empty()) master_addr = plan.hosts.front().host;
      plan.launcher_argv = {"srun", "-n", std::to_string(plan.world_size), "--kill-on-bad-exit=1"};
      if (!plan.hosts.empty()) {
        const size_t per_node = plan.hosts.front().slots.size();
        std::vector<std::string> names, counts;
        bool even = true;
        for (const HostSlots& host : plan.hosts) {
          names.push_back(host.host);
          counts.push_back(host.host + ": " + std::to_string(host.slots.size()));
          even = even && host.slots.size() == per_node;
        }
        if (!even) {
          return InvalidArgumentError(
              "srun puts the same number of tasks on every node, and the selection has " +
              Join(counts, ", ") +
              "; choose -n and the hosts so that every host gets as many, or use --launcher "
              "mpirun");
        }
        plan.launcher_argv.insert(
            plan.launcher_argv.end(),
            {"--nodes=" + std::to_string(plan.hosts.size()), "--nodelist=" + Join(names, ","),
             "--ntasks-per-node=" + std::to_string(per_node)});
      } else if (request.num_nodes > 0) {
        plan.launcher_argv.push_back("--nodes=" + std::to_string(request.num_nodes));
      }
      std::string exports = "--export=ALL";
      for (auto& [name, value] : SharedEnv(request, context, master_addr)) {
        exports += "," + name + "=" + value;
      }
      plan.launcher_argv.push_back(exports);
      break;
    }
  }
  plan.launcher_argv.insert(plan.launcher_argv.end(), plan.worker_argv.begin(),
                            plan.worker_argv.end());
  if (plan.launcher == LauncherKind::kLocal) plan.launcher_argv.clear();
  return plan;
}

std::string ShellQuote(const std::string& word) {
  bool plain = !word.empty();
  for (char c : word) {
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) ||
                      std::string_view("_@%+=:,./-").find(c) != std::string_view::npos);
  }
  if (plain) return word;
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string DescribePlan(const LaunchPlan& plan) {
  auto quoted = [](const std::vector<std::string>& words) {
    std::vector<std::string> out;
    for (const std::string& word : words) out.push_back(ShellQuote(word));
    return Join(out, " ");
  };
  if (plan.launcher != LauncherKind::kLocal) return quoted(plan.launcher_argv) + "\n";
  std::string text;
  for (const WorkerSpec& worker : plan.workers) {
    for (const auto& [name, value] : worker.env) text += name + "=" + ShellQuote(value) + " ";
    text += quoted(plan.worker_argv) + "\n";
  }
  if (plan.max_restarts > 0) {
    text += "# after a rank fails, every rank starts again (at most " +
            std::to_string(plan.max_restarts) + " times) running " + quoted(plan.restart_argv) +
            "\n";
  }
  return text;
}

}  // namespace hoist::launcher

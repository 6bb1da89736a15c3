// Sequential throughput of the NVMe optimizer swapper (offload::StateSwapper) against fio on the
// same file system, in the same run.
//
// The swapper holds three fp32 arrays in one O_DIRECT scratch file and walks them a sub-group at
// a time (ForEachSubGroup). A write pass whose visit copies random bytes into the slot and a read
// pass whose visit reads two floats per array move the whole file once each; bytes over wall
// time is its GB/s. The written bytes are random and every 4 KiB block is stamped with its offset
// and the pass, as fio's default buffers are: virtual disks and some file systems compress or
// deduplicate, and a constant pattern measured 20-50% faster than fio's random data here.
// The anchor is fio with io_uring, O_DIRECT, the swapper's block size as --bs and its queue
// depth as --iodepth, one job, over a file of the same size in the same directory: what the
// device gives a single queue of that shape. Disks of shared machines vary from minute to
// minute, so absolute figures mean little; the passes are interleaved (per repeat: both writes,
// then both reads, with odd repeats running fio first) and the ratio swapper / fio is the figure,
// best, median, and the median of the per-repeat ratios. Each repeat also shows the average
// device request size of both sides, which decides throughput on a device that costs per request.
//
// Both files are written once, untimed, before the timed passes: a freshly fallocated file has
// unwritten extents, and the first write into them costs extent conversions that an optimizer
// overwriting its states every step never pays again.
//
//   offload_io_bench [--dir DIR] [--bytes N[K|M|G]] [--sub-group ELEMENTS] [--buffer-count K]
//                    [--block-size N[K|M]] [--queue-depth Q] [--repeats R]
//                    [--backend auto|posix|uring] [--fio PATH]
//
// Everything is created in a fresh directory under DIR (default $TMPDIR, else /var/tmp), which
// must be on a disk: tmpfs is refused. Needs 2 x --bytes + 1 GiB free there (the swapper's file
// and fio's). The directory and its files are removed at exit, also on error or Ctrl-C.
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/device.h"
#include "core/memory_tracker.h"
#include "core/status.h"
#include "offload/open_storage.h"
#include "offload/pinned_pool.h"
#include "offload/state_swapper.h"

namespace {

using Clock = std::chrono::steady_clock;
using hoist::FormatBytes;
using hoist::MemoryTracker;
using hoist::Status;
using hoist::offload::BlockStorage;
using hoist::offload::BlockStorageOptions;
using hoist::offload::PinnedHostPool;
using hoist::offload::StateSwapper;
using hoist::offload::StateSwapperOptions;
using hoist::offload::StorageBackend;

constexpr int kArrays = 3;  // fp32 master weights and the two Adam moments

struct Args {
  std::string dir;  // parent of the fresh directory; empty: $TMPDIR or /var/tmp
  int64_t bytes = int64_t{2} << 30;
  int64_t sub_group = 16 << 20;  // elements: 64 MiB per array, 192 MiB per slot
  int buffer_count = 3;
  int64_t block_size = 1 << 20;  // BlockStorageOptions' defaults, i.e. DeepSpeed's aio ones
  int queue_depth = 8;
  int repeats = 3;
  std::string backend = "auto";
  std::string fio = "fio";
};

// "2G", "512M", "64K", "4096": binary multiples. -1 when malformed.
int64_t ParseBytes(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || value <= 0) return -1;
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift != 0) ++end;
  if (*end != '\0') return -1;
  return static_cast<int64_t>(value) << shift;
}

// The paths this run creates, in fixed buffers so that the SIGINT/SIGTERM handler can remove
// them with async-signal-safe calls only.
struct Scratch {
  char dir[4096] = {};
  char swap_file[4200] = {};  // dir plus a short name
  char fio_file[4200] = {};
  char fio_err[4200] = {};
};
Scratch g_scratch;

void RemoveScratch() {
  if (g_scratch.dir[0] == '\0') return;
  ::unlink(g_scratch.swap_file);
  ::unlink(g_scratch.fio_file);
  ::unlink(g_scratch.fio_err);
  ::rmdir(g_scratch.dir);
}

extern "C" void OnSignal(int signal_number) {
  RemoveScratch();
  ::_exit(128 + signal_number);
}

// Removes the directory and whatever this run put in it when main's work returns, whichever way.
struct ScratchGuard {
  ~ScratchGuard() {
    RemoveScratch();
    if (g_scratch.dir[0] != '\0' && ::access(g_scratch.dir, F_OK) == 0) {
      std::fprintf(stderr, "offload_io_bench: could not remove %s; remove it by hand\n",
                   g_scratch.dir);
    }
  }
};

// The file system type by statfs magic, for the header and the tmpfs check.
std::string FileSystemName(long type) {
  switch (static_cast<unsigned long>(type)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x2FC12FC1: return "zfs";
    case 0x794C7630: return "overlayfs";
    case 0x01021994: return "tmpfs";
    case 0x858458F6: return "ramfs";
    case 0x6969: return "nfs";
    case 0xF2F52010: return "f2fs";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(type));
      return std::string("unknown (statfs type ") + hex + ")";
    }
  }
}

// MemAvailable in bytes, 0 when unknown.
int64_t AvailableMemoryBytes() {
  return static_cast<int64_t>(hoist::HostMemAvailableBytes().value_or(0));
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `command` through the shell and returns its stdout; *exit_code gets its exit status
// (127 when the shell could not find the program).
std::string RunCommand(const std::string& command, int* exit_code) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *exit_code = -1;
    return out;
  }
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  const int status = ::pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Best(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// One fio pass; returns GB/s, or a negative value with *error set.
double RunFio(const Args& args, int64_t size_bytes, const char* rw, std::string* error) {
  const std::string command =
      Quote(args.fio) + " --name=hoist_iobench --filename=" + Quote(g_scratch.fio_file) +
      " --ioengine=io_uring --direct=1 --rw=" + rw + " --bs=" + std::to_string(args.block_size) +
      " --iodepth=" + std::to_string(args.queue_depth) + " --size=" + std::to_string(size_bytes) +
      " --numjobs=1 --output-format=json 2>" + Quote(g_scratch.fio_err);
  int exit_code = 0;
  const std::string out = RunCommand(command, &exit_code);
  if (exit_code != 0) {
    *error = "fio --rw=" + std::string(rw) + " exited with " + std::to_string(exit_code) + ": " +
             ReadFile(g_scratch.fio_err) + out.substr(0, 2000);
    return -1;
  }
  // fio may print notices before the JSON document.
  const size_t start = out.find('{');
  const nlohmann::json doc = nlohmann::json::parse(
      start == std::string::npos ? std::string() : out.substr(start), nullptr, false);
  const char* side = std::strcmp(rw, "read") == 0 ? "read" : "write";
  if (doc.is_discarded() || !doc.contains("jobs") || doc["jobs"].empty() ||
      !doc["jobs"][0].contains(side)) {
    *error = "could not parse fio's JSON output for --rw=" + std::string(rw) + ": " +
             out.substr(0, 2000);
    return -1;
  }
  const nlohmann::json& job = doc["jobs"][0];
  if (job.value("error", 0) != 0) {
    *error = "fio --rw=" + std::string(rw) + " reported error " +
             std::to_string(job.value("error", 0)) + ": " + ReadFile(g_scratch.fio_err);
    return -1;
  }
  const nlohmann::json& stats = job[side];
  // io_bytes over runtime (ms) rather than bw_bytes, which fio rounds to whole KiB/s.
  const double io_bytes = stats.value("io_bytes", 0.0);
  const double runtime_ms = stats.value("runtime", 0.0);
  if (io_bytes <= 0 || runtime_ms <= 0) {
    *error = "fio --rw=" + std::string(rw) + " moved no bytes (io_bytes " +
             std::to_string(io_bytes) + ", runtime " + std::to_string(runtime_ms) + " ms)";
    return -1;
  }
  return io_bytes / (runtime_ms * 1e-3) * 1e-9;
}

// The block device's request counters (/sys/dev/block/MAJ:MIN/stat) for the file system of
// the scratch directory. The average request size a pass produced tells whether each
// block-size piece reached the device whole: a device with fewer DMA segments per request than
// the piece has discontiguous 4 KiB pages (virtio-blk's max_segments is often 254, a 1 MiB
// piece has 256) splits it, and a device that costs per request then halves its throughput.
struct DeviceCounters {
  int64_t reads = 0, read_sectors = 0, writes = 0, write_sectors = 0;
};

std::string g_device_stat;  // "" when the device is unknown (e.g. overlayfs, NFS)

bool ReadDeviceCounters(DeviceCounters* c) {
  if (g_device_stat.empty()) return false;
  std::ifstream in(g_device_stat);
  int64_t merged = 0, ticks = 0;
  return static_cast<bool>(in >> c->reads >> merged >> c->read_sectors >> ticks >> c->writes >>
                           merged >> c->write_sectors);
}

// KiB per device request between `before` and now, 0 when unknown.
double KibPerRequest(const DeviceCounters& before, bool writing) {
  DeviceCounters after;
  if (!ReadDeviceCounters(&after)) return 0;
  const int64_t requests = writing ? after.writes - before.writes : after.reads - before.reads;
  const int64_t sectors = writing ? after.write_sectors - before.write_sectors
                                  : after.read_sectors - before.read_sectors;
  return requests > 0 ? sectors * 0.5 / static_cast<double>(requests) : 0;
}

struct SwapPass {
  double gb_s = 0;
  double kib_per_request = 0;
  double visit_s = 0;
  double io_wait_s = 0;
  double wall_s = 0;
};

// Random bytes that a write visit copies into each array (one sub-group's worth, made once).
std::vector<uint64_t> RandomSource(int64_t floats) {
  std::vector<uint64_t> words(static_cast<size_t>((floats + 1) / 2));
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t& w : words) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w = x;
  }
  return words;
}

// One ForEachSubGroup over the whole file; the figures are the deltas of the swapper's counters.
// `source` holds at least a sub-group of random floats; `pass_id` goes into the stamps.
Status RunSwapper(StateSwapper& swapper, StateSwapper::Access access,
                  const std::vector<uint64_t>& source, uint64_t pass_id, SwapPass* pass) {
  const bool writing = access == StateSwapper::Access::kWrite;
  const int64_t bytes_before = writing ? swapper.bytes_written() : swapper.bytes_read();
  const double visit_before = swapper.visit_seconds();
  const double wait_before = swapper.io_wait_seconds();
  volatile float sink = 0;
  DeviceCounters device_before;
  ReadDeviceCounters(&device_before);
  const auto start = Clock::now();
  Status status = swapper.ForEachSubGroup(
      access, [&](int64_t begin, int64_t count, std::span<float* const> arrays) {
        for (size_t a = 0; a < arrays.size(); ++a) {
          float* array = arrays[a];
          if (!writing) {
            // A read visit only has to look at the data.
            sink = sink + array[0] + array[count - 1];
            continue;
          }
          // A write must fill the slot (it holds an older sub-group): random bytes, with a stamp
          // per 4 KiB block so that no two blocks of the file or of two passes are the same.
          const size_t bytes = static_cast<size_t>(count) * sizeof(float);
          std::memcpy(array, source.data(), bytes);
          auto* raw = reinterpret_cast<unsigned char*>(array);
          for (size_t off = 0; off + sizeof(uint64_t) <= bytes; off += 4096) {
            const uint64_t stamp = (pass_id << 48) ^ (static_cast<uint64_t>(a) << 44) ^
                                   (static_cast<uint64_t>(begin) * sizeof(float) + off);
            std::memcpy(raw + off, &stamp, sizeof stamp);
          }
        }
        return Status::Ok();
      });
  pass->wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  pass->kib_per_request = KibPerRequest(device_before, writing);
  if (!status.ok()) return status;
  const int64_t bytes = (writing ? swapper.bytes_written() : swapper.bytes_read()) - bytes_before;
  pass->gb_s = bytes / pass->wall_s * 1e-9;
  pass->visit_s = swapper.visit_seconds() - visit_before;
  pass->io_wait_s = swapper.io_wait_seconds() - wait_before;
  return Status::Ok();
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--dir DIR] [--bytes N[K|M|G]] [--sub-group ELEMENTS] "
               "[--buffer-count K] [--block-size N[K|M]] [--queue-depth Q] [--repeats R] "
               "[--backend auto|posix|uring] [--fio PATH]\n",
               argv0);
  return 2;
}

int Run(const Args& args) {
  // --- where: a fresh directory on a real disk with room for both files ---
  std::string parent = args.dir;
  if (parent.empty()) {
    const char* tmpdir = std::getenv("TMPDIR");
    parent = tmpdir != nullptr && tmpdir[0] != '\0' ? tmpdir : "/var/tmp";
  }
  struct statfs fs {};
  if (::statfs(parent.c_str(), &fs) != 0) {
    std::fprintf(stderr, "offload_io_bench: statfs(%s) failed: %s; pass an existing --dir\n",
                 parent.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string fs_name = FileSystemName(fs.f_type);
  if (fs_name == "tmpfs" || fs_name == "ramfs") {
    std::fprintf(stderr,
                 "offload_io_bench: %s is on %s (memory, not a disk); the figures would say "
                 "nothing about NVMe. Pass --dir on a disk (e.g. /var/tmp or the NVMe mount)\n",
                 parent.c_str(), fs_name.c_str());
    return 1;
  }
  StateSwapperOptions swap;
  swap.elements = args.bytes / (kArrays * int64_t{sizeof(float)});
  swap.arrays = kArrays;
  swap.sub_group_size = args.sub_group;
  swap.buffer_count = args.buffer_count;
  if (swap.elements <= 0) {
    std::fprintf(stderr, "offload_io_bench: --bytes %lld is too small for %d fp32 arrays\n",
                 static_cast<long long>(args.bytes), kArrays);
    return 2;
  }
  const StateSwapper::Layout layout = StateSwapper::LayoutFor(swap);
  const int64_t file_bytes = layout.file_bytes;
  // The device behind the directory, for the request sizes (a partition has its own stat).
  struct stat dir_stat {};
  if (::stat(parent.c_str(), &dir_stat) == 0) {
    const std::string stat_path = "/sys/dev/block/" + std::to_string(major(dir_stat.st_dev)) + ":" +
                                  std::to_string(minor(dir_stat.st_dev)) + "/stat";
    if (::access(stat_path.c_str(), R_OK) == 0) g_device_stat = stat_path;
  }
  struct statvfs vfs {};
  if (::statvfs(parent.c_str(), &vfs) != 0) {
    std::fprintf(stderr, "offload_io_bench: statvfs(%s) failed: %s\n", parent.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const int64_t free_bytes =
      static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  // The swapper's file and fio's, plus 1 GiB so that the run never fills the disk for others.
  const int64_t needed = 2 * file_bytes + (int64_t{1} << 30);
  if (free_bytes < needed) {
    std::fprintf(stderr,
                 "offload_io_bench: %s has %s free; this run needs %s (the swapper's file %s, "
                 "fio's %s and 1 GiB spare). Pass a smaller --bytes or a --dir with more room\n",
                 parent.c_str(), FormatBytes(free_bytes).c_str(), FormatBytes(needed).c_str(),
                 FormatBytes(file_bytes).c_str(), FormatBytes(file_bytes).c_str());
    return 1;
  }
  const int64_t slot_bytes = layout.slot_bytes;
  const int64_t available = AvailableMemoryBytes();
  if (available != 0 && slot_bytes > available / 2) {
    std::fprintf(stderr,
                 "offload_io_bench: the swapper's slots need %s of host memory, %s available; "
                 "pass a smaller --sub-group or --buffer-count\n",
                 FormatBytes(slot_bytes).c_str(), FormatBytes(available).c_str());
    return 1;
  }

  std::snprintf(g_scratch.dir, sizeof g_scratch.dir, "%s/hoist_iobench.XXXXXX", parent.c_str());
  if (::mkdtemp(g_scratch.dir) == nullptr) {
    std::fprintf(stderr, "offload_io_bench: mkdtemp(%s) failed: %s; pass a writable --dir\n",
                 g_scratch.dir, std::strerror(errno));
    g_scratch.dir[0] = '\0';
    return 1;
  }
  ScratchGuard guard;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::snprintf(g_scratch.swap_file, sizeof g_scratch.swap_file, "%s/swap.bin", g_scratch.dir);
  std::snprintf(g_scratch.fio_file, sizeof g_scratch.fio_file, "%s/fio.bin", g_scratch.dir);
  std::snprintf(g_scratch.fio_err, sizeof g_scratch.fio_err, "%s/fio.err", g_scratch.dir);
  swap.path = g_scratch.swap_file;

  // --- the swapper, on the storage OpenBlockStorage picks for these options ---
  BlockStorageOptions storage_options;
  storage_options.block_size_bytes = args.block_size;
  storage_options.queue_depth = args.queue_depth;
  storage_options.backend = args.backend == "posix"   ? StorageBackend::kPosix
                            : args.backend == "uring" ? StorageBackend::kUring
                                                      : StorageBackend::kAuto;
  // Which backend OpenBlockStorage ends up with follows the same two questions it asks; its own
  // WARN line on stderr says when it fell back.
  auto probed = hoist::offload::ProbeIoUring();
  const bool uring = storage_options.backend != StorageBackend::kPosix &&
                     hoist::offload::UringStorageBuilt() && probed.ok() && *probed;
  int64_t alignment = 0;
  auto open = [&](const std::string& path,
                  int64_t size_bytes) -> hoist::StatusOr<std::unique_ptr<BlockStorage>> {
    auto storage = hoist::offload::OpenBlockStorage(path, size_bytes, storage_options);
    if (storage.ok()) alignment = (*storage)->alignment();
    return storage;
  };
  MemoryTracker tracker;
  PinnedHostPool pool(tracker);
  auto created = StateSwapper::Create(swap, open, pool, tracker);
  if (!created.ok()) {
    std::fprintf(stderr, "offload_io_bench: creating the swapper failed: %s\n",
                 created.status().ToString().c_str());
    return 1;
  }
  StateSwapper& swapper = **created;
  // ScratchFile opens with O_DIRECT where allowed and then requires 4096-byte alignment; a
  // buffered fallback reports 1.
  const bool direct = alignment == 4096;

  int fio_version_exit = 0;
  std::string fio_version =
      RunCommand(Quote(args.fio) + " --version 2>/dev/null", &fio_version_exit);
  fio_version.erase(fio_version.find_last_not_of(" \n") + 1);
  const bool have_fio = fio_version_exit == 0 && !fio_version.empty();

  std::printf("CPU: %s\n", hoist::GetCpuFeatures().model_name.c_str());
  std::printf("dir: %s (%s, %s free; device counters %s)\n", g_scratch.dir, fs_name.c_str(),
              FormatBytes(free_bytes).c_str(),
              g_device_stat.empty() ? "unknown: KiB/request shows 0" : g_device_stat.c_str());
  std::printf(
      "swapper: backend %s, O_DIRECT %s, file %s, %d arrays x %lld elements, %lld sub-groups of "
      "%lld elements (%s per array), %d slots (%s host, %s mlock'd), block %s, queue depth %d\n",
      uring ? "io_uring" : "posix (pread/pwrite)", direct ? "yes" : "NO (buffered: page cache)",
      FormatBytes(swapper.file_bytes()).c_str(), kArrays, static_cast<long long>(swap.elements),
      static_cast<long long>(swapper.num_sub_groups()),
      static_cast<long long>(swapper.sub_group_size()),
      FormatBytes(layout.array_strides.front()).c_str(), swapper.buffer_count(),
      FormatBytes(swapper.slot_bytes()).c_str(), FormatBytes(pool.bytes_locked()).c_str(),
      FormatBytes(args.block_size).c_str(), args.queue_depth);
  if (have_fio) {
    std::printf("fio: %s, io_uring, direct=1, bs %s, iodepth %d, size %s, numjobs 1\n",
                fio_version.c_str(), FormatBytes(args.block_size).c_str(), args.queue_depth,
                FormatBytes(swapper.file_bytes()).c_str());
  } else {
    std::printf("fio: not installed (apt-get install fio)\n");
  }
  if (!direct) {
    std::printf(
        "NOTICE: the scratch file is not O_DIRECT, so the swapper's reads may come from "
        "the page cache; its figures are not comparable with fio's --direct=1\n");
  }
  std::printf("repeats: %d (after one untimed write pass of each file)\n", args.repeats);
  std::fflush(stdout);

  const std::vector<uint64_t> source = RandomSource(swapper.sub_group_size());
  uint64_t pass_id = 1;
  // --- untimed: write both files once, so every timed pass overwrites written extents ---
  SwapPass warm;
  Status status = RunSwapper(swapper, StateSwapper::Access::kWrite, source, pass_id++, &warm);
  if (!status.ok()) {
    std::fprintf(stderr, "offload_io_bench: swapper write failed: %s\n", status.ToString().c_str());
    return 1;
  }
  std::string fio_error;
  if (have_fio && RunFio(args, swapper.file_bytes(), "write", &fio_error) < 0) {
    std::fprintf(stderr, "offload_io_bench: %s\n", fio_error.c_str());
    return 1;
  }

  // Each repeat runs write then read; within each, odd repeats run fio first, so that a disk
  // whose speed drifts (burst credits, a neighbour's load) does not favour one side.
  std::vector<double> swap_write, swap_read, fio_write, fio_read;
  std::vector<SwapPass> write_passes, read_passes;
  std::vector<double> fio_write_kib, fio_read_kib;
  for (int r = 0; r < args.repeats; ++r) {
    for (const bool writing : {true, false}) {
      const char* rw = writing ? "write" : "read";
      for (const bool fio_turn : {r % 2 == 1, r % 2 == 0}) {
        if (fio_turn) {
          if (!have_fio) continue;
          DeviceCounters device_before;
          ReadDeviceCounters(&device_before);
          const double gb_s = RunFio(args, swapper.file_bytes(), rw, &fio_error);
          if (gb_s < 0) {
            std::fprintf(stderr, "offload_io_bench: %s\n", fio_error.c_str());
            return 1;
          }
          (writing ? fio_write : fio_read).push_back(gb_s);
          (writing ? fio_write_kib : fio_read_kib).push_back(KibPerRequest(device_before, writing));
          continue;
        }
        SwapPass pass;
        status = RunSwapper(swapper,
                            writing ? StateSwapper::Access::kWrite : StateSwapper::Access::kRead,
                            source, pass_id++, &pass);
        if (!status.ok()) {
          std::fprintf(stderr, "offload_io_bench: swapper %s failed: %s\n", rw,
                       status.ToString().c_str());
          return 1;
        }
        (writing ? swap_write : swap_read).push_back(pass.gb_s);
        (writing ? write_passes : read_passes).push_back(pass);
      }
    }
  }

  // The passes of one repeat ran back to back, so their ratio is the least disturbed by the
  // disk's drift over the run; its median is the headline figure.
  std::vector<double> paired_write, paired_read;
  for (int r = 0; r < args.repeats && have_fio; ++r) {
    const size_t i = static_cast<size_t>(r);
    paired_write.push_back(swap_write[i] / fio_write[i]);
    paired_read.push_back(swap_read[i] / fio_read[i]);
    std::printf(
        "repeat %d: write swapper %.3f fio %.3f GB/s (%.3f, KiB/request %.0f/%.0f); read swapper "
        "%.3f fio %.3f GB/s (%.3f, KiB/request %.0f/%.0f)\n",
        r + 1, swap_write[i], fio_write[i], paired_write.back(), write_passes[i].kib_per_request,
        fio_write_kib[i], swap_read[i], fio_read[i], paired_read.back(),
        read_passes[i].kib_per_request, fio_read_kib[i]);
  }
  std::printf("\n%-6s %23s %23s %17s\n", "", "swapper GB/s best/med", "fio GB/s best/med",
              "ratio best/med");
  auto row = [&](const char* name, const std::vector<double>& hoist,
                 const std::vector<double>& anchor) {
    if (anchor.empty()) {
      std::printf("%-6s %11.3f %11.3f %23s %17s\n", name, Best(hoist), Median(hoist), "-", "-");
    } else {
      std::printf("%-6s %11.3f %11.3f %11.3f %11.3f %8.3f %8.3f\n", name, Best(hoist),
                  Median(hoist), Best(anchor), Median(anchor), Best(hoist) / Best(anchor),
                  Median(hoist) / Median(anchor));
    }
  };
  row("write", swap_write, fio_write);
  row("read", swap_read, fio_read);
  if (have_fio) {
    std::printf("median of per-repeat ratios: write %.3f, read %.3f\n", Median(paired_write),
                Median(paired_read));
  }
  // Where the swapper's wall time went, in the pass of median wall time: blocked on I/O (the
  // storage's Submit and Wait), in the visit, and the rest (bookkeeping). With >= 3 slots a
  // write visit's copy overlaps the previous sub-group's write, so it costs only where it
  // outlasts that write (and in full for the first sub-group, which has nothing to overlap).
  auto breakdown = [](const char* name, std::vector<SwapPass> passes) {
    std::sort(passes.begin(), passes.end(),
              [](const SwapPass& a, const SwapPass& b) { return a.wall_s < b.wall_s; });
    const SwapPass& p = passes[passes.size() / 2];
    std::printf("swapper %-5s pass %.3f s = io_wait %.3f + visit %.3f + other %.3f\n", name,
                p.wall_s, p.io_wait_s, p.visit_s, p.wall_s - p.io_wait_s - p.visit_s);
  };
  std::printf("\n");
  breakdown("write", write_passes);
  breakdown("read", read_passes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--dir") && has_value) {
      args.dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--bytes") && has_value) {
      args.bytes = ParseBytes(argv[++i]);
    } else if (!std::strcmp(argv[i], "--sub-group") && has_value) {
      args.sub_group = ParseBytes(argv[++i]);
    } else if (!std::strcmp(argv[i], "--buffer-count") && has_value) {
      args.buffer_count = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--block-size") && has_value) {
      args.block_size = ParseBytes(argv[++i]);
    } else if (!std::strcmp(argv[i], "--queue-depth") && has_value) {
      args.queue_depth = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--repeats") && has_value) {
      args.repeats = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--backend") && has_value) {
      args.backend = argv[++i];
    } else if (!std::strcmp(argv[i], "--fio") && has_value) {
      args.fio = argv[++i];
    } else {
      return Usage(argv[0]);
    }
  }
  if (args.bytes <= 0 || args.sub_group <= 0 || args.buffer_count < 1 || args.block_size <= 0 ||
      args.block_size % 4096 != 0 || args.queue_depth < 1 || args.repeats < 1 ||
      (args.backend != "auto" && args.backend != "posix" && args.backend != "uring")) {
    std::fprintf(stderr,
                 "offload_io_bench: every size and count must be positive, --block-size a "
                 "multiple of 4096 (O_DIRECT) and --backend auto, posix or uring\n");
    return Usage(argv[0]);
  }
  return Run(args);
}

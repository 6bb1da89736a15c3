#include "launcher/report.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/cpu_features.h"
#include "core/memory_tracker.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/device_facts.h"
#include "runtime/train/device_registry.h"

#if defined(__has_include)
#if __has_include(<linux/io_uring.h>)
#include <linux/io_uring.h>
#define HOIST_REPORT_HAS_IO_URING_HEADER 1
#endif
#endif

#if defined(_OPENMP)
#include <omp.h>
#endif

#if defined(HOIST_HAVE_NCCL)
#include <dlfcn.h>
#endif

namespace hoist::launcher {
namespace {

constexpr int kKeyWidth = 24;

void Heading(std::ostream& out, const char* title) { out << "\n" << title << "\n"; }

void Row(std::ostream& out, const std::string& key, const std::string& value) {
  out << "  " << std::left << std::setw(kKeyWidth) << key << value << "\n";
}

const char* YesNo(bool value) { return value ? "yes" : "no"; }

std::string CompilerName() {
#if defined(__clang__)
  return std::string("Clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown";
#endif
}

std::string BuildType() {
#if defined(HOIST_BUILD_TYPE)
  std::string type = HOIST_BUILD_TYPE;
#else
  std::string type;
#endif
#if defined(NDEBUG)
  std::string checks = "assert() off";
#else
  std::string checks = "assert() on";
#endif
#if defined(__SANITIZE_ADDRESS__)
  checks += ", AddressSanitizer";
#endif
  return type.empty() ? checks : type + " (" + checks + ")";
}

std::string NcclVersion() {
#if defined(HOIST_HAVE_NCCL)
  // Asked of the library that a process would load, so a machine missing it gets an answer
  // instead of a loader error before main().
  void* library = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (library == nullptr) return "not loadable (libnccl.so.2 not found)";
  using GetVersionFn = int (*)(int*);
  auto get_version = reinterpret_cast<GetVersionFn>(dlsym(library, "ncclGetVersion"));
  int code = 0;
  std::string result = "unknown (libnccl.so.2 has no ncclGetVersion)";
  if (get_version != nullptr && get_version(&code) == 0) {
    // NCCL 2.9 widened the minor field: major*10000 + minor*100 + patch; before, major*1000.
    int major = code >= 10000 ? code / 10000 : code / 1000;
    int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
    int patch = code % 100;
    result = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }
  dlclose(library);
  return result;
#else
  return "not in this build";
#endif
}

std::string ReadFirstLine(const char* path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

std::string KernelRelease() {
  struct utsname name {};
  if (uname(&name) != 0) return "unknown";
  return std::string(name.sysname) + " " + name.release;
}

std::string CoreCounts() {
  std::string text = std::to_string(std::thread::hardware_concurrency()) + " online";
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    text += ", " + std::to_string(CPU_COUNT(&set)) + " usable by this process";
  }
  return text;
}

std::string OpenMpThreads() {
#if defined(_OPENMP)
  return std::to_string(omp_get_max_threads());
#else
  return "no OpenMP in this build";
#endif
}

// A /proc/meminfo field ("MemTotal") as readable bytes, or "unknown".
std::string MemInfoField(const std::string& field) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib) {
    std::getline(meminfo, unit);
    if (key == field + ":") return FormatBytes(kib * 1024);
  }
  return "unknown";
}

std::string LockedMemoryLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return FormatBytes(static_cast<int64_t>(limit.rlim_cur)) +
         " (io_uring registered buffers beyond this need a higher `ulimit -l`)";
}

// Asks the kernel directly for a one-entry ring: hoist's NVMe offload needs exactly this to work,
// whatever library the build links.
std::string IoUringAvailability() {
#if defined(__NR_io_uring_setup) && defined(HOIST_REPORT_HAS_IO_URING_HEADER)
  io_uring_params params;
  std::memset(&params, 0, sizeof(params));
  long fd = syscall(__NR_io_uring_setup, 1, &params);
  if (fd >= 0) {
    close(static_cast<int>(fd));
    return "available";
  }
  int error = errno;
  switch (error) {
    case ENOSYS: return "not supported by the kernel (" + KernelRelease() + ")";
    case EPERM: {
      std::string disabled = ReadFirstLine("/proc/sys/kernel/io_uring_disabled");
      return "not permitted (kernel.io_uring_disabled=" +
             (disabled.empty() ? std::string("unset") : disabled) +
             ", or a seccomp/container policy); NVMe offload falls back to POSIX I/O";
    }
    default: return std::string("unavailable: ") + std::strerror(error);
  }
#else
  return "not supported on this platform";
#endif
}

// Which path bf16 products take in this process and why, with the rates the choice measured.
std::string Bf16GemmLine() {
  const kernels::cpu::GemmChoice& c = kernels::cpu::ActiveGemmPath();
  std::string line =
      std::string(kernels::cpu::GemmPathName(c.path)) + ": " + c.reason + " (ISA " + c.isa;
  if (c.bf16_gflops > 0) {
    char rates[96];
    std::snprintf(rates, sizeof(rates), "; 256x768x768: bf16 %.0f, sgemm %.0f GFLOP/s",
                  c.bf16_gflops, c.fp32_gflops);
    line += rates;
  }
  return line + ")";
}

// Which path bf16 attention takes in this process and why, with the probe's times.
std::string Bf16AttentionLine() {
  const kernels::cpu::AttentionChoice& c = kernels::cpu::ActiveAttentionPath();
  std::string line = std::string(c.bf16 ? "bf16 (oneDNN)" : "fp32 (BLAS sgemm)") + ": " + c.reason;
  if (c.bf16_ms > 0) {
    char times[96];
    std::snprintf(times, sizeof(times),
                  " (B=2 T=256 4x64 forward+backward: bf16 %.2f, fp32 %.2f ms)", c.bf16_ms,
                  c.fp32_ms);
    line += times;
  }
  return line;
}

}  // namespace

void PrintReport(std::ostream& out) {
  out << "hoist report\n";

  Heading(out, "build");
  Row(out, "hoist version", HOIST_VERSION);
  Row(out, "compiler", CompilerName());
  Row(out, "build type", BuildType());

  Heading(out, "optional parts in this build");
#if defined(HOIST_HAVE_CUDA)
  Row(out, "CUDA", YesNo(true));
#else
  Row(out, "CUDA", YesNo(false));
#endif
#if defined(HOIST_HAVE_NCCL)
  Row(out, "NCCL", YesNo(true));
#else
  Row(out, "NCCL", YesNo(false));
#endif
#if defined(HOIST_HAVE_MPI)
  Row(out, "MPI", YesNo(true));
#else
  Row(out, "MPI", YesNo(false));
#endif
#if defined(HOIST_HAVE_URING)
  Row(out, "io_uring (liburing)", YesNo(true));
#else
  Row(out, "io_uring (liburing)", YesNo(false));
#endif
#if defined(HOIST_HAVE_GRPC)
  Row(out, "gRPC", YesNo(true));
#else
  Row(out, "gRPC", YesNo(false));
#endif
#if defined(HOIST_HAVE_PROMETHEUS)
  Row(out, "Prometheus", YesNo(true));
#else
  Row(out, "Prometheus", YesNo(false));
#endif

  Heading(out, "libraries");
  Row(out, "OpenBLAS", kernels::cpu::BlasDescription());
  Row(out, "oneDNN", kernels::cpu::ActiveGemmPath().library);
  Row(out, "nlohmann_json",
      std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
          std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
          std::to_string(NLOHMANN_JSON_VERSION_PATCH));
  Row(out, "NCCL", NcclVersion());

  Heading(out, "machine");
  const CpuFeatures& cpu = GetCpuFeatures();
  Row(out, "CPU model", cpu.model_name.empty() ? "unknown" : cpu.model_name);
  Row(out, "SIMD level", SimdLevelName(ActiveSimdLevel()));
  Row(out, "CPU features",
      std::string("avx2+fma ") + YesNo(cpu.avx2_fma) + ", avx512 " + YesNo(cpu.avx512f) +
          ", avx512_bf16 " + YesNo(cpu.avx512_bf16) + ", amx_bf16 " + YesNo(cpu.amx_bf16));
  Row(out, "bf16 GEMM", Bf16GemmLine());
  Row(out, "bf16 attention", Bf16AttentionLine());
  Row(out, "cores", CoreCounts());
  Row(out, "OpenMP max threads", OpenMpThreads());
  Row(out, "memory total", MemInfoField("MemTotal"));
  Row(out, "memory available", MemInfoField("MemAvailable"));
  Row(out, "locked memory limit", LockedMemoryLimit());
  Row(out, "kernel", KernelRelease());
  Row(out, "io_uring", IoUringAvailability());

  // Every device there are facts for (kernels/device_facts.h): what this process sees of those
  // the binary trains on, as each says (runtime/train/device_registry.h), and what a build needs
  // for the others.
  Heading(out, "devices");
  for (const std::string& name : kernels::DeviceFactNames()) {
    const runtime::AcceleratorDevice* device = runtime::FindAcceleratorDevice(name);
    if (device == nullptr) {
      Row(out, name, kernels::FindDeviceFacts(name)->build_requirement);
      continue;
    }
    Row(out, name, "trains here (--device " + name + ")");
    if (!device->report) continue;
    for (const auto& [key, value] : device->report()) Row(out, key, value);
  }
}

}  // namespace hoist::launcher

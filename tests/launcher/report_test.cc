#include "launcher/report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/cpu_features.h"
#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/gemm_bf16.h"

#if defined(HOIST_HAVE_CUDA)
#include "core/cuda/cuda_device.h"
#endif

namespace hoist::launcher {
namespace {

std::string Report() {
  std::ostringstream out;
  PrintReport(out);
  return out.str();
}

// The value printed after `key` on its line ("  key     value": the key column is padded with at
// least two spaces, so "io_uring" does not match "io_uring (liburing)"), or "" without such a line.
std::string ValueOf(const std::string& report, const std::string& key) {
  std::istringstream lines(report);
  std::string line;
  while (std::getline(lines, line)) {
    std::size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || line.compare(start, key.size(), key) != 0) continue;
    std::size_t end = start + key.size();
    if (line.compare(end, 2, "  ") != 0) continue;
    std::size_t value = line.find_first_not_of(' ', end);
    if (value != std::string::npos) return line.substr(value);
  }
  return "";
}

TEST(Report, NamesTheHoistVersion) { EXPECT_EQ(ValueOf(Report(), "hoist version"), HOIST_VERSION); }

TEST(Report, ShowsTheSimdLevelHoistUses) {
  EXPECT_EQ(ValueOf(Report(), "SIMD level"), SimdLevelName(ActiveSimdLevel()));
}

// The bf16 GEMM line names the path this process took, the ISA seen and why.
TEST(Report, NamesTheBf16GemmPathAndWhy) {
  const kernels::cpu::GemmChoice& c = kernels::cpu::ActiveGemmPath();
  const std::string line = ValueOf(Report(), "bf16 GEMM");
  EXPECT_EQ(line.rfind(kernels::cpu::GemmPathName(c.path), 0), 0u) << line;
  EXPECT_NE(line.find(c.reason), std::string::npos) << line;
  EXPECT_NE(line.find("ISA " + c.isa), std::string::npos) << line;
  EXPECT_NE(ValueOf(Report(), "oneDNN"), "");
}

// The bf16 attention line names the path this process took and why.
TEST(Report, NamesTheBf16AttentionPathAndWhy) {
  const kernels::cpu::AttentionChoice& c = kernels::cpu::ActiveAttentionPath();
  const std::string line = ValueOf(Report(), "bf16 attention");
  EXPECT_EQ(line.rfind(c.bf16 ? "bf16 (oneDNN)" : "fp32 (BLAS sgemm)", 0), 0u) << line;
  EXPECT_NE(line.find(c.reason), std::string::npos) << line;
}

TEST(Report, SaysWhetherIoUringIsUsable) {
  std::string value = ValueOf(Report(), "io_uring");
  bool known = value == "available" || value.rfind("not permitted", 0) == 0 ||
               value.rfind("not supported", 0) == 0 || value.rfind("unavailable", 0) == 0;
  EXPECT_TRUE(known) << "io_uring line: '" << value << "'";
}

TEST(Report, GpuLineSaysNoneWithoutGpus) {
#if defined(HOIST_HAVE_CUDA)
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "GPUs are visible; the none case cannot be seen here";
  EXPECT_EQ(ValueOf(Report(), "GPUs").rfind("none", 0), 0u) << Report();
#else
  EXPECT_EQ(ValueOf(Report(), "cuda").rfind("this build of hoist has no CUDA", 0), 0u) << Report();
#endif
}

// Every device there are facts for has a row: the CPU trains in every build.
TEST(Report, NamesTheDevices) {
  const std::string report = Report();
  EXPECT_EQ(ValueOf(report, "cpu"), "trains here (--device cpu)") << report;
  EXPECT_FALSE(ValueOf(report, "cuda").empty()) << report;
#if defined(HOIST_HAVE_CUDA)
  EXPECT_EQ(ValueOf(report, "cuda"), "trains here (--device cuda)") << report;
  EXPECT_FALSE(ValueOf(report, "CUDA driver").empty()) << report;
#endif
}

TEST(Report, GpuLineCountsVisibleGpus) {
#if defined(HOIST_HAVE_CUDA)
  int count = CudaDeviceCount();
  if (count == 0) GTEST_SKIP() << "no CUDA GPU visible";
  EXPECT_EQ(ValueOf(Report(), "GPUs").rfind(std::to_string(count) + ":", 0), 0u) << Report();
#else
  GTEST_SKIP() << "this build has no CUDA";
#endif
}

TEST(Report, ListsEveryOptionalPart) {
  std::string report = Report();
  for (const char* part : {"CUDA", "NCCL", "MPI", "io_uring (liburing)", "gRPC", "Prometheus"}) {
    std::string value = ValueOf(report, part);
    EXPECT_TRUE(value == "yes" || value == "no") << part << ": '" << value << "'";
  }
}

TEST(Report, NamesTheLibrariesFound) {
  std::string report = Report();
  EXPECT_NE(ValueOf(report, "OpenBLAS").find("OpenBLAS"), std::string::npos) << report;
  EXPECT_FALSE(ValueOf(report, "nlohmann_json").empty()) << report;
}

TEST(Report, ReportsMemoryFromProcMeminfo) {
  std::string value = ValueOf(Report(), "memory total");
  EXPECT_NE(value, "unknown");
  EXPECT_NE(value.find("iB"), std::string::npos) << value;
}

}  // namespace
}  // namespace hoist::launcher

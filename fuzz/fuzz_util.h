// Shared by the fuzz targets: a private scratch directory per process, and the tiny checkpoint
// that the manifest target reads its shard from and fuzz_make_corpus writes as seeds.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "core/status.h"
#include "runtime/checkpoint/checkpoint.h"

namespace hoist::fuzz {

// A directory made once per process under $TMPDIR (or /tmp) and left behind on exit: libFuzzer
// ends the process in ways that skip destructors, and the files are small.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hoist_fuzz_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("hoist fuzz: mkdtemp");
      std::abort();
    }
    return pattern;
  }();
  return dir;
}

// Replaces `path` with `data`; aborts on an I/O error, which is the harness's fault, not the
// reader's.
inline void WriteBytes(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("hoist fuzz: writing " + path).c_str());
    std::abort();
  }
}

// A one-rank checkpoint of step 7 with two small blobs, committed under `dir`; returns its step
// directory. The same bytes every time, so the seed manifest matches the shard beside it.
inline std::string WriteTinyCheckpoint(const std::string& dir) {
  static const std::vector<float> weights = {0.5f, -1.25f, 3.0f, 0.0f};
  static const std::vector<int32_t> counters = {7, 42};
  const std::vector<runtime::CheckpointBlob> blobs = {
      {"weights", weights.data(), static_cast<int64_t>(weights.size() * sizeof(float))},
      {"counters", counters.data(), static_cast<int64_t>(counters.size() * sizeof(int32_t))}};
  Status s = runtime::WriteRankShard(dir, 7, 0, blobs);
  if (s.ok()) s = runtime::CommitCheckpoint(dir, 7, 1, {{"loss", 2.5}, {"note", "seed"}});
  if (!s.ok()) {
    std::fprintf(stderr, "hoist fuzz: writing the tiny checkpoint: %s\n", s.ToString().c_str());
    std::abort();
  }
  return dir + "/" + runtime::CheckpointStepDirName(7);
}

}  // namespace hoist::fuzz

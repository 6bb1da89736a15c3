// The JSONL dataset reader on arbitrary file contents (plain, gzip or zstd: the seeds hold each),
// with the shape found and named and with malformed rows skipped: every row or an error naming
// file and line, never a crash.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz/fuzz_util.h"
#include "runtime/data/dataset_rows.h"

namespace {

void ReadAll(const std::string& path, const hoist::runtime::RowReaderOptions& options) {
  auto reader = hoist::runtime::JsonlRowReader::Open(hoist::FileSystem::Posix(), path, options);
  if (!reader.ok()) return;
  hoist::runtime::DatasetRow row;
  while (true) {
    auto more = (*reader)->Next(&row);
    if (!more.ok() || !*more) return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = hoist::fuzz::ScratchDir() + "/rows.jsonl";
  hoist::fuzz::WriteBytes(path, data, size);
  ReadAll(path, {});
  hoist::runtime::RowReaderOptions skipping;
  skipping.skip_malformed = true;
  ReadAll(path, skipping);
  hoist::runtime::RowReaderOptions messages;
  messages.shape = hoist::runtime::RowShape::kMessages;
  ReadAll(path, messages);
  return 0;
}

// MemoryStorage: a BlockStorage held in ordinary memory, for tests of the swapper and of
// FaultInjectingStorage without a disk. It can demand an alignment so that code written against
// it also obeys O_DIRECT's rules. The storage owns its bytes; thread-safe on disjoint ranges
// like every BlockStorage. Never blocks beyond a memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "offload/block_storage.h"

namespace hoist::offload {

class MemoryStorage final : public BlockStorage {
 public:
  // `size_bytes` zero bytes named `path` (only used in messages); `alignment` must be a power
  // of two.
  MemoryStorage(std::string path, int64_t size_bytes, int64_t alignment = 1);

  Status Write(int64_t offset, const void* data, int64_t bytes) override;
  Status Read(int64_t offset, void* data, int64_t bytes) override;
  int64_t alignment() const override { return alignment_; }
  int64_t size_bytes() const override { return size_bytes_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int64_t size_bytes_;
  int64_t alignment_;
  std::unique_ptr<std::byte[]> bytes_;
};

}  // namespace hoist::offload

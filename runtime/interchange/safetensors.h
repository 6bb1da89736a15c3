// safetensors files, as Hugging Face writes them: an 8-byte little-endian header length N, N
// bytes of JSON ({"__metadata__": {string: string}, NAME: {"dtype", "shape", "data_offsets"}}),
// padded with spaces to a multiple of 8, then the tensors' bytes, row-major and little-endian,
// back to back with no gap (data_offsets are relative to the end of the header).
//
// Reading checks everything the header claims against the file before any tensor is read: a
// truncated file, offsets that overlap, leave a gap or run past the end, a shape whose element
// count does not match its bytes, an unknown dtype, JSON that is not the format's, each is
// DataLoss naming the file (and the tensor). Tensors are read with pread through a FileSystem
// (core/file_system.h), a range of elements at a time, rather than mapped: a caller reads only
// the part it needs (a rank its shard) into memory it owns, and a file truncated after it was
// opened gives an error instead of SIGBUS.
//
// Writing lays the file out as the safetensors library does (tensors sorted by dtype, widest
// kind first, then by name; the header's JSON compact, in that order, metadata first; padded with
// spaces), so a file that library wrote and hoist rewrites from the same tensors is the same
// bytes. Tensors are produced piece by piece, so a model larger than memory can be written.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/file_system.h"
#include "core/status.h"

namespace hoist::runtime {

// The largest header hoist reads (the safetensors library's own limit is 100 MB).
inline constexpr int64_t kSafetensorsMaxHeaderBytes = int64_t{100} << 20;

// One tensor as the header describes it.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;  // [] for a scalar
  int64_t begin = 0, end = 0;  // data_offsets: bytes, relative to the data section
  int64_t elements() const;    // the product of shape (1 for a scalar)
};

// The bytes of one element of a safetensors dtype, or 0 for a name the format does not define.
int SafetensorsDTypeSize(const std::string& dtype);
// "F32", "BF16", "F16" for hoist's types.
const char* SafetensorsDTypeName(DType type);

class SafetensorsFile {
 public:
  // Opens `path` and checks its header against the file (see the top of this file).
  static StatusOr<SafetensorsFile> Open(const std::string& path,
                                        FileSystem& fs = FileSystem::Posix());

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& path() const { return path_; }
  // In the order of their data.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // Null when the file has no tensor of that name.
  const SafetensorsTensor* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  int64_t header_bytes() const { return header_bytes_; }  // N, padding included

  // Elements [first, first + count) of `tensor` (row-major) widened or copied into `out` as
  // fp32. The tensor must be F32, BF16 or F16 (otherwise InvalidArgument naming it) and the
  // range inside it (checked). A read that comes up short (the file shrank) is DataLoss.
  Status ReadFloat(const SafetensorsTensor& tensor, int64_t first, int64_t count, float* out) const;
  // Bytes [offset, offset + bytes) of the tensor's data, as stored.
  Status ReadBytes(const SafetensorsTensor& tensor, int64_t offset, int64_t bytes, void* out) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
  int64_t header_bytes_ = 0;
};

// A tensor to write: its header entry and the code that produces its bytes. `produce` is called
// once, with an `emit` that appends the next bytes of the tensor (little-endian, row-major); the
// pieces must add up to exactly elements * dtype size.
struct SafetensorsOutput {
  using Emit = std::function<Status(const void* data, int64_t bytes)>;
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::function<Status(const Emit& emit)> produce;
};

// The order the safetensors library stores tensors in: by dtype (its enum, widest kind first:
// U64, I64, F64, F32, U32, I32, BF16, F16, ...), then by name.
void SortSafetensorsOutputs(std::vector<SafetensorsOutput>* tensors);

// The header bytes (length prefix included) of `tensors` in the order given.
StatusOr<std::string> SafetensorsHeader(const std::vector<SafetensorsOutput>& tensors,
                                        const std::map<std::string, std::string>& metadata);

// Writes `tensors` (sorted with SortSafetensorsOutputs first) to `path` atomically: to
// `path`.tmp, synced, then renamed. A full disk is ResourceExhausted naming the file, and the
// partial file is removed.
Status WriteSafetensors(const std::string& path, std::vector<SafetensorsOutput> tensors,
                        const std::map<std::string, std::string>& metadata,
                        FileSystem& fs = FileSystem::Posix());

}  // namespace hoist::runtime

// Internal to CpuBackend's model ops (cpu_backend_model.cc, cpu_backend_llama.cc): argument
// checks and the fp32 views through which 16-bit arrays reach the fp32 CPU kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/flash_attention_bf16.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu_backend.h"

namespace hoist::kernels::cpu_backend_detail {

inline const HostStream& HostStreamOf(const Stream& stream) {
  HOIST_CHECK(stream.kind() == DeviceKind::kCpu) << "a CPU backend op on a device stream";
  return static_cast<const HostStream&>(stream);
}

// bf16 products take oneDNN's path where the run's choice (made once, at the first bf16 product)
// says so; fp32 and fp16 always take the widened sgemm path. Attention's products follow their
// own choice, made within the matmuls' (kernels/cpu/attention_bf16.h), direct and tiled alike.
inline bool UseBf16Gemm(DType type) {
  return type == DType::kBFloat16 && cpu::ActiveGemmPath().path == cpu::GemmPath::kBf16Dnnl;
}
inline bool UseBf16Attention(DType type) {
  return type == DType::kBFloat16 && cpu::ActiveAttentionPath().bf16;
}

inline Status NotNull(const char* op, const char* name, const void* p) {
  if (p != nullptr) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " is null");
}

inline Status Positive(const char* op, const char* name, int64_t value) {
  if (value > 0) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " must be positive, got " +
                              std::to_string(value));
}

inline Status NonNegative(const char* op, const char* name, int64_t value) {
  if (value >= 0) return Status::Ok();
  return InvalidArgumentError(std::string(op) + ": " + name + " is negative (" +
                              std::to_string(value) + ")");
}

// An array an op is given, with its size in bytes: a null one is refused unless optional.
constexpr bool kOptional = true;
struct Arg {
  const char* name;
  const void* data;
  int64_t bytes;
  bool optional = false;
};

// The arrays' nulls, then (while live_memory records allocations) their memory.
inline Status CheckArgs(const char* op, std::initializer_list<Arg> args) {
  for (const Arg& a : args) {
    if (!a.optional) HOIST_RETURN_IF_ERROR(NotNull(op, a.name, a.data));
  }
  for (const Arg& a : args) {
    HOIST_RETURN_IF_ERROR(CheckDeviceArrays(op, {{a.name, a.data, a.bytes}}));
  }
  return Status::Ok();
}

// How an op uses an array it is given in `type`.
enum class Use {
  kIn,     // read
  kOut,    // written whole, not read
  kInOut,  // read, added to, written back
};

// Per-thread reuse of Wide's copies. A 16-bit run widens arrays of the same sizes at every step,
// and a fresh allocation of a large one (the logits: N x Vp floats, beyond malloc's mmap
// threshold) came back from the kernel as page faults on every call. A thread keeps up to
// kKeptScratch released buffers (the largest) for its next ops; the memory they hold is transient
// in the sense of the op contracts, never more than the thread's largest ops needed at once.
struct ScratchBuffer {
  std::unique_ptr<float[]> data;
  size_t capacity = 0;
};
constexpr size_t kKeptScratch = 8;

inline std::vector<ScratchBuffer>& FreeScratch() {
  thread_local std::vector<ScratchBuffer> free;
  return free;
}

// The smallest kept buffer of at least n floats, or a new one; its contents are undefined.
inline ScratchBuffer TakeScratch(size_t n) {
  std::vector<ScratchBuffer>& free = FreeScratch();
  size_t best = free.size();
  for (size_t i = 0; i < free.size(); ++i) {
    if (free[i].capacity >= n && (best == free.size() || free[i].capacity < free[best].capacity)) {
      best = i;
    }
  }
  if (best == free.size()) return {std::unique_ptr<float[]>(new float[n]), n};
  ScratchBuffer b = std::move(free[best]);
  free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
  return b;
}

inline void GiveBackScratch(ScratchBuffer b) {
  std::vector<ScratchBuffer>& free = FreeScratch();
  free.push_back(std::move(b));
  if (free.size() <= kKeptScratch) return;
  auto smallest = std::min_element(free.begin(), free.end(), [](const auto& x, const auto& y) {
    return x.capacity < y.capacity;
  });
  free.erase(smallest);
}

// An fp32 view of n elements of `type` at p (null stays null): fp32 arrays are used in place; a
// 16-bit one is widened into a copy (kIn, kInOut) or given a zeroed scratch (kOut), which Finish
// rounds back into the array (kOut, kInOut). The copies come from this thread's ScratchBuffers.
class Wide {
 public:
  Wide(const void* p, DType type, int64_t n, Use use)
      : array_(const_cast<void*>(p)), type_(type), n_(n), use_(use) {
    if (p == nullptr || type == DType::kFloat32) return;
    copy_ = TakeScratch(static_cast<size_t>(n));
    if (use == Use::kOut) {
      std::fill(copy_.data.get(), copy_.data.get() + n, 0.0f);
    } else {
      cpu::ToFloat(p, type, copy_.data.get(), n);
    }
  }
  ~Wide() {
    if (copy_.data != nullptr) GiveBackScratch(std::move(copy_));
  }
  Wide(const Wide&) = delete;
  Wide& operator=(const Wide&) = delete;
  float* get() {
    if (array_ == nullptr) return nullptr;
    return type_ == DType::kFloat32 ? static_cast<float*>(array_) : copy_.data.get();
  }
  void Finish() {
    if (array_ == nullptr || type_ == DType::kFloat32 || use_ == Use::kIn) return;
    cpu::FromFloat(copy_.data.get(), array_, type_, n_);
  }

 private:
  void* array_;
  DType type_;
  int64_t n_;
  Use use_;
  ScratchBuffer copy_;
};

// An elementwise fp32 kernel over 16-bit arrays, a chunk at a time: each thread widens a chunk of
// every array into buffers of its own that stay in cache, runs fn(views, count) on them and rounds
// the written ones back (kOut, kInOut; a kOut view holds garbage until fn writes it whole). Bit for
// bit what whole-array Wide views give, without their fp32 copies in memory. Arrays may alias:
// every chunk is read before it is written. fn runs inside an OpenMP parallel region.
constexpr int64_t kElementChunk = 4096;
struct ElementArray {
  const void* data;
  Use use;
};

template <typename Fn>
void ChunkedElementwise(DType type, int64_t n, std::initializer_list<ElementArray> list, Fn fn) {
  const std::vector<ElementArray> arrays(list);
  const int64_t chunks = (n + kElementChunk - 1) / kElementChunk;
#pragma omp parallel
  {
    std::vector<float> buffer(arrays.size() * kElementChunk);
    std::vector<float*> views(arrays.size());
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kElementChunk, count = std::min(kElementChunk, n - begin);
      for (size_t i = 0; i < arrays.size(); ++i) {
        views[i] = buffer.data() + i * kElementChunk;
        if (arrays[i].use != Use::kOut) {
          cpu::ToFloat(ElementPtr(arrays[i].data, type, begin), type, views[i], count);
        }
      }
      fn(views.data(), static_cast<size_t>(count));
      for (size_t i = 0; i < arrays.size(); ++i) {
        if (arrays[i].use == Use::kIn) continue;
        cpu::FromFloat(views[i], const_cast<void*>(ElementPtr(arrays[i].data, type, begin)), type,
                       count);
      }
    }
  }
}

// A row-wise fp32 kernel over 16-bit arrays of `rows` rows, a block of rows at a time: each
// array's rows of the block (`row_elements` each) are widened into a buffer of this thread's
// that the blocks reuse, fn(views, first_row, count) runs the fp32 kernel on them, and the written
// ones (kOut, kInOut) are rounded back. Blocks go in order and the kernel inside fn uses the
// threads, so a kernel that sums over rows in row order (a parameter's gradient) sums in the same
// order as over the whole arrays: bit for bit what whole-array Wide views give, with about
// kRowBlockElements floats per array instead of copies of the arrays. fp32 arrays are used in
// place, all rows in one call. An array read and written is one kInOut entry. A kOut block is
// not cleared: the kernel must write every element of it (Wide's kOut views start zeroed).
constexpr int64_t kRowBlockElements = int64_t{1} << 16;
struct RowArray {
  const void* data;
  Use use;
  int64_t row_elements;
};

template <typename Fn>
void RowBlocks(DType type, int64_t rows, std::initializer_list<RowArray> list, Fn fn) {
  const std::vector<RowArray> arrays(list);
  std::vector<float*> views(arrays.size());
  if (type == DType::kFloat32) {  // the arrays themselves, all rows at once
    for (size_t i = 0; i < arrays.size(); ++i) {
      views[i] = static_cast<float*>(const_cast<void*>(arrays[i].data));
    }
    fn(views.data(), int64_t{0}, rows);
    return;
  }
  int64_t widest = 1;
  for (const RowArray& a : arrays) widest = std::max(widest, a.row_elements);
  const int64_t block = std::max<int64_t>(1, kRowBlockElements / widest);
  std::vector<ScratchBuffer> buffers;
  for (size_t i = 0; i < arrays.size(); ++i) {
    buffers.push_back(
        TakeScratch(static_cast<size_t>(std::min(block, rows) * arrays[i].row_elements)));
    views[i] = buffers[i].data.get();
  }
  for (int64_t first = 0; first < rows; first += block) {
    const int64_t count = std::min(block, rows - first);
    for (size_t i = 0; i < arrays.size(); ++i) {
      if (arrays[i].use == Use::kOut) continue;
      cpu::ToFloat(ElementPtr(arrays[i].data, type, first * arrays[i].row_elements), type, views[i],
                   count * arrays[i].row_elements);
    }
    fn(views.data(), first, count);
    for (size_t i = 0; i < arrays.size(); ++i) {
      if (arrays[i].use == Use::kIn) continue;
      cpu::FromFloat(
          views[i],
          const_cast<void*>(ElementPtr(arrays[i].data, type, first * arrays[i].row_elements)), type,
          count * arrays[i].row_elements);
    }
  }
  for (ScratchBuffer& b : buffers) GiveBackScratch(std::move(b));
}

}  // namespace hoist::kernels::cpu_backend_detail

#include "kernels/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/live_memory.h"
#include "kernels/cpu/adamw8bit_step.h"
#include "kernels/cpu/adamw_step.h"
#include "kernels/cpu/blockwise_quant.h"
#include "kernels/cpu/convert.h"

namespace hoist::kernels {
namespace {

// Mixed-type arithmetic goes through fp32 in chunks of this many elements.
constexpr int64_t kChunk = 1 << 16;

const HostStream& HostStreamOf(const Stream& stream) {
  HOIST_CHECK(stream.kind() == DeviceKind::kCpu) << "a CPU backend op on a device stream";
  return static_cast<const HostStream&>(stream);
}

Status CheckArray(const char* op, const char* name, const void* p, int64_t n) {
  if (n < 0) {
    return InvalidArgumentError(std::string(op) + ": " + name + " has a negative length (" +
                                std::to_string(n) + ")");
  }
  if (n > 0 && p == nullptr)
    return InvalidArgumentError(std::string(op) + ": " + name + " is null");
  return Status::Ok();
}

// The step's scalars as the CPU kernels take them (weight_decay is set per tensor).
cpu::AdamWHyperparams HyperparamsOf(const AdamWStepScalars& scalars) {
  cpu::AdamWHyperparams h;
  h.lr = scalars.lr;
  h.beta1 = scalars.beta1;
  h.beta2 = scalars.beta2;
  h.eps = scalars.eps;
  h.grad_scale = scalars.grad_scale;
  h.step = scalars.step;
  return h;
}

}  // namespace

Status CheckDeviceArrays(const char* op, std::initializer_list<DeviceArrayArg> arrays) {
  if (!live_memory::Enabled()) return Status::Ok();
  for (const DeviceArrayArg& a : arrays) {
    if (a.data == nullptr || a.bytes <= 0 || live_memory::Contains(a.data, a.bytes)) continue;
    return InvalidArgumentError(std::string(op) + ": " + a.name + " (" + std::to_string(a.bytes) +
                                " bytes) is not memory a hoist allocator handed out: pageable "
                                "host memory where device memory belongs, which a GPU cannot "
                                "read (copy it up first)");
  }
  return Status::Ok();
}

CpuBackend::CpuBackend(Device* device, HostStream::Mode mode)
    : device_(device), compute_(mode), copy_(mode) {
  HOIST_CHECK(device != nullptr);
  // Buffers go back as on a GPU: after the compute stream's work that may still use them.
  served_ = mode == HostStream::Mode::kThreaded ? dynamic_cast<CpuDevice*>(device) : nullptr;
  if (served_ != nullptr) served_->ServeStream(&compute_);
}

CpuBackend::~CpuBackend() {
  // Frees already enqueued still run: the stream drains as it goes.
  if (served_ != nullptr) served_->StopServing(&compute_);
}

std::string CpuBackend::name() const {
  return mode() == HostStream::Mode::kInline ? "cpu" : "cpu (threaded streams)";
}

bool CpuBackend::IsDeviceMemory(const void* p) const { return live_memory::OnDevice(p); }

StatusOr<std::unique_ptr<Event>> CpuBackend::CreateEvent() {
  return std::unique_ptr<Event>(std::make_unique<HostEvent>());
}

Status CpuBackend::Zero(void* dst, int64_t bytes, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(CheckArray("Zero", "dst", dst, bytes));
  HOIST_RETURN_IF_ERROR(CheckDeviceArrays("Zero", {{"dst", dst, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
    return Status::Ok();
  });
}

Status CpuBackend::Copy(void* dst, const void* src, int64_t bytes, CopyDirection direction,
                        const Stream& stream) {
  HOIST_RETURN_IF_ERROR(CheckArray("Copy", "dst", dst, bytes));
  HOIST_RETURN_IF_ERROR(CheckArray("Copy", "src", src, bytes));
  const bool dst_on_device =
      direction == CopyDirection::kHostToDevice || direction == CopyDirection::kDeviceToDevice;
  const bool src_on_device =
      direction == CopyDirection::kDeviceToHost || direction == CopyDirection::kDeviceToDevice;
  HOIST_RETURN_IF_ERROR(CheckDeviceArrays("Copy", {{"dst", dst_on_device ? dst : nullptr, bytes},
                                                   {"src", src_on_device ? src : nullptr, bytes}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (bytes > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return Status::Ok();
  });
}

Status CpuBackend::Cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
                        const Stream& stream) {
  HOIST_RETURN_IF_ERROR(CheckArray("Cast", "dst", dst, n));
  HOIST_RETURN_IF_ERROR(CheckArray("Cast", "src", src, n));
  if (dst == src && dst_type != src_type && n > 0) {
    return InvalidArgumentError("Cast: dst and src are the same array of two types");
  }
  HOIST_RETURN_IF_ERROR(
      CheckDeviceArrays("Cast", {{"dst", dst, n * static_cast<int64_t>(DTypeSize(dst_type))},
                                 {"src", src, n * static_cast<int64_t>(DTypeSize(src_type))}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (n == 0) return Status::Ok();
    if (src_type == DType::kFloat32) {
      cpu::FromFloat(static_cast<const float*>(src), dst, dst_type, n);
    } else if (dst_type == DType::kFloat32) {
      cpu::ToFloat(src, src_type, static_cast<float*>(dst), n);
    } else if (dst_type == src_type) {
      if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * DTypeSize(dst_type));
    } else {
      // One 16-bit type to the other: widening is exact, so this rounds once.
      std::vector<float> wide(static_cast<size_t>(std::min(n, kChunk)));
      for (int64_t begin = 0; begin < n; begin += kChunk) {
        const int64_t count = std::min(kChunk, n - begin);
        cpu::ToFloat(ElementPtr(src, src_type, begin), src_type, wide.data(), count);
        cpu::FromFloat(wide.data(), ElementPtr(dst, dst_type, begin), dst_type, count);
      }
    }
    return Status::Ok();
  });
}

Status CpuBackend::Accumulate(void* acc, DType acc_type, const void* add, DType add_type,
                              float scale, int64_t n, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(CheckArray("Accumulate", "acc", acc, n));
  HOIST_RETURN_IF_ERROR(CheckArray("Accumulate", "add", add, n));
  HOIST_RETURN_IF_ERROR(CheckDeviceArrays(
      "Accumulate", {{"acc", acc, n * static_cast<int64_t>(DTypeSize(acc_type))},
                     {"add", add, n * static_cast<int64_t>(DTypeSize(add_type))}}));
  return HostStreamOf(stream).Enqueue([=] {
    if (n == 0) return Status::Ok();
    if (acc_type == add_type) {
      cpu::Accumulate(acc, add, acc_type, scale, n);
      return Status::Ok();
    }
    if (add_type == DType::kFloat32 && scale == 1.0f) {
      cpu::AccumulateFloat(acc, acc_type, static_cast<const float*>(add), n);
      return Status::Ok();
    }
    std::vector<float> wide(static_cast<size_t>(std::min(n, kChunk)));
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t count = std::min(kChunk, n - begin);
      cpu::ToFloat(ElementPtr(add, add_type, begin), add_type, wide.data(), count);
      if (scale != 1.0f) {
        for (float& x : std::span(wide.data(), static_cast<size_t>(count))) x *= scale;
      }
      cpu::AccumulateFloat(ElementPtr(acc, acc_type, begin), acc_type, wide.data(), count);
    }
    return Status::Ok();
  });
}

Status CpuBackend::SumOfSquares(const void* x, DType type, float scale, int64_t n, double* sum,
                                const Stream& stream) {
  HOIST_RETURN_IF_ERROR(CheckArray("SumOfSquares", "x", x, n));
  HOIST_RETURN_IF_ERROR(CheckArray("SumOfSquares", "sum", sum, 1));
  HOIST_RETURN_IF_ERROR(
      CheckDeviceArrays("SumOfSquares", {{"x", x, n * static_cast<int64_t>(DTypeSize(type))},
                                         {"sum", sum, static_cast<int64_t>(sizeof(double))}}));
  return HostStreamOf(stream).Enqueue([=] {
    *sum += cpu::ScaledSumOfSquares(x, type, scale, n);
    return Status::Ok();
  });
}

Status CpuBackend::AdamW(std::span<const AdamWTensorRef> tensors, DType grad_type, DType copy_type,
                         const AdamWStepScalars& scalars, const Stream& stream) {
  if (scalars.step < 1) {
    return InvalidArgumentError("AdamW: the step count is 1-based, got " +
                                std::to_string(scalars.step));
  }
  for (const AdamWTensorRef& t : tensors) {
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW", "param", t.param, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW", "m", t.m, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW", "v", t.v, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW", "grad", t.grad, t.n));
    const int64_t floats = t.n * static_cast<int64_t>(sizeof(float));
    HOIST_RETURN_IF_ERROR(CheckDeviceArrays(
        "AdamW", {{"param", t.param, floats},
                  {"m", t.m, floats},
                  {"v", t.v, floats},
                  {"grad", t.grad, t.n * static_cast<int64_t>(DTypeSize(grad_type))},
                  {"copy", t.copy, t.n * static_cast<int64_t>(DTypeSize(copy_type))}}));
  }
  // The work owns its list: the caller's span may be gone by the time a threaded stream runs it.
  std::vector<AdamWTensorRef> list(tensors.begin(), tensors.end());
  return HostStreamOf(stream).Enqueue([list = std::move(list), grad_type, copy_type, scalars] {
    cpu::AdamWHyperparams h = HyperparamsOf(scalars);
    for (const AdamWTensorRef& t : list) {
      if (t.n == 0) continue;
      cpu::AdamWShard shard;
      shard.param = t.param;
      shard.m = t.m;
      shard.v = t.v;
      shard.grad = t.grad;
      shard.grad_format = grad_type;
      shard.n = static_cast<size_t>(t.n);
      const bool half_copy = t.copy != nullptr && IsHalf(copy_type);
      if (half_copy) {
        shard.param_copy = static_cast<uint16_t*>(t.copy);
        shard.copy_format = copy_type;
      }
      h.weight_decay = t.weight_decay;
      cpu::AdamWFusedStep(shard, h);
      // An fp32 copy (the model's weights away from the master copy) is the master's bits.
      if (t.copy != nullptr && !half_copy && t.copy != t.param) {
        std::memcpy(t.copy, t.param, static_cast<size_t>(t.n) * sizeof(float));
      }
    }
    return Status::Ok();
  });
}

Status CpuBackend::AdamW8bit(std::span<const AdamW8bitTensorRef> tensors, DType grad_type,
                             DType copy_type, const AdamWStepScalars& scalars,
                             const Stream& stream) {
  if (scalars.step < 1) {
    return InvalidArgumentError("AdamW8bit: the step count is 1-based, got " +
                                std::to_string(scalars.step));
  }
  for (const AdamW8bitTensorRef& t : tensors) {
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW8bit", "param", t.param, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW8bit", "m", t.m, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW8bit", "v", t.v, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW8bit", "absmax_m", t.absmax_m, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW8bit", "absmax_v", t.absmax_v, t.n));
    HOIST_RETURN_IF_ERROR(CheckArray("AdamW8bit", "grad", t.grad, t.n));
    const int64_t absmax_bytes = cpu::QuantBlocks(t.n) * static_cast<int64_t>(sizeof(float));
    HOIST_RETURN_IF_ERROR(CheckDeviceArrays(
        "AdamW8bit", {{"param", t.param, t.n * static_cast<int64_t>(sizeof(float))},
                      {"m", t.m, t.n},
                      {"v", t.v, t.n},
                      {"absmax_m", t.absmax_m, absmax_bytes},
                      {"absmax_v", t.absmax_v, absmax_bytes},
                      {"grad", t.grad, t.n * static_cast<int64_t>(DTypeSize(grad_type))},
                      {"copy", t.copy, t.n * static_cast<int64_t>(DTypeSize(copy_type))}}));
  }
  std::vector<AdamW8bitTensorRef> list(tensors.begin(), tensors.end());
  return HostStreamOf(stream).Enqueue([list = std::move(list), grad_type, copy_type, scalars] {
    cpu::AdamWHyperparams h = HyperparamsOf(scalars);
    for (const AdamW8bitTensorRef& t : list) {
      if (t.n == 0) continue;
      cpu::AdamW8bitShard shard;
      shard.param = t.param;
      shard.m = t.m;
      shard.v = t.v;
      shard.absmax_m = t.absmax_m;
      shard.absmax_v = t.absmax_v;
      shard.grad = t.grad;
      shard.grad_format = grad_type;
      shard.n = static_cast<size_t>(t.n);
      const bool half_copy = t.copy != nullptr && IsHalf(copy_type);
      if (half_copy) {
        shard.param_copy = static_cast<uint16_t*>(t.copy);
        shard.copy_format = copy_type;
      }
      h.weight_decay = t.weight_decay;
      cpu::AdamW8bitStep(shard, h);
      if (t.copy != nullptr && !half_copy && t.copy != t.param) {
        std::memcpy(t.copy, t.param, static_cast<size_t>(t.n) * sizeof(float));
      }
    }
    return Status::Ok();
  });
}

}  // namespace hoist::kernels

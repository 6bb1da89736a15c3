#include "kernels/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/adamw_step.h"
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

}  // namespace

CpuBackend::CpuBackend(Device* device, HostStream::Mode mode)
    : device_(device), compute_(mode), copy_(mode) {
  HOIST_CHECK(device != nullptr);
}

std::string CpuBackend::name() const {
  return mode() == HostStream::Mode::kInline ? "cpu" : "cpu (threaded streams)";
}

StatusOr<std::unique_ptr<Event>> CpuBackend::CreateEvent() {
  return std::unique_ptr<Event>(std::make_unique<HostEvent>());
}

Status CpuBackend::Zero(void* dst, int64_t bytes, const Stream& stream) {
  HOIST_RETURN_IF_ERROR(CheckArray("Zero", "dst", dst, bytes));
  return HostStreamOf(stream).Enqueue([=] {
    if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
    return Status::Ok();
  });
}

Status CpuBackend::Copy(void* dst, const void* src, int64_t bytes, CopyDirection,
                        const Stream& stream) {
  HOIST_RETURN_IF_ERROR(CheckArray("Copy", "dst", dst, bytes));
  HOIST_RETURN_IF_ERROR(CheckArray("Copy", "src", src, bytes));
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
  }
  // The work owns its list: the caller's span may be gone by the time a threaded stream runs it.
  std::vector<AdamWTensorRef> list(tensors.begin(), tensors.end());
  return HostStreamOf(stream).Enqueue([list = std::move(list), grad_type, copy_type, scalars] {
    cpu::AdamWHyperparams h;
    h.lr = scalars.lr;
    h.beta1 = scalars.beta1;
    h.beta2 = scalars.beta2;
    h.eps = scalars.eps;
    h.grad_scale = scalars.grad_scale;
    h.step = scalars.step;
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

}  // namespace hoist::kernels

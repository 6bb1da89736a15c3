// FlatParamStore: the zero::ParamStore a model owns when it is created without one (tests, tools,
// the sampler; training goes through the ZeRO engine). Every unit whole, back to back in one fp32
// buffer each for the weights and the gradients; a model that computes in a 16-bit type gets the
// unit rounded to it on every acquire, through a copy of the unit. Memory of the backend's device,
// tracked as Category::kParam and kGrad. Used by one thread, as the model that owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "zero/param_store.h"

namespace hoist::runtime {

class FlatParamStore final : public zero::ParamStore {
 public:
  // `unit_offsets`: one entry per unit and a last one, the total (unit u is [u, u + 1)). Allocates
  // from `backend`'s device (which must outlive the store) and zeroes the weights and gradients on
  // its compute stream.
  static StatusOr<std::unique_ptr<FlatParamStore>> Create(std::vector<int64_t> unit_offsets,
                                                          kernels::Backend* backend, DType type);

  StatusOr<const void*> AcquireParams(int unit) override;
  DType param_type() const override { return type_; }
  void ReleaseParams(int) override {}
  void Prefetch(int) override {}
  StatusOr<float*> AcquireGrads(int unit) override { return grads() + unit_offsets_[unit]; }
  void ReleaseGrads(int) override {}
  Status status() const override { return status_; }

  float* params() { return params_.as<float>(); }
  // Elements of the weights (and of the gradients): every unit's.
  int64_t elements() const { return unit_offsets_.back(); }
  float* grads() { return grads_.as<float>(); }

 private:
  FlatParamStore() = default;

  std::vector<int64_t> unit_offsets_;
  kernels::Backend* backend_ = nullptr;
  DType type_ = DType::kFloat32;
  Buffer params_, grads_, typed_;
  Status status_;
};

}  // namespace hoist::runtime

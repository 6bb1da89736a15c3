// ParamStore: where a model gets its weights and puts its gradients, one unit at a time.
//
// A model's parameters are grouped into units (for GPT-2: the embeddings, each transformer block,
// the final layernorm), the granularity at which ZeRO partitions, gathers and reduces. The model
// asks for a unit's weights right before it computes with them and gives them back right after,
// and it hints which unit comes next so a partitioned store can start gathering it early. Weights
// come in the store's param_type() (fp32, or the 16-bit compute type of mixed precision, which
// the model then computes in) in the unit's own layout (the model's offsets within the unit);
// where they live between uses (whole or sharded across ranks, offloaded) is the store's business.
// The one exception, a store that keeps weights in 4 bits (zero/quantized_store.h), hands out a
// handle that the model reads only through Weight(), which says where each weight is and in
// which form; the models read their transformer blocks (the units such a store may quantize)
// that way.
//
// Gradients follow the same protocol: AcquireGrads returns an fp32 buffer of the unit's size into
// which the backward pass accumulates this micro-batch's gradient; ReleaseGrads hands it back
// (the store may reduce it across ranks right away). Within one micro-batch a unit's gradients may
// be acquired once and released once; a store may return a buffer that already holds earlier
// micro-batches' gradients, so the model must only ever add to it.
//
// Calls come from the one thread that drives the model. An Acquire that cannot be served (a
// collective that failed, memory that ran out) returns the error, and the model abandons the pass
// there (nothing more is asked of the store). What goes wrong in work the store runs in the
// background after a Release or a Prefetch (a reduction, a read ahead) cannot be returned by
// those calls: the store keeps the first such error, returns it from the next Acquire that has to
// fetch a unit (one already held is handed out again as it is) and reports it through status(),
// which the caller checks after each pass.
#pragma once

#include <cstdint>

#include "core/check.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/nf4.h"

namespace hoist::zero {

// Where one weight of an acquired unit is (ParamStore::Weight): `dense` in the store's
// param_type(), or, where the store holds it in 4 bits (a LoRA fine-tune's frozen base, dense
// null), its NF4 matrix and the scratch that the 4-bit matmuls (Backend::MatmulForwardNf4)
// dequantize it into, the store's, valid while the unit is acquired.
struct StoredWeight {
  const void* dense = nullptr;
  kernels::nf4::Matrix nf4;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  static StoredWeight Dense(const void* values) {
    StoredWeight weight;
    weight.dense = values;
    return weight;
  }
};

class ParamStore {
 public:
  virtual ~ParamStore() = default;

  // The unit's weights in param_type() (a 4-bit store's: a handle for Weight()), valid until
  // ReleaseParams(unit) and ordered before the work the caller enqueues after this call on the
  // compute stream; the store's error when it cannot serve them.
  virtual StatusOr<const void*> AcquireParams(int unit) = 0;
  // The element type of every unit AcquireParams hands out; fixed for the store's life.
  virtual DType param_type() const { return DType::kFloat32; }
  virtual void ReleaseParams(int unit) = 0;
  // The model will acquire `unit` soon; a store may start fetching it. Never required.
  virtual void Prefetch(int unit) = 0;

  // An fp32 buffer of the unit's size that the backward pass adds this unit's gradient to; the
  // store's error when it cannot serve it.
  virtual StatusOr<float*> AcquireGrads(int unit) = 0;
  virtual void ReleaseGrads(int unit) = 0;

  // The first error the store met, or Ok.
  virtual Status status() const = 0;

  // The weight at element `offset` of the unit's layout, where `acquired` is what
  // AcquireParams(unit) returned: `acquired` + offset in param_type(), except in a store that
  // keeps some weights in 4 bits, whose AcquireParams hands out a handle the model reads only
  // through this (zero/quantized_store.h). A matrix is asked for by its first element.
  virtual StoredWeight Weight(int /*unit*/, const void* acquired, int64_t offset) const {
    return StoredWeight::Dense(ElementPtr(acquired, param_type(), offset));
  }
};

// Two stores seen as one: units [0, first_units) are `first`'s, the units after them `second`'s
// (renumbered from 0). A LoRA fine-tune's model computes through one: the frozen base's engine
// first, the adapters' engine second. Both must hand out the same param_type(); status() is the
// first store's error, else the second's. Neither is owned.
class JoinedParamStore final : public ParamStore {
 public:
  JoinedParamStore(ParamStore* first, int first_units, ParamStore* second)
      : first_(first), second_(second), first_units_(first_units) {
    HOIST_CHECK(first->param_type() == second->param_type())
        << "joined stores hand out " << DTypeName(first->param_type()) << " and "
        << DTypeName(second->param_type());
  }

  StatusOr<const void*> AcquireParams(int unit) override {
    return unit < first_units_ ? first_->AcquireParams(unit)
                               : second_->AcquireParams(unit - first_units_);
  }
  DType param_type() const override { return first_->param_type(); }
  void ReleaseParams(int unit) override {
    unit < first_units_ ? first_->ReleaseParams(unit) : second_->ReleaseParams(unit - first_units_);
  }
  void Prefetch(int unit) override {
    unit < first_units_ ? first_->Prefetch(unit) : second_->Prefetch(unit - first_units_);
  }
  StatusOr<float*> AcquireGrads(int unit) override {
    return unit < first_units_ ? first_->AcquireGrads(unit)
                               : second_->AcquireGrads(unit - first_units_);
  }
  void ReleaseGrads(int unit) override {
    unit < first_units_ ? first_->ReleaseGrads(unit) : second_->ReleaseGrads(unit - first_units_);
  }
  Status status() const override {
    Status first = first_->status();
    return first.ok() ? second_->status() : first;
  }
  StoredWeight Weight(int unit, const void* acquired, int64_t offset) const override {
    return unit < first_units_ ? first_->Weight(unit, acquired, offset)
                               : second_->Weight(unit - first_units_, acquired, offset);
  }

 private:
  ParamStore* first_;
  ParamStore* second_;
  int first_units_;
};

}  // namespace hoist::zero

#include "runtime/model/flat_store.h"

namespace hoist::runtime {

StatusOr<std::unique_ptr<FlatParamStore>> FlatParamStore::Create(std::vector<int64_t> unit_offsets,
                                                                 kernels::Backend* backend,
                                                                 DType type) {
  std::unique_ptr<FlatParamStore> store(new FlatParamStore);
  store->unit_offsets_ = std::move(unit_offsets);
  store->backend_ = backend;
  store->type_ = type;
  Device& device = backend->device();
  const int64_t total = store->unit_offsets_.back();
  const int64_t bytes = total * int64_t{sizeof(float)};
  HOIST_ASSIGN_OR_RETURN(store->params_, device.Allocate(bytes, Category::kParam));
  HOIST_ASSIGN_OR_RETURN(store->grads_, device.Allocate(bytes, Category::kGrad));
  if (type != DType::kFloat32) {
    HOIST_ASSIGN_OR_RETURN(store->typed_,
                           device.Allocate(total * int64_t(DTypeSize(type)), Category::kParam));
  }
  // Zero weights until the model initializes or loads them, and zero gradients.
  const Stream& stream = backend->compute_stream();
  HOIST_RETURN_IF_ERROR(backend->Zero(store->params(), bytes, stream));
  HOIST_RETURN_IF_ERROR(backend->Zero(store->grads(), bytes, stream));
  return store;
}

StatusOr<const void*> FlatParamStore::AcquireParams(int unit) {
  const int64_t offset = unit_offsets_[static_cast<size_t>(unit)];
  const float* weights = params() + offset;
  if (type_ == DType::kFloat32) return static_cast<const void*>(weights);
  void* typed = ElementPtr(typed_.data(), type_, offset);
  const Status cast = backend_->Cast(typed, type_, weights, DType::kFloat32,
                                     unit_offsets_[static_cast<size_t>(unit) + 1] - offset,
                                     backend_->compute_stream());
  if (!cast.ok()) {
    if (status_.ok()) status_ = cast;
    return cast;
  }
  return static_cast<const void*>(typed);
}

}  // namespace hoist::runtime

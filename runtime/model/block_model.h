// BlockModel: what every decoder family has in common, written once. A family (GPT-2 in
// runtime/model/gpt2.h, Llama in runtime/model/decoder.h, ...) derives from it, declares its units,
// its arrays and the tensors its blocks save for backward, and writes its embedding, its block's
// forward and backward and its final norm. Everything else is here:
//
//  - the unit protocol: unit 0 is the embedding, unit 1 + l block l, unit L + 1 the final norm
//    (and an untied head); each unit is acquired from the zero::ParamStore right before its use,
//    the next one prefetched, released after; the gradients acquired and released alike, none for
//    a frozen base (LoRA). The head is the embedding's matrix (tied) or one in the final unit;
//    a training forward keeps the head's unit acquired until backward's head has used it;
//  - the activation arena: the base's arrays and the family's, carved back to back (64-byte
//    aligned) out of one device buffer, a backward scratch buffer, the token buffer, the
//    attention workspace, and pinned host memory for cpu_checkpointing's block inputs; counted
//    by the same code without allocating (ActivationFootprint);
//  - the saved-tensor table: under each checkpointing policy which layer keeps which saved tensor
//    (a stack of the layers that keep it) and which recomputes it (one working layer); the
//    family declares the tensors, their types and which the selective policy keeps; the last one
//    is the block's output, which every layer keeps (cpu_checkpointing puts it on the host);
//  - recomputation in backward: the family's block forward run again for exactly the tensors the
//    layer did not keep, timed; the same ops on the same inputs give the same bits;
//  - token staging (through a host copy the model owns), the cross-entropy and its read-back, the
//    LoRA adapters' dispatch, the model's own flat store when it is given none.
//
// A family's hooks return Status; the first error stops the pass, which returns it, as the Model
// interface says. Not thread-safe: one model is driven by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "offload/pinned_pool.h"
#include "runtime/model/flat_store.h"
#include "runtime/model/model.h"
#include "runtime/model/model_config.h"
#include "zero/param_store.h"

namespace hoist::runtime {

class BlockModel : public Model {
 public:
  ~BlockModel() override;

  StatusOr<float> Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                          float dloss = 0.0f) override;
  Status Backward() override;
  Status ZeroGradients() override;
  float* params() override;
  float* grads() override;
  const float* params() const { return const_cast<BlockModel*>(this)->params(); }
  const float* grads() const { return const_cast<BlockModel*>(this)->grads(); }
  // logits (B,T,Vp) of the last Forward without dloss (fp32 models only, checked).
  const float* logits() const override;
  const ModelConfig& config() const override { return config_; }
  int64_t num_parameters() const override { return declaration_.unit_offsets.back(); }
  double recompute_seconds() const override { return recompute_s_; }
  int64_t recomputed_blocks() const override { return recomputed_blocks_; }

  void InitializeUnit(int unit, uint64_t seed, float* out) const override {
    declaration_.initialize_unit(config_, unit, seed, out);
  }
  void InitializeRange(int unit, uint64_t seed, int64_t begin, int64_t count,
                       float* out) const override {
    declaration_.initialize_range(config_, unit, seed, begin, count, out);
  }
  // InitializeUnit for every unit of the model's own flat store, drawn on the host a unit at a
  // time and copied to the backend's device.
  Status InitializeWeights(uint64_t seed);

  const ActivationCheckpointingConfig& checkpointing() const { return checkpointing_; }
  kernels::Backend& backend() { return *backend_; }
  zero::ParamStore* store() { return store_; }
  int Vp() const { return config_.padded_vocab_size(); }

  // A tensor a block saves from forward for backward.
  struct SavedTensor {
    bool fp32 = false;       // fp32 (the attention probabilities); else the activation type
    bool selective = false;  // kept by the selective policy (the matmuls' outputs)
  };
  // What a family declares about its layout and its blocks.
  struct Declaration {
    const char* name = "";  // for messages: "Gpt2Model"
    // The family's units back to back: num_units() + 1 offsets (unit u is [u, u + 1)), without
    // the adapter units, which the base adds for its own store.
    std::vector<int64_t> unit_offsets;
    // The saved tensors, the block's output last. A layer that recomputes any of them
    // recomputes them in declaration order, each from what was kept or recomputed before it.
    std::vector<SavedTensor> saved;
    bool tied_head = true;    // the head is the embedding's matrix (unit 0), else in unit L + 1
    int64_t head_offset = 0;  // the head matrix (Vp, C) within its unit
    // The family's initialisation (Model::InitializeUnit and InitializeRange).
    void (*initialize_unit)(const ModelConfig& config, int unit, uint64_t seed,
                            float* out) = nullptr;
    void (*initialize_range)(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                             int64_t count, float* out) = nullptr;
  };

 protected:
  // Arrays laid out back to back in one buffer, each on a 64-byte boundary so that SIMD loads of
  // row starts stay aligned. An array of zero elements gets a null pointer.
  class Arrays {
   public:
    explicit Arrays(DType activation_type) : activation_type_(activation_type) {}
    void Fp32(float** at, int64_t count) {
      slots_.push_back({at, nullptr, count, DType::kFloat32});
    }
    void Typed(void** at, int64_t count) { Typed(at, count, activation_type_); }
    void Typed(void** at, int64_t count, DType type) {
      slots_.push_back({nullptr, at, count, type});
    }
    int64_t bytes() const;
    void Carve(void* base) const;

   private:
    struct Slot {
      float** fp32;
      void** typed;
      int64_t count;
      DType type;
    };
    DType activation_type_;
    std::vector<Slot> slots_;
  };

  BlockModel(const ModelConfig& config, int max_B, int max_T, DType activation_type,
             const ActivationCheckpointingConfig& checkpointing, Declaration declaration);

  // The end of a family's Create, after its own checks: `model` computes on `backend` (which
  // must outlive it), with `store` or a flat one of its own; allocates the activations and the
  // adapters.
  template <typename Family>
  static StatusOr<std::unique_ptr<Family>> Attach(std::unique_ptr<Family> model,
                                                  kernels::Backend* backend,
                                                  zero::ParamStore* store) {
    HOIST_RETURN_IF_ERROR(model->AttachTo(backend, store));
    return model;
  }
  // A family's Create on a Device: its Create on a CPU backend of the model's own, inline,
  // allocating from `device`.
  template <typename Family>
  static StatusOr<std::unique_ptr<Family>> CreateOnCpu(
      const ModelConfig& config, int max_B, int max_T, Device* device, zero::ParamStore* store,
      DType activation_type, const ActivationCheckpointingConfig& checkpointing) {
    std::unique_ptr<kernels::Backend> backend = CpuBackendOn(device);
    HOIST_ASSIGN_OR_RETURN(
        std::unique_ptr<Family> model,
        Family::Create(config, max_B, max_T, backend.get(), store, activation_type, checkpointing));
    model->OwnBackend(std::move(backend));
    return model;
  }
  // What Attach allocates for activations (the adapters' scratch included), counted without
  // allocating, as on a backend of kind `device`.
  ActivationBytes CountActivations(DeviceKind device);

  // ---- What a family writes.
  // Its own arrays for (max_B, max_T): forward's into `activations`, backward's scratch into
  // `scratch` (the base's come first: encoded_, lnf_, logits_, losses_; dresidual_, dln_).
  virtual void DeclareArrays(Arrays& activations, Arrays& scratch) = 0;
  // Elements of saved tensor s for one layer of a (B, T) batch.
  virtual int64_t SavedCount(int s, int B, int T) const = 0;
  // The attention's workspace bytes on backend_, or, without one (counting), on device_kind()'s
  // backend as its facts give them (kernels/device_facts.h).
  virtual int64_t AttentionWorkspaceBytes() const = 0;
  // After the arrays are carved: fills what is computed once (tables). Runs on the stream; the
  // base waits for it.
  virtual Status Prepare() { return Status::Ok(); }
  // encoded_ = the embedding of inputs_ (B, T), from the embedding unit.
  virtual Status EmbedForward(const void* embedding) = 0;
  // Forward's ops of layer l for the saved tensors whose bit is set in `compute` (all of them in
  // forward; in a recomputation those the layer did not keep), in forward's order, from its input
  // `residual`, its unit's `weights` and its `adapters` (null without LoRA); `scratch` (B, T, C)
  // holds the projections' outputs.
  virtual Status BlockForward(int l, const void* residual, const void* weights,
                              const void* adapters, void* scratch, uint64_t compute) = 0;
  // Adds layer l's gradients: from dresidual_ (the gradient of its output) to dresidual_ (of its
  // input `residual`); `grads` null for a frozen base; `adapter_grads` the block's adapter unit.
  virtual Status BlockBackward(int l, const void* residual, const void* weights, float* grads,
                               const void* adapters, float* adapter_grads) = 0;
  // lnf_ = the final norm of `residual` (the last block's output).
  virtual Status FinalNormForward(const void* final_unit, const void* residual) = 0;
  // dresidual_ (zeroed by the base) += the final norm's backward of dln_; `grads` null when
  // frozen.
  virtual Status FinalNormBackward(const void* final_unit, float* grads, const void* residual) = 0;
  // The embedding's gradients (never null: a frozen base does not call it) from dresidual_.
  virtual Status EmbedBackward(float* grads) = 0;

  // ---- What the family's hooks use.
  // The array layer l computes saved tensor s into and backward reads it from.
  void* At(int s, int l) const;
  // Whether layer l keeps saved tensor s from forward to backward.
  bool Kept(int s, int l) const;
  // Element `offset` of the activation type within an acquired unit.
  const void* Weight(const void* unit, int64_t offset) const {
    return ElementPtr(unit, activation_type_, offset);
  }
  // The adapters' forward at `site` of layer l (y += its output) and backward (dx and the
  // adapter gradients); nothing without LoRA.
  Status Lora(LoraModule::Site site, int l, void* y, const void* x, const void* adapters);
  Status LoraBackward(LoraModule::Site site, int l, void* dx, const void* dy, const void* x,
                      const void* adapters, float* grads);
  // Zeroes `count` elements of the activation type on the stream.
  Status Zero(void* p, int64_t count);
  const Stream& stream() const { return backend_->compute_stream(); }
  bool tiled() const { return config_.attention == AttentionKind::kTiled; }
  // The backend's kind; without a backend (counting), the kind counted for.
  DeviceKind device_kind() const;
  static constexpr uint64_t Bit(int s) { return uint64_t{1} << s; }

  ModelConfig config_;
  int max_B_, max_T_;
  DType activation_type_;
  ActivationCheckpointingConfig checkpointing_;
  kernels::Backend* backend_ = nullptr;
  zero::ParamStore* store_ = nullptr;
  // The last forward's batch: shape, tokens (B, T) and targets (B, T) on the device.
  int last_B_ = 0, last_T_ = 0;
  int32_t* inputs_ = nullptr;
  int32_t* targets_ = nullptr;
  // The base's arrays: the embedding's output (B,T,C), the final norm's (B,T,C), the logits
  // (B,T,Vp; their gradient after a Forward with dloss) and the per-position losses (B,T).
  void* encoded_ = nullptr;
  void* lnf_ = nullptr;
  void* logits_ = nullptr;
  float* losses_ = nullptr;
  // Backward's scratch: the residual stream's gradient (B,T,C) and a norm's input gradient.
  void* dresidual_ = nullptr;
  void* dln_ = nullptr;
  Buffer attention_workspace_;

 private:
  static std::unique_ptr<kernels::Backend> CpuBackendOn(Device* device);
  Status AttachTo(kernels::Backend* backend, zero::ParamStore* store);
  Status Allocate(Device* device);
  Status AllocateActivations(Device* device, ActivationBytes* bytes);
  // The passes after the entry checks.
  StatusOr<float> RunForward(const int32_t* inputs, const int32_t* targets, float dloss);
  Status RunBackward();
  Status HeadBackward(const void* head, float* head_grads);
  int kept_layers(int s) const { return kept_layers_[static_cast<size_t>(s)]; }

  Declaration declaration_;
  int output_ = 0;  // the block's output among the saved tensors (the last one)
  DeviceKind footprint_device_ = DeviceKind::kCpu;
  // The error of a pass that failed after it began to acquire units: no pass runs after it.
  Status failed_;
  std::unique_ptr<FlatParamStore> own_store_;
  // kept_index_[s][l]: layer l's place among the layers that keep s, or -1 when it does not.
  std::vector<std::vector<int>> kept_index_;
  std::vector<int> kept_layers_;
  std::vector<void*> stack_, work_;
  Buffer activations_, scratch_, tokens_;
  std::vector<float> host_losses_;
  std::vector<int32_t> host_tokens_;
  std::unique_ptr<offload::PinnedHostPool> pinned_pool_;
  offload::PinnedBuffer pinned_;
  bool backward_ready_ = false;
  double recompute_s_ = 0;
  int64_t recomputed_blocks_ = 0;
};

}  // namespace hoist::runtime

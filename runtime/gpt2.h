// Gpt2Model: GPT-2 exactly as Hugging Face and llm.c define it — pre-LN blocks, learned
// positions, tanh GELU, the LM head tied to the token embedding, the vocabulary padded to a
// multiple of 128 — computed through a device backend's ops (kernels/backend.h: the CPU's kernels
// or the GPU's), in fp32 or a 16-bit type.
//
// The 16 parameter tensors of llm.c are grouped into units, the granularity at which ZeRO
// partitions, gathers and reduces them: unit 0 holds the embeddings (wte, wpe), unit 1 + l
// transformer block l (its 12 tensors in llm.c's order), unit L + 1 the final layernorm. The
// model gets each unit's weights from a zero::ParamStore right before it uses them and adds its
// gradients to the buffer the store hands out (see zero/param_store.h), so the same model runs
// with whole fp32 weights, mixed precision, or weights sharded across ranks. A model created
// without a store owns a flat one: the units back to back in one fp32 buffer (params(), grads()),
// rounded to the activation type as each unit is acquired.
// ParamLayout maps between that order and llm.c's tensor-major order, for its files.
//
// Activations are sized once for the largest micro-batch (B, T) given at construction; every
// call may use a smaller B or T. With a 16-bit activation type (mixed precision) the weights, the
// activations and their gradients are all in that type and every op computes in it as the
// backend defines (products and reductions accumulate in fp32, each output rounded once); the
// layernorm statistics, the attention probabilities and the weight gradients stay fp32. With
// activation checkpointing a block keeps only part of what
// its backward reads (only its input under full and every_k, its matmul outputs under selective)
// and backward recomputes the rest with the same kernels on the same inputs, so the gradients
// are bit-identical to those of a run that kept everything. Memory is tracked: params as
// Category::kParam, grads as kGrad, activations as kActivation. Not thread-safe: one model is
// driven by one thread (the kernels use the OpenMP team inside).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/device.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "offload/pinned_pool.h"
#include "runtime/config.h"
#include "runtime/flat_store.h"
#include "runtime/model.h"
#include "zero/param_store.h"
#include "zero/partition.h"

namespace hoist::runtime {

enum ParamTensor {
  kWte = 0,   // (Vp, C)
  kWpe,       // (maxT, C)
  kLn1W,      // (L, C)
  kLn1B,      // (L, C)
  kQkvW,      // (L, 3C, C)
  kQkvB,      // (L, 3C)
  kAttProjW,  // (L, C, C)
  kAttProjB,  // (L, C)
  kLn2W,      // (L, C)
  kLn2B,      // (L, C)
  kFcW,       // (L, 4C, C)
  kFcB,       // (L, 4C)
  kFcProjW,   // (L, C, 4C)
  kFcProjB,   // (L, C)
  kLnfW,      // (C)
  kLnfB,      // (C)
  kNumParamTensors
};

// Where each parameter tensor sits: the units and each tensor's place in its unit.
struct ParamLayout {
  int n_layer = 0;
  // Elements of the whole tensor (all layers for the per-block tensors), as llm.c counts them.
  std::array<int64_t, kNumParamTensors> sizes{};
  // Elements of the tensor within one unit (one layer's slice for the per-block tensors).
  std::array<int64_t, kNumParamTensors> unit_sizes{};
  // Offset of the tensor within its unit.
  std::array<int64_t, kNumParamTensors> local_offsets{};
  // Offset of each tensor in llm.c's tensor-major order (every layer of a tensor together).
  std::array<int64_t, kNumParamTensors> llmc_offsets{};
  std::vector<int64_t>
      unit_offsets;  // num_units() + 1 entries: unit u is [u, u+1) of the flat buffer
  int64_t total = 0;

  static ParamLayout For(const ModelConfig& config);
  static const char* Name(int tensor);
  // Weight decay applies to the 2-D weights (embeddings and matmul weights), not to biases and
  // layernorm parameters, as in nanoGPT and llm.c.
  static bool Decayed(int tensor);
  // The tensors repeated once per transformer block.
  static bool PerBlock(int tensor);

  int num_units() const { return n_layer + 2; }
  int unit_of(int tensor, int layer = 0) const;
  int64_t unit_size(int unit) const { return unit_offsets[unit + 1] - unit_offsets[unit]; }
  // Offset in the flat (unit-major) buffer of `layer`'s slice of `tensor`.
  int64_t Offset(int tensor, int layer = 0) const;
  // The flat index of element i of `tensor` counted in llm.c's order.
  int64_t FlatIndex(int tensor, int64_t i) const;
  // The units with their weight-decay segments, for the ZeRO engine.
  std::vector<zero::UnitSpec> Units() const;
};

// GPT-2's initialisation of one unit (Gpt2Model::InitializeUnit), for models that are not a
// Gpt2Model (the GPU model draws the same values).
void InitializeGpt2Unit(const ModelConfig& config, int unit, uint64_t seed, float* out);
// Elements [begin, begin + count) of that unit alone, the same bits (runtime/weight_init.h).
void InitializeGpt2Range(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                         int64_t count, float* out);

class Gpt2Model final : public Model {
 public:
  // Allocates activations for micro-batches up to (max_B, max_T) on `device`, and the
  // parameters and gradients too unless `store` is given (it must then outlive the model and
  // serve ParamLayout::For(config)'s units). Weights are zero until InitializeWeights or a load.
  // `checkpointing` chooses which blocks keep their activations for backward and which recompute
  // them (ActivationCheckpointingConfig in runtime/config.h); with cpu_checkpointing the kept
  // block inputs live in pinned host memory.
  static StatusOr<std::unique_ptr<Gpt2Model>> Create(
      const ModelConfig& config, int max_B, int max_T, Device* device,
      zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {});
  // The same on `backend` (which must outlive the model): the model computes through its ops on
  // its compute stream, in activation_type (which must be the store's param_type()), and
  // allocates from its device. The Device form above makes a CPU backend of its own, inline.
  static StatusOr<std::unique_ptr<Gpt2Model>> Create(
      const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
      zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {});
  ~Gpt2Model();

  // The activation bytes Create allocates for (max_B, max_T) (Model::ActivationBytes), computed
  // by the same code that sizes the allocation, without allocating. `device`: the backend's kind,
  // whose attention may ask for a workspace (the CUDA backend's direct attention does; the CPU's
  // needs none).
  static ActivationBytes ActivationFootprint(
      const ModelConfig& config, int max_B, int max_T, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {},
      DeviceKind device = DeviceKind::kCpu);

  // Seconds spent recomputing checkpointed activations in backward, and the blocks that
  // recomputed something, since creation.
  double recompute_seconds() const override { return recompute_s_; }
  int64_t recomputed_blocks() const override { return recomputed_blocks_; }
  const ActivationCheckpointingConfig& checkpointing() const { return checkpointing_; }

  // GPT-2's initialisation: weights N(0, 0.02), the residual projections (attention and MLP
  // output) N(0, 0.02/sqrt(2L)), biases 0, layernorm weights 1; the padded rows of wte stay 0.
  // Writes the fp32 values of `unit` into `out` (unit_size elements); each tensor slice draws
  // from its own stream, so a unit's values depend on (seed, unit) alone.
  void InitializeUnit(int unit, uint64_t seed, float* out) const override;
  void InitializeRange(int unit, uint64_t seed, int64_t begin, int64_t count,
                       float* out) const override;
  // InitializeUnit for every unit of the model's own flat store (a failed copy shows in
  // status()).
  void InitializeWeights(uint64_t seed);

  // Forward pass over inputs (B,T). With targets, returns the mean cross-entropy over the B*T
  // positions; when `dloss` > 0 it also leaves dloss * dLoss/dlogits ready for Backward (dloss is
  // the weight of this micro-batch's mean in the optimised loss: 1/accumulation_steps, times the
  // loss scale in fp16). Without targets (nullptr) it returns 0 and only the logits are computed.
  float Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                float dloss = 0.0f) override;

  // Adds to the store's gradients the backward pass of the last Forward (which must have had
  // targets and dloss > 0).
  void Backward() override;

  // Zeroes the model's own flat gradients (a model with an external store leaves that to it).
  void ZeroGradients() override;

  // logits (B,T,Vp) of the last Forward, in the backend's device memory; only valid when it was
  // called without dloss (Forward with dloss overwrites them with their gradient). fp32 models
  // only (checked).
  const float* logits() const override {
    HOIST_CHECK(activation_type_ == DType::kFloat32) << "logits() of a 16-bit model";
    return static_cast<const float*>(logits_);
  }

  // The first error an op of the backend returned; a pass stops at it (Forward returns NaN), as
  // it does when the store fails. Ok otherwise.
  const Status& status() const override { return status_; }
  kernels::Backend& backend() { return *backend_; }

  const ModelConfig& config() const override { return config_; }
  const ParamLayout& layout() const { return layout_; }
  int64_t num_parameters() const override { return layout_.total; }
  zero::ParamStore* store() { return store_; }
  // The flat store's buffers (unit-major); only for a model that owns its store.
  float* params() override;
  const float* params() const;
  float* grads() override;
  const float* grads() const;
  float* param(int tensor, int layer = 0) { return params() + layout_.Offset(tensor, layer); }
  float* grad(int tensor, int layer = 0) { return grads() + layout_.Offset(tensor, layer); }
  int Vp() const { return config_.padded_vocab_size(); }

 private:
  Gpt2Model(const ModelConfig& config, int max_B, int max_T, DType activation_type,
            const ActivationCheckpointingConfig& checkpointing);
  Status Allocate(Device* device);
  // Carves the activation arrays out of buffers from `device` (and a pinned pool for
  // cpu_checkpointing); with `device` null only counts their bytes into `bytes`.
  Status AllocateActivations(Device* device, ActivationBytes* bytes);

  // The per-layer activations backward needs: the attention probabilities in fp32, the rest in
  // the activation type.
  enum Saved {
    kSavedLn1,
    kSavedQkv,
    kSavedAtty,
    kSavedAtt,
    kSavedResidual2,
    kSavedLn2,
    kSavedFch,
    kSavedFchGelu,
    kSavedResidual3,
    kNumSaved
  };
  bool tiled() const { return config_.attention == AttentionKind::kTiled; }
  // Whether layer l keeps saved tensor s from forward to backward (otherwise backward recomputes
  // it). Every layer keeps its output, residual3: it is the next layer's input.
  bool Kept(int s, int l) const;
  // Whether the kept copy of s lives in pinned host memory (cpu_checkpointing's block inputs).
  bool KeptOnHost(int s) const;
  // Elements of saved tensor s for one layer of a (B,T) batch, and their type.
  int64_t SavedCount(int s, int B, int T) const;
  DType SavedType(int s) const;
  // The array layer l computes s into and backward reads it from: its own slice of the stack of
  // kept layers, or the one working layer that a recomputation rewrites.
  void* At(int s, int l) const;
  // Tensor `tensor` within a unit's weights.
  const void* Weight(const void* unit, int tensor) const;
  // Backward: recomputes what layer l did not keep from what it kept, its input `residual` and
  // its unit's `weights` (and the block's `adapters`), exactly as forward computed it.
  void RecomputeBlock(int l, const void* residual, const void* weights, const void* adapters);
  // The adapters' forward at `site` of layer l (y += its output), and backward (dx and the
  // adapter gradients); true without LoRA or an adapter there, false when the pass must stop.
  bool Lora(LoraModule::Site site, int l, void* y, const void* x, const void* adapters);
  bool LoraBackward(LoraModule::Site site, int l, void* dx, const void* dy, const void* x,
                    const void* adapters, float* grads);
  // Keeps the first error of an op; false when the pass must stop (this one failed or an earlier
  // one did).
  bool Ok(const Status& op);
  const Stream& stream() const { return backend_->compute_stream(); }
  // Zeroes `count` elements of the activation type on the stream.
  bool Zero(void* p, int64_t count);

  ModelConfig config_;
  ParamLayout layout_;
  std::unique_ptr<kernels::Backend> own_backend_;  // the Device form's inline CPU backend
  kernels::Backend* backend_ = nullptr;
  DeviceKind footprint_device_ = DeviceKind::kCpu;  // ActivationFootprint's, without a backend
  Status status_;
  int max_B_, max_T_;
  std::unique_ptr<FlatParamStore> own_store_;
  zero::ParamStore* store_ = nullptr;
  DType activation_type_ = DType::kFloat32;
  ActivationCheckpointingConfig checkpointing_;
  // kept_index_[s][l]: layer l's place among the layers that keep s, or -1 when it does not.
  std::array<std::vector<int>, kNumSaved> kept_index_;
  std::array<int, kNumSaved> kept_layers_{};  // how many layers keep s
  Buffer activations_, scratch_;
  Buffer tokens_;               // the last forward's tokens and targets, 2 x (max_B, max_T) int32
  Buffer attention_workspace_;  // the backend's, for the direct attention (none on the CPU)
  std::vector<float> host_losses_;    // the losses read back for the mean
  std::vector<int32_t> host_tokens_;  // the caller's inputs and targets, copied up from here
  // cpu_checkpointing: the kept block inputs (residual3 of every layer).
  std::unique_ptr<offload::PinnedHostPool> pinned_pool_;
  offload::PinnedBuffer pinned_;

  // Activations of the last forward, carved out of activations_ for (max_B, max_T), in the
  // activation type unless said otherwise. For each saved tensor s: stack_[s] holds the layers
  // that keep it, work_[s] one working layer when some layer does not keep s.
  std::array<void*, kNumSaved> stack_{};
  std::array<void*, kNumSaved> work_{};
  void* encoded_ = nullptr;    // (B,T,C)
  float* ln1_mean_ = nullptr;  // (L,B,T)
  float* ln1_rstd_ = nullptr;  // (L,B,T)
  float* lse_ = nullptr;       // (L,B,NH,T) with tiled attention: log-sum-exp per query row
  float* ln2_mean_ = nullptr;  // (L,B,T)
  float* ln2_rstd_ = nullptr;  // (L,B,T)
  void* lnf_ = nullptr;        // (B,T,C)
  float* lnf_mean_ = nullptr;  // (B,T)
  float* lnf_rstd_ = nullptr;  // (B,T)
  void* logits_ = nullptr;     // (B,T,Vp); holds dlogits after a Forward with dloss
  float* losses_ = nullptr;    // (B,T)

  // Backward scratch in the activation type, reused by every layer, carved out of scratch_.
  void* dresidual_ = nullptr;  // (B,T,C) gradient of the residual stream
  void* dln_ = nullptr;        // (B,T,C)
  void* datty_ = nullptr;      // (B,T,C)
  void* dqkv_ = nullptr;       // (B,T,3C)
  void* dfch_ = nullptr;       // (B,T,4C)
  void* dfch_gelu_ = nullptr;  // (B,T,4C)

  // The last forward's batch, for Backward.
  int32_t* inputs_ = nullptr;   // (B,T) in tokens_
  int32_t* targets_ = nullptr;  // (B,T) in tokens_, after the inputs
  int last_B_ = 0, last_T_ = 0;
  bool backward_ready_ = false;
  double recompute_s_ = 0;
  int64_t recomputed_blocks_ = 0;
};

}  // namespace hoist::runtime

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
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "runtime/model/block_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/unit_layout.h"
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
struct ParamLayout : UnitLayout<kNumParamTensors> {
  // Elements of the whole tensor (all layers for the per-block tensors), as llm.c counts them.
  std::array<int64_t, kNumParamTensors> sizes{};
  // Offset of each tensor in llm.c's tensor-major order (every layer of a tensor together).
  std::array<int64_t, kNumParamTensors> llmc_offsets{};

  static ParamLayout For(const ModelConfig& config);
  static const char* Name(int tensor);
  // Weight decay applies to the 2-D weights (embeddings and matmul weights), not to biases and
  // layernorm parameters, as in nanoGPT and llm.c.
  static bool Decayed(int tensor);
  // The tensors repeated once per transformer block.
  static bool PerBlock(int tensor);

  // The flat index of element i of `tensor` counted in llm.c's order.
  int64_t FlatIndex(int tensor, int64_t i) const;
  // The units with their weight-decay segments, for the ZeRO engine.
  std::vector<zero::UnitSpec> Units() const;
};

// GPT-2's initialisation of one unit (Gpt2Model::InitializeUnit), for models that are not a
// Gpt2Model (the GPU model draws the same values).
void InitializeGpt2Unit(const ModelConfig& config, int unit, uint64_t seed, float* out);
// Elements [begin, begin + count) of that unit alone, the same bits (runtime/model/weight_init.h).
void InitializeGpt2Range(const ModelConfig& config, int unit, uint64_t seed, int64_t begin,
                         int64_t count, float* out);

class Gpt2Model final : public BlockModel {
 public:
  // Allocates activations for micro-batches up to (max_B, max_T) on `device`, and the
  // parameters and gradients too unless `store` is given (it must then outlive the model and
  // serve ParamLayout::For(config)'s units). Weights are zero until InitializeWeights or a load.
  // `checkpointing` chooses which blocks keep their activations for backward and which recompute
  // them (ActivationCheckpointingConfig in runtime/config/config.h); with cpu_checkpointing the
  // kept block inputs live in pinned host memory.
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
  ~Gpt2Model() override;

  // The activation bytes Create allocates for (max_B, max_T) (Model::ActivationBytes), computed
  // by the same code that sizes the allocation, without allocating. `device`: the backend's kind,
  // whose attention may ask for a workspace (the CUDA backend's direct attention does; the CPU's
  // needs none).
  static ActivationBytes ActivationFootprint(
      const ModelConfig& config, int max_B, int max_T, DType activation_type = DType::kFloat32,
      const ActivationCheckpointingConfig& checkpointing = {},
      DeviceKind device = DeviceKind::kCpu);

  // GPT-2's initialisation: weights N(0, 0.02), the residual projections (attention and MLP
  // output) N(0, 0.02/sqrt(2L)), biases 0, layernorm weights 1; the padded rows of wte stay 0.
  // Writes the fp32 values of `unit` into `out` (unit_size elements); each tensor slice draws
  // from its own stream, so a unit's values depend on (seed, unit) alone.

  const ParamLayout& layout() const { return layout_; }
  // The flat store's tensors (only for a model that owns its store).
  float* param(int tensor, int layer = 0) { return params() + layout_.Offset(tensor, layer); }
  float* grad(int tensor, int layer = 0) { return grads() + layout_.Offset(tensor, layer); }

 private:
  // The per-layer activations backward reads: the attention probabilities in fp32, the rest in
  // the activation type; the selective policy keeps qkv, residual2 and fch.
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
  Gpt2Model(const ModelConfig& config, int max_B, int max_T, DType activation_type,
            const ActivationCheckpointingConfig& checkpointing);

  void DeclareArrays(Arrays& activations, Arrays& scratch) override;
  int64_t SavedCount(int s, int B, int T) const override;
  int64_t AttentionWorkspaceBytes() const override;
  Status EmbedForward(const void* embedding) override;
  Status BlockForward(int l, const void* residual, const void* weights, const void* adapters,
                      void* scratch, uint64_t compute) override;
  Status BlockBackward(int l, const void* residual, const void* weights, float* grads,
                       const void* adapters, float* adapter_grads) override;
  Status FinalNormForward(const void* final_unit, const void* residual) override;
  Status FinalNormBackward(const void* final_unit, float* grads, const void* residual) override;
  Status EmbedBackward(float* grads) override;
  // Layer l's slice of the attention's log-sum-exp (tiled attention only).
  float* lse(int l) const;

  ParamLayout layout_;
  float* ln1_mean_ = nullptr;  // (L,B,T)
  float* ln1_rstd_ = nullptr;  // (L,B,T)
  float* lse_ = nullptr;       // (L,B,NH,T) with tiled attention: log-sum-exp per query row
  float* ln2_mean_ = nullptr;  // (L,B,T)
  float* ln2_rstd_ = nullptr;  // (L,B,T)
  float* lnf_mean_ = nullptr;  // (B,T)
  float* lnf_rstd_ = nullptr;  // (B,T)
  // Backward scratch in the activation type, reused by every layer.
  void* datty_ = nullptr;      // (B,T,C)
  void* dqkv_ = nullptr;       // (B,T,3C)
  void* dfch_ = nullptr;       // (B,T,4C)
  void* dfch_gelu_ = nullptr;  // (B,T,4C)
};

}  // namespace hoist::runtime

// Model: what the trainer, the sampler and the estimates drive, whatever the family (GPT-2 in
// runtime/model/gpt2.h, Llama in runtime/model/decoder.h). A model computes through a device
// backend's ops (kernels/backend.h) on its compute stream, gets each unit's weights from a
// zero::ParamStore right before it uses them and adds its gradients to the buffer the store hands
// out, so the same model runs with whole fp32 weights, mixed precision, or weights sharded across
// ranks. Units are the granularity at which ZeRO partitions, gathers and reduces: each family lays
// its tensors out in units (ModelUnits) and documents the order.
//
// Activations are sized once for the largest micro-batch (B, T) given at creation; every call may
// use a smaller B or T. Not thread-safe: one model is driven by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/phase.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "runtime/model/lora_pass.h"
#include "runtime/model/model_config.h"
#include "zero/param_store.h"
#include "zero/partition.h"

namespace hoist::runtime {

class Model {
 public:
  virtual ~Model() = default;

  // The phases of a training forward and backward, reported to the phase hook as each begins,
  // for the memory profiler: Phase::kForward of the embedding (block -1) and of each block,
  // Phase::kLoss of the head (final norm, logits, loss) forward and then backward, and
  // Phase::kBackward of each block (its recomputation included when it is checkpointed) and of
  // the embedding (block -1).
  using PhaseHook = std::function<void(Phase phase, int block)>;
  // Called on the driving thread at the start of every phase; empty to stop.
  void set_phase_hook(PhaseHook hook) { phase_hook_ = std::move(hook); }

  // The activation bytes a model allocates for (max_B, max_T), by place: `device` (the compute
  // device) and `host_pinned` (cpu_checkpointing's block inputs). Held for the model's life, so
  // they are also the activations' peak.
  struct ActivationBytes {
    int64_t device = 0;
    int64_t host_pinned = 0;
  };

  // Forward pass over inputs (B,T). With targets, returns the mean cross-entropy over the
  // positions whose target is not negative (a negative target masks its position off the loss:
  // no loss, no gradient; all B*T positions when none is), 0 when no position counts; when
  // `dloss` > 0 it also leaves dloss * dLoss/dlogits ready for Backward (dloss is the weight of
  // this micro-batch's mean in the optimised loss: 1/accumulation_steps, times the loss scale in
  // fp16). Without targets (nullptr) it returns 0 and only the logits are computed.
  // A pass returns the first error of the backend's ops or of the store (a unit it could not
  // serve: a collective that failed, memory that ran out); a pass that fails after it began
  // leaves units acquired and buffers half written, so every pass after it returns its error.
  virtual StatusOr<float> Forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                  float dloss = 0.0f) = 0;
  // Adds to the store's gradients the backward pass of the last Forward (which must have had
  // targets and dloss > 0).
  virtual Status Backward() = 0;

  // The family's initialisation of unit `unit` (its fp32 values into `out`, unit-size
  // elements); a unit's values depend on (seed, unit) alone.
  virtual void InitializeUnit(int unit, uint64_t seed, float* out) const = 0;
  // Elements [begin, begin + count) of that unit's values, drawn without the rest of the unit:
  // the same bits as the same range of InitializeUnit's.
  virtual void InitializeRange(int unit, uint64_t seed, int64_t begin, int64_t count,
                               float* out) const = 0;

  // Zeroes the model's own flat gradients (a model with an external store leaves that to it).
  virtual Status ZeroGradients() = 0;
  // A model created without a store owns a flat one: the units back to back in one fp32 buffer
  // each for the weights and the gradients. Checked: only for such a model.
  virtual float* params() = 0;
  virtual float* grads() = 0;
  // logits (B,T,Vp) of the last Forward without dloss, in the backend's device memory; fp32
  // models only (checked).
  virtual const float* logits() const = 0;

  virtual const ModelConfig& config() const = 0;
  virtual int64_t num_parameters() const = 0;
  // Seconds spent recomputing checkpointed activations in backward, and the blocks that
  // recomputed something, since creation.
  virtual double recompute_seconds() const = 0;
  virtual int64_t recomputed_blocks() const = 0;

  // With LoRA (model.lora): the adapters' pass; null without. The base weights are then frozen:
  // the model asks the store for no gradient of a base unit and computes none.
  const LoraPass* lora() const { return lora_.get(); }
  // The adapters' dropout masks for the next Forward and its Backward (LoraPass::set_seed: the
  // step's seed and the index of the micro-batch's first sequence in the step's global batch);
  // without dropout it changes nothing.
  void set_lora_seed(uint64_t seed, int64_t first_sequence) {
    if (lora_ != nullptr) lora_->set_seed(seed, first_sequence);
  }

  // Keeps `backend` alive as long as the model: the backend of CreateModel's Device form, which
  // the model computes on.
  void OwnBackend(std::unique_ptr<kernels::Backend> backend) { own_backend_ = std::move(backend); }

 protected:
  void EnterPhase(Phase phase, int block) {
    if (phase_hook_) phase_hook_(phase, block);
  }
  bool frozen_base() const { return lora_ != nullptr; }
  // Creates lora_ when the config has adapters, for micro-batches of up to max_N rows.
  Status CreateLora(const ModelConfig& config, int64_t max_N, kernels::Backend* backend,
                    DType type);
  // The units of a model's own flat store: the family's `base` offsets (one per unit and the
  // total), then the adapter units.
  static std::vector<int64_t> StoreUnitOffsets(const ModelConfig& config,
                                               std::vector<int64_t> base);
  // The scratch bytes CreateLora allocates.
  static int64_t LoraScratchBytes(const ModelConfig& config, int64_t max_N, DType type);

  // Declared first, destroyed last: after the adapters' and the family's buffers.
  std::unique_ptr<kernels::Backend> own_backend_;
  std::unique_ptr<LoraPass> lora_;

 private:
  PhaseHook phase_hook_;
};

// The arguments every family's Create takes, checked alike: a micro-batch (max_B, max_T) within
// model.seq_len, every_k >= 1, and a store (when given) that serves `activation_type`.
Status CheckModelArguments(const ModelConfig& config, int max_B, int max_T,
                           const zero::ParamStore* store, DType activation_type,
                           const ActivationCheckpointingConfig& checkpointing);

// A block's matmuls through its weight as the store gives it (zero::StoredWeight): the dense
// ops (no GELU), or for a 4-bit weight the backend's MatmulForwardNf4 / MatmulBackwardNf4 with
// the store's workspace. A 4-bit weight is frozen: asking its gradient or its bias's is an error.
Status StoredMatmulForward(kernels::Backend& backend, void* out, const void* inp,
                           const zero::StoredWeight& weight, const void* bias, int N, int C, int OC,
                           DType type, const Stream& stream);
Status StoredMatmulBackward(kernels::Backend& backend, void* dinp, float* dweight, float* dbias,
                            const void* dout, const void* inp, const zero::StoredWeight& weight,
                            int N, int C, int OC, DType type, const Stream& stream);

// The units of the model `config` describes (its family's layout), with their weight-decay
// segments, for the ZeRO engine and the checkpoints.
std::vector<zero::UnitSpec> ModelUnits(const ModelConfig& config);
// Elements of every parameter (the units' sizes added up).
int64_t ModelParameterCount(const ModelConfig& config);

// The most parameters a model may have: the layouts count elements and bytes in int64.
inline constexpr int64_t kMaxModelParameters = int64_t{1} << 50;
// InvalidArgument when the dimensions of `config` (each positive) make a model of more than
// kMaxModelParameters, counted without overflow; call it before ModelUnits on dimensions read
// from a file. The message says how many and names no source: the caller adds it.
Status CheckModelSize(const ModelConfig& config);

// The model of `config`'s family on `backend` (which must outlive it), computing in
// activation_type (which must be the store's param_type()); without a store it owns a flat fp32
// one. `checkpointing` chooses which blocks keep their activations for backward.
StatusOr<std::unique_ptr<Model>> CreateModel(
    const ModelConfig& config, int max_B, int max_T, kernels::Backend* backend,
    zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
    const ActivationCheckpointingConfig& checkpointing = {});
// The same on a CPU backend of the model's own, allocating from `device`.
StatusOr<std::unique_ptr<Model>> CreateModel(
    const ModelConfig& config, int max_B, int max_T, Device* device,
    zero::ParamStore* store = nullptr, DType activation_type = DType::kFloat32,
    const ActivationCheckpointingConfig& checkpointing = {});
// What CreateModel would allocate for activations, counted without allocating, on a backend of
// kind `device`.
Model::ActivationBytes ModelActivationFootprint(
    const ModelConfig& config, int max_B, int max_T, DType activation_type = DType::kFloat32,
    const ActivationCheckpointingConfig& checkpointing = {}, DeviceKind device = DeviceKind::kCpu);

}  // namespace hoist::runtime

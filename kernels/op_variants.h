// The variants of the model ops in which the model families differ, shared by the backend
// interface (kernels/backend.h, which gives each op's contract) and the kernels of every device.
#pragma once

namespace hoist::kernels {

// How RMSNorm applies its weight and where it rounds (rstd and the gradient's form are the same):
//   kLlama: out = round(inp * rstd) * weight, the normalised row rounded to the activation type
//           before the weight multiplies it (HF's LlamaRMSNorm, and Qwen2/3's and Mistral's).
//   kGemma: out = inp * rstd * (1 + weight), everything in fp32 and rounded once (HF's
//           GemmaRMSNorm: checkpoints store the weight as its offset from 1).
enum class RmsNormStyle { kLlama, kGemma };

// The activation of a gated MLP (a GLU variant): out = act(gate) * up.
//   kSilu:     SwiGLU, act(g) = g / (1 + e^-g) (Llama, Qwen).
//   kGeluTanh: GeGLU with the tanh-approximated GELU, act(g) = 0.5 g (1 + tanh(sqrt(2/pi)
//              (g + 0.044715 g^3))) (Gemma's gelu_pytorch_tanh).
enum class GluActivation { kSilu, kGeluTanh };

}  // namespace hoist::kernels

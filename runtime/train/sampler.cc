#include "runtime/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/random.h"
#include "runtime/checkpoint/checkpoint_weights.h"
#include "runtime/config/config.h"
#include "runtime/data/tokenizer.h"
#include "runtime/interchange/bpe_tokenizer.h"
#include "runtime/model/model.h"

namespace hoist::runtime {

int32_t PickToken(const float* logits, int V, float temperature, int top_k, double u) {
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  if (temperature <= 0.0f) {
    return *std::max_element(order.begin(), order.end(),
                             [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
  }
  int keep = (top_k > 0 && top_k < V) ? top_k : V;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double max_logit = logits[order[0]];
  std::vector<double> weights(static_cast<size_t>(keep));
  double total = 0.0;
  for (int i = 0; i < keep; ++i) {
    weights[i] = std::exp((logits[order[i]] - max_logit) / temperature);
    total += weights[i];
  }
  double target = u * total;
  for (int i = 0; i < keep; ++i) {
    target -= weights[i];
    if (target < 0.0) return order[i];
  }
  return order[keep - 1];
}

namespace {

StatusOr<std::vector<int32_t>> SampleWith(const SampleOptions& options,
                                          const BpeTokenizer* tokenizer) {
  HOIST_ASSIGN_OR_RETURN(const CheckpointModel opened, OpenCheckpointModel(options.checkpoint));
  const std::string& step_dir = opened.step_dir;
  // A LoRA run's base with its adapters merged, as the merged export writes it.
  HOIST_ASSIGN_OR_RETURN(const ModelWeights whole, ReadCheckpointModelWeights(opened));
  const ModelConfig& m = whole.model;
  if (tokenizer == nullptr && m.vocab_size > 256) {
    return InvalidArgumentError("the model in " + step_dir + " has a vocabulary of " +
                                std::to_string(m.vocab_size) +
                                " tokens, more than bytes; give its tokenizer with --tokenizer "
                                "tokenizer.json");
  }
  CpuDevice device(Place::kDevice);
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                         CreateModel(m, /*max_B=*/1, m.seq_len, &device));
  std::copy(whole.weights.begin(), whole.weights.end(), model->params());

  std::vector<int32_t> context;
  // An empty prompt starts from a newline, a natural start of text.
  const std::string prompt = options.prompt.empty() ? std::string("\n") : options.prompt;
  if (tokenizer != nullptr) {
    context = tokenizer->Encode(prompt);
  } else {
    const std::vector<uint16_t> bytes = EncodeBytes(prompt);
    context.assign(bytes.begin(), bytes.end());
  }
  for (int32_t token : context) {
    if (token >= m.vocab_size) {
      return InvalidArgumentError(
          "the prompt has token " + std::to_string(token) + " but the model's vocabulary has " +
          std::to_string(m.vocab_size) +
          (tokenizer != nullptr ? "; is --tokenizer the model's tokenizer?" : ""));
    }
  }
  if (context.empty()) context.push_back(0);

  Rng rng(options.seed);
  std::vector<int32_t> generated;
  for (int i = 0; i < options.max_new_tokens; ++i) {
    const int T = static_cast<int>(std::min<size_t>(context.size(), m.seq_len));
    const int32_t* window = context.data() + context.size() - T;
    HOIST_RETURN_IF_ERROR(model->Forward(window, nullptr, 1, T).status());
    const float* last = model->logits() + int64_t{T - 1} * m.padded_vocab_size();
    int32_t token =
        PickToken(last, m.vocab_size, options.temperature, options.top_k, rng.Uniform());
    context.push_back(token);
    generated.push_back(token);
  }
  return generated;
}

StatusOr<std::unique_ptr<BpeTokenizer>> LoadTokenizer(const SampleOptions& options) {
  if (options.tokenizer.empty()) return std::unique_ptr<BpeTokenizer>();
  return BpeTokenizer::Load(options.tokenizer);
}

}  // namespace

StatusOr<std::vector<int32_t>> Sample(const SampleOptions& options) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> tokenizer, LoadTokenizer(options));
  return SampleWith(options, tokenizer.get());
}

StatusOr<std::string> SampleText(const SampleOptions& options) {
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> tokenizer, LoadTokenizer(options));
  HOIST_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, SampleWith(options, tokenizer.get()));
  return options.prompt + (tokenizer != nullptr ? tokenizer->Decode(tokens) : DecodeTokens(tokens));
}

}  // namespace hoist::runtime

// `hoist export --checkpoint DIR --format hf|llmc|peft -o OUT [--dtype fp32|bf16|fp16]
// [--max-shard-size BYTES]`: a training checkpoint's weights as a Hugging Face directory or an
// llm.c file, or a LoRA run's adapters as a PEFT adapter directory (runtime/checkpoint/export.h).
#include <iostream>
#include <memory>
#include <string>

#include "launcher/commands.h"
#include "runtime/checkpoint/export.h"

namespace hoist::launcher {

void AddExportCommand(CLI::App& app, int* exit_code) {
  struct Args {
    runtime::ExportOptions options;
    std::string format = "hf";
    std::string dtype = "fp32";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint's weights for other tools: a Hugging Face directory (config.json, "
      "safetensors) or an llm.c checkpoint, from any world size, ZeRO stage and offload; a LoRA "
      "run's adapters as a PEFT adapter directory (peft), or merged into their base (hf, llmc)");
  cmd->add_option("--checkpoint", args->options.checkpoint,
                  "Checkpoint directory (its latest step) or one step directory")
      ->required();
  cmd->add_option("--format", args->format,
                  "hf (a directory), llmc (one file) or peft (a LoRA checkpoint's adapters: "
                  "adapter_config.json and adapter_model.safetensors); hf and llmc of a LoRA "
                  "checkpoint merge the adapters into the base it names (model.init_from)")
      ->check(CLI::IsMember({"hf", "llmc", "peft"}));
  cmd->add_option(
         "-o,--output", args->options.output,
         "Output directory (hf, peft) or file (llmc). An existing one is replaced whole once the "
         "new export is complete (a failure or a kill leaves it as it was): a directory keeps "
         "its other files, but not an earlier export's safetensors")
      ->required();
  cmd->add_option("--dtype", args->dtype, "Type of the written weights: fp32, bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--max-shard-size", args->options.max_shard_bytes,
                  "hf: split the safetensors into files of at most this many bytes of tensors "
                  "(a tensor larger than that gets a file of its own), with "
                  "model.safetensors.index.json; 0 (default): one model.safetensors")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([args, exit_code] {
    runtime::ExportOptions options = args->options;
    options.format = args->format == "llmc"   ? runtime::ExportFormat::kLlmc
                     : args->format == "peft" ? runtime::ExportFormat::kPeft
                                              : runtime::ExportFormat::kHuggingFace;
    options.dtype = args->dtype == "bf16"   ? DType::kBFloat16
                    : args->dtype == "fp16" ? DType::kFloat16
                                            : DType::kFloat32;
    StatusOr<std::string> step_dir = runtime::ExportCheckpoint(options);
    if (!step_dir.ok()) {
      *exit_code = ReportError(step_dir.status());
      return;
    }
    std::cout << "hoist: exported " << *step_dir << " to " << options.output << " (" << args->format
              << ", " << args->dtype << ")\n";
    *exit_code = 0;
  });
}

}  // namespace hoist::launcher

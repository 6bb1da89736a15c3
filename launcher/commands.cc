#include "launcher/commands.h"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/node.h"
#include "comm/world.h"
#include "core/cpu_share.h"
#include "core/logging.h"
#include "core/rank_env.h"
#include "core/status.h"
#include "kernels/cpu/cpu_threads.h"
#include "launcher/report.h"
#include "runtime/config/config.h"
#include "runtime/data/prepare.h"
#include "runtime/data/tokenizer.h"
#include "runtime/memory/memory_estimate.h"
#include "runtime/train/device_registry.h"
#include "runtime/train/sampler.h"
#include "runtime/train/trainer.h"

namespace hoist::launcher {

int ReportError(const Status& status) {
  // One write: the ranks of a job share the terminal, and pieces of their lines would interleave.
  const std::string line = "hoist: error: " + status.message() + "\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  std::cerr.flush();
  return 1;
}

namespace {

// Collective. Ranks that mpirun or srun started side by side on one machine, unbound, would each
// start as many OpenMP threads as it has cores and spin against each other: each takes its share
// of the cores instead, unless OMP_NUM_THREADS is set (as `hoist launch` sets it), and local
// rank 0 says so once.
Status ShareCoresAmongLocalRanks(comm::Communicator& comm, const RankEnv& rank_env) {
  if (comm.world_size() == 1) return Status::Ok();
  HOIST_ASSIGN_OR_RETURN(const int sharing, comm::CountRanksSharingCpus(comm));
  if (sharing == 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return Status::Ok();
  const CpuLimits cpus = ReadCpuLimits();
  const int threads = ThreadsPerRank(UsableCores(cpus), sharing);
  kernels::cpu::SetCpuThreads(threads);
  if (rank_env.local_rank == 0) {
    HOIST_LOG(INFO) << sharing << " ranks share " << DescribeCores(cpus)
                    << " on this node: " << threads << " OpenMP thread" << (threads == 1 ? "" : "s")
                    << " each (set OMP_NUM_THREADS to choose)";
  }
  return Status::Ok();
}

}  // namespace

void AddTrainCommand(CLI::App& app, int* exit_code) {
  struct Args {
    std::string config_path;
    std::vector<std::string> overrides;
    bool resume = false;
    std::string resume_from;
    std::string memory_profile;
    std::string memory_budget;
    bool allow_8bit_optimizer = false;
    std::string device = "auto";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("train",
                                     "Train a GPT-2 or Llama model. Without -c, trains the "
                                     "embedded demo job (examples/demo.json).");
  cmd->add_option("-c,--config", args->config_path, "Job config (JSON, DeepSpeed's keys)");
  cmd->add_option("--set", args->overrides, "Override a config key: --set optimizer.params.lr=3e-4")
      ->take_all();
  CLI::Option* resume = cmd->add_flag(
      "--resume", args->resume,
      "Resume from the latest checkpoint in checkpoint.dir (start fresh if there is none yet)");
  cmd->add_option("--resume-from", args->resume_from, "Resume from this checkpoint step directory")
      ->excludes(resume);
  cmd->add_option("--memory-profile", args->memory_profile,
                  "Profile the memory of the first steps: a Chrome trace at FILE and an SVG "
                  "beside it (monitor.memory_profile.path; {rank} is the rank)");
  CLI::Option* budget =
      cmd->add_option("--memory-budget", args->memory_budget,
                      "Fit the job into this much device memory per rank (16GiB, 512MiB, ...): "
                      "choose the ZeRO stage, offload, activation checkpointing and micro-batch as "
                      "`hoist plan` does, say what changed, and train that");
  cmd->add_flag("--allow-8bit-optimizer", args->allow_8bit_optimizer,
                "With --memory-budget: the plan may also turn AdamW's moments into 8-bit ones "
                "(optimizer.type AdamW8bit)")
      ->needs(budget);
  cmd->add_option("--device", args->device,
                  "Where the step runs: cpu, cuda (this rank's GPU, by local rank), or auto (the "
                  "GPU when one is visible and the job can run there, else the CPU); the error "
                  "for one this build lacks says what it takes")
      ->check(CLI::IsMember(runtime::DeviceChoices()));
  cmd->callback([args, exit_code] {
    int64_t memory_budget = 0;
    if (!args->memory_budget.empty()) {
      StatusOr<int64_t> bytes = runtime::ParseBytes(args->memory_budget, "--memory-budget");
      if (!bytes.ok()) {
        *exit_code = ReportError(bytes.status());
        return;
      }
      memory_budget = *bytes;
    }
    if (!args->memory_profile.empty()) {
      args->overrides.push_back("monitor.memory_profile.path=" +
                                nlohmann::json(args->memory_profile).dump());
    }
    StatusOr<RankEnv> rank_env = DiscoverRankEnv();
    if (!rank_env.ok()) {
      *exit_code = ReportError(rank_env.status());
      return;
    }
    SetLogRank(rank_env->rank);
    StatusOr<runtime::Config> config =
        runtime::LoadConfig(args->config_path, args->overrides, rank_env->world_size);
    if (!config.ok()) {
      *exit_code = ReportError(config.status());
      return;
    }
    comm::WorldOptions world;
    world.timeout_s = config->comm.timeout_s;
    world.backend = config->comm.backend;
    StatusOr<std::unique_ptr<comm::Communicator>> communicator =
        comm::CreateWorldCommunicator(*rank_env, world);
    if (!communicator.ok()) {
      *exit_code = ReportError(communicator.status());
      return;
    }
    if (Status shared = ShareCoresAmongLocalRanks(**communicator, *rank_env); !shared.ok()) {
      *exit_code = ReportError(shared);
      return;
    }
    // Collective where the device needs it: every rank takes the same device or every rank stops.
    StatusOr<runtime::ChosenDevice> device =
        runtime::ChooseDevice(args->device, rank_env->local_rank, **communicator,
                              rank_env->rank == 0 ? &std::cout : nullptr);
    if (!device.ok()) {
      *exit_code = ReportError(device.status());
      return;
    }
    if (memory_budget > 0) {
      // Every rank plans alike from the same inputs, so a refusal ends every rank the same way.
      config = PlanForTraining(*config, memory_budget, **communicator,
                               rank_env->rank == 0 ? &std::cout : nullptr, device->kind,
                               args->allow_8bit_optimizer);
      if (!config.ok()) {
        *exit_code = ReportError(config.status());
        return;
      }
    }
    runtime::TrainerOptions options;
    options.accelerator = device->factory;
    options.resume = args->resume;
    options.resume_from = args->resume_from;
    options.out = rank_env->rank == 0 ? &std::cout : nullptr;
    options.comm = communicator->get();
    options.local_rank = rank_env->local_rank;
    Status status = Status::Ok();
    int stop_signal = 0;
    {
      StatusOr<std::unique_ptr<runtime::Trainer>> trainer =
          runtime::Trainer::Create(*config, options);
      if (trainer.ok()) {
        // From here on SIGINT, SIGTERM and SIGHUP stop the job at the next step boundary, every
        // rank alike, after a checkpoint (checkpoint.on_signal); a second one ends the process at
        // once.
        runtime::InstallStopSignalHandlers();
        status = (*trainer)->Run();
        stop_signal = (*trainer)->stop_signal();
      } else {
        status = trainer.status();
      }
    }
    if (status.ok()) {
      // Stopped by a signal is not finished: 128 + its number, as a shell reports a process the
      // signal ended, so that a scheduler requeues the job (143 for SIGTERM, 130 for SIGINT, 129
      // for SIGHUP).
      *exit_code = stop_signal != 0 ? 128 + stop_signal : 0;
      return;
    }
    *exit_code = ReportError(status);
    if (rank_env->world_size > 1) {
      // The other ranks may be waiting in a collective this rank will never join: end them all
      // now rather than letting each wait out comm.timeout_s.
      std::cerr << std::flush;
      (*communicator)->Abort(status, *exit_code);
    }
  });
}

namespace {

// `hoist data prepare`: JSONL rows into prepared shards (runtime/data/prepare.h).
void AddDataPrepareCommand(CLI::App& data, int* exit_code) {
  struct Args {
    runtime::PrepareOptions options;
    std::string shape = "auto", loss = "auto", overflow = "truncate";
    std::vector<std::string> variables;
    bool no_eos = false;
  };
  auto args = std::make_shared<Args>();
  runtime::PrepareOptions& o = args->options;
  CLI::App* cmd = data.add_subcommand(
      "prepare",
      "Tokenize, template and mask a fine-tuning dataset (JSONL of text, prompt/completion or "
      "messages rows) once, into prepared shards that `data.train` may name");
  cmd->add_option("files", o.inputs, "JSONL files of training rows")->required();
  cmd->add_option("-o,--output", o.output_dir,
                  "Directory for train_*.bin, val_*.bin and prepare.json")
      ->required();
  cmd->add_option("--tokenizer", o.tokenizer,
                  "The model's tokenizer directory (tokenizer.json, tokenizer_config.json) or a "
                  "tokenizer.json; without it, one token per byte");
  cmd->add_option("--chat-template", o.chat_template,
                  "A Jinja chat template file to use instead of tokenizer_config.json's");
  cmd->add_option("--template-name", o.template_name,
                  "Which of tokenizer_config.json's named chat templates to use");
  cmd->add_option("--template-var", args->variables,
                  "KEY=VALUE for the chat template (VALUE as JSON, else a string), e.g. "
                  "enable_thinking=false");
  cmd->add_option("--shape", args->shape,
                  "The rows' shape: auto (from the first row), text, prompt_completion, messages");
  cmd->add_option("--loss", args->loss,
                  "Tokens the loss counts: auto (text: all, prompt_completion: completion, "
                  "messages: assistant), assistant, completion, all");
  cmd->add_option("--eos-token", o.encoder.eos_token,
                  "End-of-sequence text put after plain texts and completions (default: the "
                  "tokenizer_config.json's eos_token)");
  cmd->add_flag("--no-eos", args->no_eos, "Put no end-of-sequence text after them");
  cmd->add_option("--max-length", o.max_length, "Longest example in tokens (0: no limit)");
  cmd->add_option("--overflow", args->overflow,
                  "A longer example is cut (truncate) or split into pieces (split)");
  cmd->add_option("--val", o.val_inputs, "JSONL files of held-out rows");
  cmd->add_option("--val-fraction", o.val_fraction,
                  "Hold out this fraction of the rows (chosen by --seed)");
  cmd->add_option("--seed", o.seed, "Seed of the held-out choice");
  cmd->add_option("--shard-tokens", o.shard_tokens, "Tokens per shard before the next starts");
  cmd->add_flag("--skip-malformed", o.rows.skip_malformed,
                "Skip and count malformed rows instead of stopping at the first");
  cmd->add_flag("--overwrite", o.overwrite, "Replace a prepared dataset already in the directory");
  cmd->callback([args, exit_code] {
    runtime::PrepareOptions options = args->options;
    Status status = [&]() -> Status {
      if (args->shape != "auto") {
        HOIST_ASSIGN_OR_RETURN(options.rows.shape, runtime::RowShapeNamed(args->shape));
      }
      HOIST_ASSIGN_OR_RETURN(options.encoder.loss, runtime::LossTokensNamed(args->loss));
      HOIST_ASSIGN_OR_RETURN(options.overflow, runtime::OverflowNamed(args->overflow));
      options.encoder.append_eos = !args->no_eos;
      for (const std::string& variable : args->variables) {
        const size_t eq = variable.find('=');
        if (eq == std::string::npos || eq == 0) {
          return InvalidArgumentError("--template-var '" + variable + "' is not KEY=VALUE");
        }
        const std::string value = variable.substr(eq + 1);
        nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(value, nullptr, false);
        options.encoder.render.variables[variable.substr(0, eq)] =
            parsed.is_discarded() ? nlohmann::ordered_json(value) : parsed;
      }
      options.progress = &std::cerr;
      HOIST_ASSIGN_OR_RETURN(runtime::PrepareSummary summary, runtime::PrepareDataset(options));
      std::cout << runtime::DescribePrepareSummary(summary) << "hoist: wrote " << options.output_dir
                << " (train with data.train = \"" << options.output_dir << "/train_*.bin\"";
      if (summary.val.documents > 0) {
        std::cout << ", data.val = \"" << options.output_dir << "/val_*.bin\"";
      }
      std::cout << ")\n";
      return Status::Ok();
    }();
    *exit_code = status.ok() ? 0 : ReportError(status);
  });
}
}  // namespace

void AddDataCommand(CLI::App& app, int* exit_code) {
  CLI::App* data = app.add_subcommand("data", "Prepare training data");
  data->require_subcommand(1);
  struct Args {
    std::string input, output, tokenizer;
  };
  auto args = std::make_shared<Args>();
  CLI::App* tokenize = data->add_subcommand(
      "tokenize",
      "Write a token shard (llm.c format) from any text file, byte-level or with a tokenizer");
  tokenize->add_option("file", args->input, "Text file to tokenize")->required();
  tokenize->add_option("-o,--output", args->output, "Output shard (.bin)")->required();
  tokenize->add_option("--tokenizer", args->tokenizer,
                       "Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3); without "
                       "it, one token per byte");
  tokenize->callback([args, exit_code] {
    runtime::TokenizeOptions options;
    options.tokenizer_path = args->tokenizer;
    options.progress = &std::cerr;
    Status status = runtime::TokenizeFile(args->input, args->output, options);
    if (status.ok()) std::cout << "hoist: wrote " << args->output << "\n";
    *exit_code = status.ok() ? 0 : ReportError(status);
  });
  AddDataPrepareCommand(*data, exit_code);
}

void AddSampleCommand(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<runtime::SampleOptions>();
  CLI::App* cmd = app.add_subcommand("sample", "Generate text from a checkpoint");
  cmd->add_option("--checkpoint", options->checkpoint,
                  "Checkpoint directory (its latest step) or one step directory")
      ->required();
  cmd->add_option("--prompt", options->prompt, "Text to continue");
  cmd->add_option("--tokenizer", options->tokenizer,
                  "Hugging Face tokenizer.json to encode the prompt and decode with (default: "
                  "byte-level)");
  cmd->add_option("-n,--tokens", options->max_new_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", options->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", options->top_k, "Sample from the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", options->seed, "Random seed");
  cmd->callback([options, exit_code] {
    StatusOr<std::string> text = runtime::SampleText(*options);
    if (!text.ok()) {
      *exit_code = ReportError(text.status());
      return;
    }
    std::cout << *text << "\n";
    *exit_code = 0;
  });
}

void AddReportCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "report", "Print the build and the machine: libraries, SIMD, io_uring, GPUs");
  cmd->callback([exit_code] {
    PrintReport(std::cout);
    *exit_code = 0;
  });
}

}  // namespace hoist::launcher

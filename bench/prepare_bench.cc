// `hoist data prepare` on a chat dataset against the tokenizers library in the same run.
//
//   prepare_bench --tokenizer tokenizer.json [--mb N] [--rounds R] [--python PATH]
//
// Writes N MiB (default 64) of synthetic chat JSONL (system, user and assistant turns of varied
// words), then in each round prepares it with hoist (a ChatML template, the assistant's turns as
// targets, one thread) and has Python read the same file, render each conversation with the same
// template through jinja2 and encode the texts with the tokenizers library's encode_batch (its
// Rust threads on every core), the anchor. Prints MB/s of each (median of the rounds), their
// ratio, and this process's peak resident memory, which the prepare bounds by a chunk, not by the
// dataset. The tokenizer is any byte-level BPE tokenizer.json hoist reads (tests/data/tokenizer/
// llama3.json: Llama 3's pre-tokenizer with a small vocabulary).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "runtime/data/prepare.h"

namespace {

constexpr const char* kChatml =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Reads the JSONL, renders each conversation, encodes them in batches; prints "mb_s X" or
// "missing <why>".
constexpr const char* kPythonScript = R"PY(
import sys, json, time, os
path, tokenizer_path, template = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    import jinja2
    from tokenizers import Tokenizer
except Exception as e:
    print("missing", e); sys.exit(0)
tok = Tokenizer.from_file(tokenizer_path)
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
tmpl = env.from_string(template)
t = time.perf_counter()
batch, tokens, encoding = [], 0, 0.0
def encode():
    global tokens, encoding
    e0 = time.perf_counter()
    tokens += sum(len(e.ids) for e in tok.encode_batch(batch, add_special_tokens=False))
    encoding += time.perf_counter() - e0
with open(path, encoding="utf-8") as f:
    for line in f:
        batch.append(tmpl.render(messages=json.loads(line)["messages"], add_generation_prompt=False))
        if len(batch) == 1024:
            encode()
            batch = []
if batch:
    encode()
seconds = time.perf_counter() - t
mb = os.path.getsize(path) / 1e6
print("mb_s", mb / seconds, "encode_mb_s", mb / encoding, "tokens", tokens)
)PY";

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Synthetic conversations, `bytes` of JSONL.
void WriteChat(const std::string& path, int64_t bytes) {
  static const char* kWords[] = {"the",  "model",   "trains", "on",     "answers",  "of",
                                 "a",    "dataset", "with",   "memory", "that",     "you",
                                 "can",  "predict", "rank",   "shard",  "gradient", "épreuve",
                                 "数据", "loss",    "mask",   "token",  "window",   "Paris"};
  constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);
  std::ofstream out(path, std::ios::binary);
  uint64_t x = 88172645463325252ull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  auto sentence = [&](int words) {
    std::string s;
    for (int i = 0; i < words; ++i) {
      if (i > 0) s += ' ';
      s += kWords[next() % kNumWords];
      if (next() % 9 == 0) s += std::to_string(next() % 1000);
    }
    return s + ".";
  };
  int64_t written = 0;
  while (written < bytes) {
    std::string line = R"({"messages": [{"role": "system", "content": ")" + sentence(8) +
                       R"("}, {"role": "user", "content": ")" +
                       sentence(10 + static_cast<int>(next() % 40)) +
                       R"("}, {"role": "assistant", "content": ")" +
                       sentence(20 + static_cast<int>(next() % 120)) + "\"}]}\n";
    out << line;
    written += static_cast<int64_t>(line.size());
  }
}

struct Anchor {
  double mb_s = 0;         // reading, rendering and encoding
  double encode_mb_s = 0;  // encode_batch alone
  long long tokens = 0;
};

Anchor RunPython(const std::string& python, const std::string& data, const std::string& tokenizer,
                 std::string* why) {
  const std::string out =
      hoist::bench::RunPythonScript(python, kPythonScript, {data, tokenizer, kChatml});
  const size_t at = out.find("mb_s ");
  Anchor anchor;
  if (at == std::string::npos ||
      std::sscanf(out.c_str() + at, "mb_s %lf encode_mb_s %lf tokens %lld", &anchor.mb_s,
                  &anchor.encode_mb_s, &anchor.tokens) != 3) {
    *why = out.empty() ? "python did not start" : out.substr(0, out.find('\n'));
    return {};
  }
  return anchor;
}

// The process's peak resident set, MiB (VmHWM).
double PeakResidentMib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer, python = "python3";
  int64_t mb = 64;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
      tokenizer = argv[++i];
    } else if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) {
      mb = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--python") && i + 1 < argc) {
      python = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s --tokenizer tokenizer.json [--mb N] [--rounds R] [--python PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  if (tokenizer.empty() || mb <= 0 || rounds <= 0) {
    std::fprintf(stderr, "give --tokenizer (a byte-level BPE tokenizer.json), --mb > 0\n");
    return 2;
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hoist_prepare_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string data = (dir / "chat.jsonl").string();
  const std::string tmpl = (dir / "chatml.jinja").string();
  std::ofstream(tmpl) << kChatml;
  WriteChat(data, mb << 20);
  const double file_mb = static_cast<double>(std::filesystem::file_size(data)) / 1e6;
  std::printf("prepare_bench: %.1f MB of chat JSONL, tokenizer %s, %d rounds\n", file_mb,
              tokenizer.c_str(), rounds);

  std::vector<double> hoist_mb_s, python_mb_s, encode_mb_s;
  std::string why;
  int64_t tokens = 0;
  long long anchor_tokens = 0;
  for (int round = 0; round < rounds; ++round) {
    hoist::runtime::PrepareOptions options;
    options.inputs = {data};
    options.output_dir = (dir / "out").string();
    options.tokenizer = tokenizer;
    options.chat_template = tmpl;
    options.overwrite = true;
    const auto start = std::chrono::steady_clock::now();
    auto summary = hoist::runtime::PrepareDataset(options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!summary.ok()) {
      std::fprintf(stderr, "prepare failed: %s\n", summary.status().ToString().c_str());
      std::filesystem::remove_all(dir);
      return 1;
    }
    tokens = summary->train.tokens;
    hoist_mb_s.push_back(file_mb / seconds);
    const Anchor anchor = RunPython(python, data, tokenizer, &why);
    if (anchor.mb_s > 0) {
      python_mb_s.push_back(anchor.mb_s);
      encode_mb_s.push_back(anchor.encode_mb_s);
      anchor_tokens = anchor.tokens;
    }
  }
  std::printf("  hoist prepare (1 thread):       %8.2f MB/s  (%lld tokens)\n", Median(hoist_mb_s),
              static_cast<long long>(tokens));
  if (!python_mb_s.empty()) {
    std::printf("  python: json + jinja2 + tokenizers: %5.2f MB/s  (%lld tokens%s)\n",
                Median(python_mb_s), anchor_tokens,
                anchor_tokens == tokens ? ", the same" : ", NOT the same as hoist's");
    std::printf("  tokenizers encode_batch alone:  %8.2f MB/s  (all cores)\n", Median(encode_mb_s));
    std::printf("  ratio hoist / python whole:     %8.2f\n",
                Median(hoist_mb_s) / Median(python_mb_s));
    std::printf("  ratio hoist / encode_batch:     %8.2f\n",
                Median(hoist_mb_s) / Median(encode_mb_s));
  } else {
    std::printf("  tokenizers: not measured (%s); pass --python with tokenizers and jinja2\n",
                why.c_str());
  }
  std::printf("  peak resident of this process:  %8.1f MiB\n", PeakResidentMib());
  std::filesystem::remove_all(dir);
  return 0;
}

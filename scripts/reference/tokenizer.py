"""Reference fixtures for byte-level BPE tokenizers from Hugging Face tokenizers: tests/data/tokenizer/.

Regenerate with `scripts/make-reference-fixtures tokenizer` (commit what it writes), or directly
from the repository root:
    PYTHONPATH=scripts/reference python scripts/reference/tokenizer.py
It needs no network: both tokenizers are trained here, by the tokenizers library, on the small
multilingual text embedded below.

  gpt2.json     byte-level BPE with GPT-2's pre-tokenizer (ByteLevel, use_regex true) and its
                special token <|endoftext|>; merges written as "a b" strings, as GPT-2's file has
  llama3.json   byte-level BPE with Llama 3's pre-tokenizer (Split on its regex, Isolated, then
                ByteLevel with use_regex false), ignore_merges as Llama 3 sets it, special tokens
                <|begin_of_text|> and others; merges as [a, b] pairs, as newer files write them
  llama3_wide.json  llama3.json plus one special token <|wide|> with id 70000 (in the model's
                vocabulary and in added_tokens), so that its ids need 32 bits
  text.txt      the test text: CJK, Cyrillic, accents, emoji with ZWJ sequences, code with tabs,
                whitespace runs, long numbers, upper-case contractions, special tokens inline
  expected.json for each tokenizer: the ids of text.txt (encode without a post-processor's
                additions), the decoded string of those ids (special tokens kept), and the
                pre-tokenizer's pieces of the whole text (byte alphabet, added tokens not taken
                out); for
                llama3_wide.json also wide_ids, the ids of wide_text, which holds <|wide|>
  versions.json the library versions that made them
"""
import json
import os
from importlib import metadata

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = os.path.join("tests", "data", "tokenizer")

# The split pattern of Llama 3's tokenizer.json (public configuration data).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TRAIN_TEXT = """\
The quick brown fox jumps over the lazy dog. It's a test; we're sure they'll see what you've done.
Der schnelle braune Fuchs springt über den faulen Hund. Ça coûte 12,50 € à Zürich — très élevé!
Съешь же ещё этих мягких французских булок, да выпей чаю. Привет, мир! Как дела?
我能吞下玻璃而不伤身体。日本語のテキストも少し。한국어 문장도 있습니다. 東京は大きい。
Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο. مرحبا بالعالم. שלום עולם.
def train(model, steps=1000):
\tfor step in range(steps):
\t\tloss = model(step)  # 12345678901234567890
\t\tif loss < 0.001:
\t\t\treturn step
    return None
Numbers: 3.14159265358979 2718281828 1,000,000 42 007 and dates 2024-05-20.
Emoji: 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🙂🙃 — and symbols ∑ ∫ √ ≤ ≥ ≠ ∞.
I'M SURE IT'S FINE, WE'LL SEE, THEY'VE GONE, YOU'D KNOW, I'D RATHER NOT.
"""

TEST_TEXT = (
    "Hello world! It's HOIST'S test: WE'LL, THEY'VE, I'M, YOU'D, SHE'S, DON'T.\n"
    "<|begin_of_text|>Съешь ещё этих мягких булок.<|end_of_text|> Ça coûte 12,50 €.\n"
    "中文测试：我能吞下玻璃。日本語、한국어。<|endoftext|>\n"
    "Emoji: 👍🏽👨‍👩‍👧‍👦 🏳️‍🌈 ❤️❤️   🙂\n"
    "def f(x):\n\tif x:\n\t\treturn 1234567890123\n    else:\n        return  -42\n\n\n"
    "spaces   between\t\ttabs \u00a0nbsp\u3000ideo\u2003em  \r\n\r\n  end  \n"
    "digits 1 12 123 1234 12345 3.14159 ١٢٣٤ ²³ Ⅻ ſ 'ſ a'ſx 'S 'Re 'LL\n"
    "mixed<|endoftext|><|endoftext|>x<|end_of_text|>  <|begin_of_text|>\n"
    "trailing whitespace   "
)


def special(content):
    return {"content": content, "special": True, "normalized": False}


def train(pre_tokenizer, vocab_size, specials, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAIN_TEXT.splitlines(keepends=True) * 3, trainer=trainer)
    return tok


def record(tok, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    return {"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
            "pieces": [piece for piece, _ in tok.pre_tokenizer.pre_tokenize_str(text)]}


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {}

    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), 800,
                 ["<|endoftext|>"], ignore_merges=False)
    config = json.loads(gpt2.to_str())
    # GPT-2's own file writes each merge as one "a b" string; the library reads both forms.
    config["model"]["merges"] = [" ".join(pair) for pair in config["model"]["merges"]]
    gpt2 = Tokenizer.from_str(json.dumps(config))
    with open(os.path.join(OUT, "gpt2.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")
    expected["gpt2.json"] = record(gpt2, TEST_TEXT)

    llama = train(
        pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]),
        1200,
        ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
         "<|reserved_special_token_1|>"],
        ignore_merges=True,
    )
    config = json.loads(llama.to_str())
    with open(os.path.join(OUT, "llama3.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")
    expected["llama3.json"] = record(llama, TEST_TEXT)

    # The library takes an added token's id from the model's vocabulary when the token is there
    # (it assigns the next free ids otherwise), so <|wide|> goes into both.
    config["model"]["vocab"]["<|wide|>"] = 70000
    config["added_tokens"].append({"id": 70000, "content": "<|wide|>", "single_word": False,
                                   "lstrip": False, "rstrip": False, "normalized": False,
                                   "special": True})
    wide = Tokenizer.from_str(json.dumps(config))
    with open(os.path.join(OUT, "llama3_wide.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")
    wide_text = "a<|wide|>b <|wide|> Привет<|begin_of_text|>"
    expected["llama3_wide.json"] = record(wide, TEST_TEXT)
    expected["llama3_wide.json"]["wide_text"] = wide_text
    expected["llama3_wide.json"]["wide_ids"] = record(wide, wide_text)["ids"]
    assert 70000 in expected["llama3_wide.json"]["wide_ids"], "the library dropped id 70000"

    with open(os.path.join(OUT, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(TEST_TEXT)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "versions.json"), "w") as f:
        json.dump({p: metadata.version(p) for p in ["tokenizers"]}, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()

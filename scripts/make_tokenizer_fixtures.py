#!/usr/bin/env python3
"""Writes the tokenizer.json test fixtures of tests/data/tokenizers/ with Hugging Face's
`tokenizers` library, the reference sparrow's own tokenizer.json reader is checked against.

Two tiny BPE models are trained on the built-in text below and saved in the pipelines of real
models; a few more fixtures reuse a trained model with another pipeline around it (BPE works on
any pre-tokens, so the model need not be retrained):

  llama2            Llama 2 / TinyLlama: normalizer Prepend("▁") + Replace(" ", "▁"), byte
                    fallback <0xXX> tokens (ids 3..258), BOS through TemplateProcessing
  llama2-metaspace  the same model behind the Metaspace pre-tokenizer (prepend_scheme "first",
                    no split), as newer transformers conversions of Llama/Mistral write it
  llama2-metaspace-split  Metaspace(prepend_scheme "always", split) with the Metaspace decoder
  llama3            Llama 3: Split with Llama 3's regex + ByteLevel, ignore_merges, BOS
                    <|begin_of_text|> added after the vocab
  qwen2             the llama3 model behind Qwen2's pipeline: NFC normalizer, Qwen2's regex
                    (one digit a pre-token), no BOS
  gpt2              the llama3 model behind GPT-2's ByteLevel(use_regex) pre-tokenizer, no BOS

Every fixture also has added tokens beyond BOS/EOS, with the flags sparrow implements:
  llama2*           <mask> (special, lstrip) and <sep> (special, rstrip) after the vocab
  llama3/qwen2/gpt2 <|eot_id|>, <|start_header_id|>, <|end_header_id|> (special), <mask>
                    (special, lstrip), and <|endoftext|> (special, normalized, rstrip); qwen2
                    also <e\u0301> (normalized, written decomposed: it matches NFC text)
and SPECIAL_CASES, strings holding added tokens of both styles (Llama 2's <s> and Llama 3's
<|begin_of_text|>, so each fixture also sees the other style's tokens as plain text).

Each fixture directory gets tokenizer.json and expected.json: {"cases": [{"text", "ids",
"decoded"}]} where ids = encode(text) (with the post-processor's special tokens, as
transformers' tokenizers add them by default) and decoded = decode(ids, skip_special_tokens).

The tests read the committed output; they do not need Python. To regenerate:
    python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers
    /tmp/tokvenv/bin/python scripts/make_tokenizer_fixtures.py
"""
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers


OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizers")

# The pre-tokenizer patterns of the real tokenizer.json files (sparrow compares them exactly).
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TRAINING_TEXT = """\
The sparse model runs on the GPU with fewer bytes per token.
Pruned weights are stored in compressed formats, and the kernels read them directly.
It's a test: they're here, we've seen it, I'm sure you'll like it, he'd say so.
Numbers: 0 1 2 3 4 5 6 7 8 9, 10, 42, 128, 2048, 65536 and 3.14159.
def forward(x):
    return x * 2  # two spaces before the comment
Café, naïve, résumé, jalapeño, façade, Zürich, Ærø, smörgåsbord.
Le modèle épars tourne sur le processeur graphique.
Das Modell läuft schneller mit weniger Gewichten.
日本語のテキストも少し入れます。東京と大阪。
中文文本：稀疏模型在显卡上运行。
한국어 문장도 조금 있습니다.
Emoji: 🙂 🚀 ✨ and more 🙂🙂.
Tabs\tand  double  spaces,   triple   spaces.

Blank lines above and below.

Mixed CASE words: HELLO hello Hello hElLo.
"""

CASES = [
    "",
    " ",
    "   ",
    "Hello world",
    "The sparse model runs on the GPU.",
    " leading space",
    "trailing space ",
    "  multiple   spaces  ",
    "\n\n",
    "line one\nline two\r\nline three\n",
    "a\n \n  b\t\tc",
    "digits 1234567 and 3.14159, 0042",
    "Café, naïve, résumé — Ärger über Öl",
    "日本語のテキストと中文文本",
    "한국어 문장",
    "emoji 🙂🚀 ok ✨",
    "unseen: Ωμέγα ß ✓ 🦀 𝔘",
    "it's they're I'LL we'VE he'D 's start, it'ſ",
    "tabs\tand\u00a0nbsp\u3000ideographic\u2003em",
    "mixed123abc!!! ...(really?) [yes]; {ok} #$%^&*",
    "numbers in scripts: ٣٤٥ ⅫⅣ ½ ²",
    "x" * 60,
    "def forward(x):\n    return x * 2  # comment\n",
    "  \n\n  trailing newline space\n ",
    # Text NFC changes (Qwen2's normalizer): decomposed accents, Hangul jamo, singletons,
    # reordering, composition exclusions.
    "cafe\u0301 nai\u0308ve Zu\u0308rich",
    "\u212b \u2126 A\u030angstro\u0308m",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u116e\u11af",
    "a\u0323\u0302 e\u0302\u0323 o\u031b\u0301",
    "\u0958\u0959 \uf900\uf901 \u1e9b\u0323",
]

# Added tokens in the text: split out first and given their ids (lstrip/rstrip taking the
# spaces beside them), the text between them through the normal pipeline.
SPECIAL_CASES = [
    "<s>", "</s>", "<s>Hello world", "Hello <s> world", "Hello world</s>", "Hello<s>world",
    "<s></s>", "<s> </s>", " <s> Hello </s> ", "<s><s>  <s>", "<<s>>", "<s", "</s", "s>",
    "<unk>x", "a\n<s>\nb",
    "<|begin_of_text|>Hello world", "Hello <|eot_id|> world", "Hello world<|eot_id|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|eot_id|><|eot_id|> <|eot_id|>", "  <|eot_id|>  ", "<|begin_of", "<|begin_of_text",
    "<|begin_of_text|", "x<|end_of_text|>y", "<|<|eot_id|>|>",
    "a <mask> b", "a  <mask>  b", "a\t<mask>\nb", "<mask>", " <mask>", "<s> <mask>",
    "a <sep> b", "a <sep>  \n b", "<sep><sep> x", "<mask><sep>", "a <sep> <mask> b",
    "a <|endoftext|> b", "<|endoftext|>  <|endoftext|>", "x <mask><|endoftext|> y",
    "x <\u00e9> y", "x <e\u0301> y<e\u0301>",
]

# Short random strings over the characters where the pre-tokenizer patterns differ (letters,
# numbers of other scripts, the kinds of white space, apostrophes and contraction letters,
# punctuation), to check sparrow's hand-written matchers piece by piece.
TRICKY = [" ", " ", " ", "\n", "\r", "\t", "\x0b", "\x0c", "\x85", "\u00a0", "\u2003", "\u2028",
          "\u3000", "a", "B", "é", "日", "1", "٣", "Ⅻ", "½", "'", "'", "s", "S", "ſ", "l", "L", "t",
          "v", "e", "r", "m", "d", "!", ".", "_", "-", "🙂", "\u0301"]


def random_cases(n=150, seed=6):
    rng = random.Random(seed)
    return ["".join(rng.choice(TRICKY) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def save(name, tok, cases=CASES + SPECIAL_CASES + random_cases()):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    out = []
    for text in cases:
        ids = tok.encode(text).ids
        case = {"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)}
        if tok.pre_tokenizer is not None:  # the pieces BPE sees, to test the pre-tokenizer alone
            normalized = tok.normalizer.normalize_str(text) if tok.normalizer else text
            case["pre_tokens"] = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(normalized)]
        out.append(case)
    # The training text as one long case: many merges per word, and the llama2 fixtures see it
    # as a single pre-token.
    ids = tok.encode(TRAINING_TEXT).ids
    out.append({"text": TRAINING_TEXT, "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=True)})
    with open(os.path.join(d, "expected.json"), "w", encoding="utf-8") as f:
        f.write('{"generator": "scripts/make_tokenizer_fixtures.py", "cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in out))  # a case a line
        f.write("\n]}\n")
    print(f"{name}: vocab {tok.get_vocab_size(with_added_tokens=True)}, {len(out)} cases")


def training_lines():
    return TRAINING_TEXT.splitlines(keepends=True) * 3


def llama2_model():
    """A BPE model with Llama 2's ids: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then the
    trained pieces. Trained behind Metaspace(split) so merges stay inside words, as in Llama's
    SentencePiece vocab."""
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    t.train_from_iterator(training_lines(), trainers.BpeTrainer(
        vocab_size=240, min_frequency=2, show_progress=False))
    trained = json.loads(t.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = 3 + b
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    return vocab, merges


def llama2_tokenizer(vocab, merges):
    t = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                             fuse_unk=True))
    t.add_special_tokens(["<unk>", "<s>", "</s>",
                          AddedToken("<mask>", special=True, lstrip=True, normalized=False),
                          AddedToken("<sep>", special=True, rstrip=True, normalized=False)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                     special_tokens=[("<s>", 1)])
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return t


def llama3_model():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    t.train_from_iterator(training_lines(), trainers.BpeTrainer(
        vocab_size=520, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    trained = json.loads(t.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    return trained["vocab"], merges


def byte_level_tokenizer(vocab, merges, pre_tokenizer, bos=None, normalizer=None):
    t = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    t.normalizer = normalizer
    t.pre_tokenizer = pre_tokenizer
    t.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                          "<|start_header_id|>", "<|end_header_id|>",
                          AddedToken("<mask>", special=True, lstrip=True, normalized=False),
                          AddedToken("<|endoftext|>", special=True, rstrip=True,
                                     normalized=True)])
    steps = [processors.ByteLevel(trim_offsets=False)]
    if bos:
        steps.append(processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, t.token_to_id(bos))]))
    t.post_processor = processors.Sequence(steps)
    t.decoder = decoders.ByteLevel()
    return t


def split_then_bytes(pattern):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])


def main():
    vocab, merges = llama2_model()
    t = llama2_tokenizer(vocab, merges)
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    save("llama2", t)

    t = llama2_tokenizer(vocab, merges)
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    save("llama2-metaspace", t)

    t = llama2_tokenizer(vocab, merges)
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    t.decoder = decoders.Sequence([decoders.ByteFallback(),
                                   decoders.Metaspace(replacement="▁", prepend_scheme="always")])
    save("llama2-metaspace-split", t)

    vocab, merges = llama3_model()
    save("llama3", byte_level_tokenizer(vocab, merges, split_then_bytes(LLAMA3_REGEX),
                                        bos="<|begin_of_text|>"))
    # Qwen2 normalizes to NFC (its cases include text NFC changes), and a normalized added token
    # written decomposed matches its NFC form in the NFC'd text.
    qwen2 = byte_level_tokenizer(vocab, merges, split_then_bytes(QWEN2_REGEX),
                                 normalizer=normalizers.NFC())
    qwen2.add_tokens([AddedToken("<e\u0301>", normalized=True, special=False)])
    save("qwen2", qwen2)
    save("gpt2", byte_level_tokenizer(
        vocab, merges, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Write a small byte-level BPE tokenizer.json that fits a fixture model's vocabulary.

The real Qwen3-VL tokenizer (151,643 BPE tokens, 11 MB) is far larger than the tiny fixtures'
vocabularies (a few hundred ids), so each fixture gets its own tokenizer of the same kind:

  - the same normalizer (NFC), pre-tokenizer (Qwen2's split regex, then ByteLevel without its
    own regex) and decoder (ByteLevel) as the real file, so qvl runs the same code paths;
  - the 256 single-byte tokens (GPT-2's byte-to-unicode spelling), then BPE merges learned from
    the short English text below until the vocabulary is full;
  - the special tokens the chat template and image prompts write as text, at the ids the
    fixture's config.json gives them:
        <|endoftext|>     text_config.bos_token_id   (Qwen3-VL's bos is <|endoftext|>)
        <|im_end|>        text_config.eos_token_id   (Qwen3-VL's eos is <|im_end|>)
        <|vision_start|>  vision_start_token_id
        <|vision_end|>    vision_end_token_id
        <|image_pad|>     image_token_id
        <|video_pad|>     video_token_id
        <|im_start|>      the id after the last of those
    so generation_config.json's eos ids and the config's image ids name the right tokens.

Ids are laid out the way Hugging Face `tokenizers` assigns them when it loads the file (it
takes an added token's id from the BPE vocabulary when the vocabulary holds the same string,
and otherwise gives the added tokens the ids after the vocabulary, in list order, whatever the
file says): the BPE vocabulary is ids 0..N-1, where N is the lowest id of the run of special
ids at the top of the config (vision_start_token_id for the fixtures) and specials below N (the
fixtures' bos 0 and eos 1) are vocabulary entries too; the other specials follow from N on.

Only the Python standard library is needed. The output is deterministic (ties between equally
frequent pairs go to the smallest pair), so re-running it rewrites the same bytes.

Usage:  python3 scripts/make_fixture_tokenizer.py tests/fixtures/tiny-tied [more dirs...]
"""
import collections
import json
import os
import re
import sys

# Qwen2's pre-tokenizer pattern exactly as tokenizer.json spells it (for the file), and an
# ASCII stand-in for training only (Python's re has no \p{L}; the corpus is ASCII).
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TRAIN_PATTERN = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]|"
                           r" ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Training text: plain sentences of the kind a first prompt holds, written for this script.
CORPUS = """\
Hello! Hello there. Hi, how are you today? I am fine, thank you. What is your name?
Why is the sky blue? The sky looks blue because the air scatters blue light from the sun more
than red light. At sunset the light travels through more air, so the sky turns orange and red.
Describe this picture. The picture shows a small cat sitting on a wooden table next to a window.
There is a cup of tea, a book and a green plant in the room. The weather outside is sunny.
What is in the image? I can see two people walking in the park with a dog. The trees are tall.
Please answer the question in one short sentence. Sure, here is a short answer for you.
Write a poem about the sea. The sea is wide and deep, the waves come in and go out again.
Count from one to ten: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10. The year 2024 has 366 days.
Translate the word "house" into French. The word is "maison". Thank you for the help!
Can you explain how a computer works? A computer reads instructions and follows them quickly,
one step after another, using memory to store numbers and text.
The model reads the prompt, thinks about the answer and writes it one token at a time.
"""


def byte_symbols():
    """GPT-2's table: each byte value -> a printable unicode character (its own for printable
    Latin-1 bytes, 256 + k for the others, in byte order)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def learn_merges(n_merges, table):
    words = collections.Counter(
        tuple(table[b] for b in piece.encode("utf-8"))
        for piece in TRAIN_PATTERN.findall(CORPUS))
    merges = []
    while len(merges) < n_merges:
        pairs = collections.Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = best[0] + best[1]
        new_words = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] += count
        words = new_words
    if len(merges) < n_merges:
        sys.exit(f"the corpus yields only {len(merges)} merges, {n_merges} needed")
    return merges


def special_ids(cfg):
    text = cfg.get("text_config", cfg)
    ids = {
        "<|endoftext|>": text["bos_token_id"],
        "<|im_end|>": text["eos_token_id"],
        "<|vision_start|>": cfg["vision_start_token_id"],
        "<|vision_end|>": cfg["vision_end_token_id"],
        "<|image_pad|>": cfg["image_token_id"],
        "<|video_pad|>": cfg["video_token_id"],
    }
    if len(set(ids.values())) != len(ids):
        sys.exit(f"config gives two special tokens the same id: {ids}")
    # the run of consecutive ids at the top starts the added tokens
    top = sorted(ids.values())
    first = top[-1]
    while first - 1 in top:
        first -= 1
    ids["<|im_start|>"] = top[-1] + 1
    return ids, first


def make(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    vocab_size = cfg.get("text_config", cfg)["vocab_size"]
    specials, n_bpe = special_ids(cfg)
    if max(specials.values()) >= vocab_size:
        sys.exit(f"{model_dir}: a special id is outside vocab_size {vocab_size}")
    in_vocab = {s: i for s, i in specials.items() if i < n_bpe}
    free = [i for i in range(n_bpe) if i not in in_vocab.values()]
    if len(free) < 256:
        sys.exit(f"{model_dir}: {n_bpe} ids below the special tokens leave no room for the 256 "
                 "byte tokens")
    table = byte_symbols()
    vocab = dict(in_vocab)
    vocab.update({table[b]: free[b] for b in range(256)})
    merges = learn_merges(len(free) - 256, table)
    for (a, b), token_id in zip(merges, free[256:]):
        if a + b in vocab:
            sys.exit(f"merge {a!r} {b!r} repeats a token")
        vocab[a + b] = token_id
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for s, i in sorted(specials.items(), key=lambda kv: kv[1])]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated",
             "invert": False},
            byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
                  "merges": [list(m) for m in merges]},
    }
    path = os.path.join(model_dir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{path}: {len(vocab)} BPE tokens ({len(merges)} merges), "
          f"{len(added)} special tokens, ids below {vocab_size}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for d in sys.argv[1:]:
        make(d)

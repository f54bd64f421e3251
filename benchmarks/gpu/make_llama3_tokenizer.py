"""Write a Hugging Face tokenizer (tokenizer.json, tokenizer_config.json) equal to Llama 3's,
rebuilt from llama.cpp's own test vocabulary models/ggml-vocab-llama-bpe.gguf (tokens, token
types, merges), so that convert_hf_to_gguf.py can convert a Llama-3-8B-shaped checkpoint with
no download. The converter recognises the result as "llama-bpe" by its pre-tokenizer hash.

    python make_llama3_tokenizer.py ggml-vocab-llama-bpe.gguf OUT_DIR   (needs gguf-py)
"""

import json
import sys
from pathlib import Path

from gguf import GGUFReader

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Meta-Llama-3-8B-Instruct's chat template (tokenizer_config.json of that repository)
CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def field(reader, name):
    f = reader.fields[name]
    return f.contents()


def main(src: str, out: str) -> None:
    r = GGUFReader(src)
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = field(r, "tokenizer.ggml.merges")
    vocab, added = {}, []
    for i, (tok, typ) in enumerate(zip(tokens, types, strict=True)):
        if typ == 3:  # CONTROL: an added special token
            added.append(
                {
                    "id": i,
                    "content": tok,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": True,
                }
            )
        vocab[tok] = i
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": LLAMA3_SPLIT},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {
                "<|begin_of_text|>": {
                    "id": "<|begin_of_text|>",
                    "ids": [128000],
                    "tokens": ["<|begin_of_text|>"],
                }
            },
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": list(merges),
        },
    }
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    (o / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    (o / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>",
                "clean_up_tokenization_spaces": True,
                "model_max_length": 131072,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": CHAT_TEMPLATE,
                "added_tokens_decoder": {
                    str(a["id"]): {
                        k: a[k]
                        for k in (
                            "content",
                            "lstrip",
                            "normalized",
                            "rstrip",
                            "single_word",
                            "special",
                        )
                    }
                    for a in added
                },
            }
        )
    )
    (o / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

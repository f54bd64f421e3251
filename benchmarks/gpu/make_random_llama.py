"""Write a Llama-3-8B-shaped checkpoint with random weights (safetensors shards + config.json)
into OUT_DIR, for llama.cpp's convert_hf_to_gguf.py. The weights are N(0, 0.02) in float16
(norms 1.0), drawn on the GPU when there is one; the output is gibberish, but every matrix has
the real shape, so serving cost (weights read per token, KV bytes per token) is a real 8B's.

    python make_random_llama.py OUT_DIR [--layers 32 --hidden 4096 --ffn 14336 --heads 32
                                         --kv-heads 8 --vocab 128256 --ctx 131072]
"""

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--ctx", type=int, default=131072)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=dev).manual_seed(0)
    head_dim = a.hidden // a.heads

    def rnd(*shape: int) -> torch.Tensor:
        t = torch.empty(*shape, dtype=torch.float16, device=dev)
        t.normal_(0.0, 0.02, generator=gen)
        return t.cpu()

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.float16)

    index: dict[str, str] = {}
    total = 0

    def write(name: str, tensors: dict[str, torch.Tensor]) -> None:
        nonlocal total
        save_file(tensors, str(out / name), metadata={"format": "pt"})
        for k, v in tensors.items():
            index[k] = name
            total += v.numel() * v.element_size()

    write("model-embed.safetensors", {"model.embed_tokens.weight": rnd(a.vocab, a.hidden)})
    for i in range(a.layers):
        pre = f"model.layers.{i}."
        write(
            f"model-layer-{i:03d}.safetensors",
            {
                pre + "self_attn.q_proj.weight": rnd(a.heads * head_dim, a.hidden),
                pre + "self_attn.k_proj.weight": rnd(a.kv_heads * head_dim, a.hidden),
                pre + "self_attn.v_proj.weight": rnd(a.kv_heads * head_dim, a.hidden),
                pre + "self_attn.o_proj.weight": rnd(a.hidden, a.heads * head_dim),
                pre + "mlp.gate_proj.weight": rnd(a.ffn, a.hidden),
                pre + "mlp.up_proj.weight": rnd(a.ffn, a.hidden),
                pre + "mlp.down_proj.weight": rnd(a.hidden, a.ffn),
                pre + "input_layernorm.weight": ones(a.hidden),
                pre + "post_attention_layernorm.weight": ones(a.hidden),
            },
        )
    write(
        "model-head.safetensors",
        {"model.norm.weight": ones(a.hidden), "lm_head.weight": rnd(a.vocab, a.hidden)},
    )
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1)
    )
    (out / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": a.hidden,
                "intermediate_size": a.ffn,
                "num_hidden_layers": a.layers,
                "num_attention_heads": a.heads,
                "num_key_value_heads": a.kv_heads,
                "head_dim": head_dim,
                "vocab_size": a.vocab,
                "max_position_embeddings": a.ctx,
                "rms_norm_eps": 1e-5,
                "rope_theta": 500000.0,
                "hidden_act": "silu",
                "tie_word_embeddings": False,
                "bos_token_id": 128000,
                "eos_token_id": 128009,
                "torch_dtype": "float16",
                "attention_bias": False,
                "mlp_bias": False,
            },
            indent=1,
        )
    )
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 128000, "eos_token_id": [128001, 128009]})
    )
    print(f"wrote {total / 2**30:.2f} GiB of float16 weights to {out} ({dev})")


if __name__ == "__main__":
    main()

"""Writes a small model directory that vLLM loads with ``load_format: dummy``.

Run with the serving plane's interpreter (``.venv-serving/bin/python``: it has ``tokenizers``):

    python ray_pd_eks/rehearse/model.py OUT_DIR [--shape tiny|qwen3-8b]

What it writes:

* ``config.json``: a real architecture (``Qwen3ForCausalLM``, the dense member of the Qwen3
  family that vLLM 0.26 and transformers 5 both know) at one of two shapes. ``tiny`` (2 layers,
  hidden 64) runs on a 2-core CPU in seconds; ``qwen3-8b`` is the published Qwen3-8B shape
  (36 layers, hidden 4096, 32 query and 8 KV heads of 128), compute-exact on a GPU. Weights are
  never written: ``load_format: dummy`` fills them with vLLM's seeded random values, so two
  engines that load the same directory hold the same weights (what the tier's integrity check
  relies on) and the answers are meaningless text.
* ``tokenizer.json`` and ``tokenizer_config.json``: a byte-level BPE tokenizer trained here on
  English prose (no download), with a ChatML chat template, so ``/v1/chat/completions`` and
  ``vllm bench serve`` work as with a hub model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SHAPES = {
    # head_dim 64: vLLM 0.26's CPU attention supports 32, 64, 80, 96, 112, 128, ... (16
    # fails at the first request: "Unsupported CPU attention configuration").
    "tiny": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
    },
    # Qwen3-8B's published config.json (hidden 4096, 36 layers, GQA 32/8, head_dim 128).
    "qwen3-8b": {
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
}
VOCAB_SIZE = {"tiny": 1024, "qwen3-8b": 151936}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = (
    "The river bends twice before it reaches the old stone bridge near the market. "
    "Every morning the baker opens the shutters and sets bread on the wooden shelves. "
    "A narrow path climbs through the pine forest toward the quiet mountain lake. "
    "Read the code in the first line and answer with the code only. "
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 "
    "system user assistant: what is the answer? Hello, world! "
)


def _corpus() -> list[str]:
    """English prose, with the readiness probe's filler sentences, so the probe prompt
    tokenizes to about as many tokens as with a hub model's BPE (a few thousand): a tokenizer
    trained on less splits it into many more and overflows maxModelLen."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "assets/lambda/readiness"))
    import kvproof

    return [_CORPUS, *kvproof._FILLER_SENTENCES, kvproof.probe_prompt("AB12CD34")]


def train_tokenizer(vocab_size: int) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab_size, 1024),
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus() * 20, trainer=trainer)
    return tokenizer


def write_model(out: Path, shape: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(VOCAB_SIZE[shape])
    tokenizer.save(str(out / "tokenizer.json"))  # type: ignore[attr-defined]
    eos = tokenizer.token_to_id("<|im_end|>")  # type: ignore[attr-defined]
    pad = tokenizer.token_to_id("<|endoftext|>")  # type: ignore[attr-defined]
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **SHAPES[shape],
        "vocab_size": VOCAB_SIZE[shape],
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": shape == "tiny",
        "bos_token_id": pad,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": pad, "eos_token_id": eos, "do_sample": False})
    )
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": 32768,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "chat_template": CHAT_TEMPLATE,
                "added_tokens_decoder": {
                    str(tokenizer.token_to_id(t)): {  # type: ignore[attr-defined]
                        "content": t,
                        "special": True,
                        "lstrip": False,
                        "rstrip": False,
                        "normalized": False,
                        "single_word": False,
                    }
                    for t in SPECIAL
                },
            },
            indent=2,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    args = parser.parse_args()
    write_model(args.out, args.shape)
    print(f"model: {args.shape} at {args.out}")


if __name__ == "__main__":
    main()

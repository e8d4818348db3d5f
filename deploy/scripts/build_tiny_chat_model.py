"""Build a tiny chat-template (non-Harmony) model directory for vLLM `--load-format dummy`, offline.

Run with the vLLM venv's python (it has tokenizers and transformers):

    .cache/vllm-venv/bin/python deploy/scripts/build_tiny_chat_model.py --out DIR

A Qwen3 architecture a few layers deep (weights: random, from `--load-format dummy`), and a byte-level
BPE tokenizer trained here on a small generated corpus, with the special tokens a Qwen/Hermes-style
chat needs: `<|im_start|>` / `<|im_end|>` (turns, EOS), `<tool_call>` / `</tool_call>` (vLLM's
`hermes` tool parser), `<think>` / `</think>` (the `qwen3` reasoning parser), `<tool_response>`.
The chat template offers the tools, renders assistant reasoning and tool calls the way the parsers
read them, tool results as `<tool_response>`, and opens the reply inside `<think>` (or, given
`enable_thinking=false` as Qwen3's templates take it, after an empty one).
Serve it with `--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
]
VOCAB_SIZE = 1024

CHAT_TEMPLATE = """\
{%- set sys = messages[0].content if messages and messages[0].role == 'system' else '' -%}
{%- if tools -%}
<|im_start|>system
{{ sys }}{% if sys %}

{% endif %}# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Call a function as <tool_call>
{"name": NAME, "arguments": ARGS}
</tool_call><|im_end|>
{% elif sys -%}
<|im_start|>system
{{ sys }}<|im_end|>
{% endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and loop.first -%}
{%- elif m.role == 'user' or m.role == 'system' -%}
<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' -%}
<|im_start|>assistant
{% if m.reasoning %}<think>
{{ m.reasoning }}
</think>
{% endif %}{{ m.content or '' }}
{%- for tc in m.tool_calls or [] %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments if tc.function.arguments is string \
else tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif m.role == 'tool' -%}
<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% else %}<think>
{% endif %}{% endif -%}"""

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 128,
    "initializer_range": 0.02,
    "intermediate_size": 256,
    "max_position_embeddings": 4096,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": VOCAB_SIZE,
}


def corpus() -> list[str]:
    """Text shaped like what the model will see: chat turns, JSON tool calls, code, numbers."""
    words = (
        "the quick brown fox jumps over a lazy dog weather Paris tea python print search open find exec "
        "cmd echo hello world compute result answer tool call function arguments query city"
    ).split()
    lines = []
    for i in range(400):
        w = [words[(i * 7 + k * 3) % len(words)] for k in range(8)]
        lines.append(" ".join(w) + f" {i} {i * 17 % 1000}.")
        lines.append(json.dumps({"name": w[0], "arguments": {w[1]: w[2], "n": i}}))
        lines.append(f"def f{i}(x):\n    return x * {i}  # {w[3]}\nprint(f{i}(6))")
    return lines


def build(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIALS}
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "model_max_length": 4096,
                "chat_template": CHAT_TEMPLATE,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "unk_token": None,
                "clean_up_tokenization_spaces": False,
                "add_bos_token": False,
                "additional_special_tokens": SPECIALS[1:],
            },
            indent=2,
        )
    )
    (out / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    config = CONFIG | {"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"], "bos_token_id": None}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [ids["<|im_end|>"]], "pad_token_id": ids["<|endoftext|>"]})
    )
    check(out, ids)


def check(out: Path, ids: dict[str, int]) -> None:
    """The directory loads as transformers would load it, and its template renders tools and calls."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    for name, i in ids.items():
        assert tok.convert_tokens_to_ids(name) == i and tok.encode(name, add_special_tokens=False) == [i], name
    tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "python", "arguments": '{"code": "1"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "1"},
    ]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert '<tool_call>\n{"name": "python", "arguments": {"code": "1"}}\n</tool_call>' in text, text
    assert text.endswith("<|im_start|>assistant\n<think>\n") and "<tool_response>\n1\n</tool_response>" in text
    assert len(tok) <= VOCAB_SIZE


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    out = p.parse_args(argv).out
    build(out)
    print(f"tiny chat model written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

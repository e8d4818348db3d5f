"""A SCRIPTED stand-in for a vLLM worker: vLLM's wire formats, replies chosen by the rules of a scenario
file, never by a model. It is the default worker of the compose and Kubernetes fleets and of the tests;
`/v1/models` labels it (`owned_by: toolfleet-scripted`, `scripted: true`), and so does its start-up log.

- `rules`: the one rule engine (a scenario's rules, the first whose `match` is found) and the counters.
- `completions`: the `/v1/completions` adapter (Harmony token ids), `toolfleet worker --scripted`.
- `chat`: the `/v1/chat/completions` adapter (a chat-template model's parsed deltas), `--api chat`.
- `harmony_chat`: `/v1/chat/completions` beside `/v1/completions` for a Harmony scenario, as vLLM serves
  gpt-oss: the messages rendered to Harmony, the scripted reply parsed into reasoning, content, tool calls.
- `routes`: what both answer alike: `/v1/models`, `/health`, `/healthz`, `/debug/stats` (requests and how
  they ended: `aborted` are streams whose client went away before the end, as vLLM aborts those), the
  error bodies, a streamed answer counted.
"""

from orchestrator.worker.scripted.chat import ScriptedChatModel, build_chat_app
from orchestrator.worker.scripted.completions import build_app, fake_logprob
from orchestrator.worker.scripted.model import ScriptedModel
from orchestrator.worker.scripted.rules import ChatScenario, Rule, Scenario, Stats, cached_prefix

__all__ = [
    "ChatScenario",
    "Rule",
    "Scenario",
    "ScriptedChatModel",
    "ScriptedModel",
    "Stats",
    "build_app",
    "build_chat_app",
    "cached_prefix",
    "fake_logprob",
]

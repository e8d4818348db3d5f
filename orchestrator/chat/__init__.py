"""The chat path: chat-template (non-Harmony) workers driven through vLLM's `/v1/chat/completions`.

The conversation stays a list of Harmony messages on both paths (what the store keeps, what
`previous_response_id`, approvals and client-kept items build on); this package renders it as chat
messages plus function definitions (`messages`), and turns the worker's streamed content / reasoning /
tool-call deltas into the same output items and events as the Harmony path (`turns`). `completions` relays a
client's own `POST /v1/chat/completions` to the workers.
"""

from orchestrator.chat.messages import ChatTools, chat_name, chat_tools, to_chat
from orchestrator.chat.turns import ChatTurns

__all__ = ["ChatTools", "ChatTurns", "chat_name", "chat_tools", "to_chat"]

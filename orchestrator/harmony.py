"""Harmony rendering and parsing: the prompt for each turn, and the model's tokens back into messages."""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import dataclass
from typing import Any

import anyio
from openai_harmony import (
    Author,
    DeveloperContent,
    HarmonyEncoding,
    HarmonyEncodingName,
    HarmonyError,
    Message,
    ReasoningEffort,
    Role,
    StreamableParser,
    SystemContent,
    TextContent,
    ToolDescription,
    ToolNamespaceConfig,
    load_harmony_encoding,
)

from toolkit.vocab import ensure_vocab, o200k

START, MESSAGE, END, CALL, RETURN = 200006, 200008, 200007, 200012, 200002
STOP_TOKENS = (CALL, RETURN)
END_OF_TEXT = 199999  # `<|endoftext|>`: an end of sequence the worker may stop on (a grammar's end), not Harmony
MESSAGE_END_TOKENS = frozenset((END, CALL, RETURN))
FIRST_SPECIAL = 199998  # ids from here up are Harmony's special tokens
EFFORTS = {
    "none": ReasoningEffort.LOW,
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
    "max": ReasoningEffort.HIGH,
}
"""Every `reasoning.effort` the openai SDK accepts, as the three levels gpt-oss was trained on (no level
turns reasoning off: `none` and `minimal` are its lowest, `xhigh` and `max` its highest)."""


@functools.cache
def encoding() -> HarmonyEncoding:
    ensure_vocab()
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


# --- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Namespace:
    """A tool namespace shown to the model in the system message (`browser`, `python`, an MCP server)."""

    name: str
    description: str
    tools: tuple[dict[str, Any], ...] = ()  # {"name", "description", "parameters"}

    def config(self) -> ToolNamespaceConfig:
        tools = [ToolDescription.new(t["name"], t.get("description") or "", t.get("parameters")) for t in self.tools]
        return ToolNamespaceConfig(name=self.name, description=self.description, tools=tools)


def system_message(
    *, effort: str | None, date: str, namespaces: list[Namespace], identity: str | None = None
) -> Message:
    content = SystemContent.new().with_conversation_start_date(date)
    if identity:
        content = content.with_model_identity(identity)
    content = content.with_reasoning_effort(EFFORTS.get(effort or "medium", ReasoningEffort.MEDIUM))
    for ns in namespaces:
        content = content.with_tools(ns.config())
    return Message.from_role_and_content(Role.SYSTEM, content)


def developer_message(instructions: str | None, functions: list[dict[str, Any]]) -> Message | None:
    if not instructions and not functions:
        return None
    content = DeveloperContent.new()
    if instructions:
        content = content.with_instructions(instructions)
    if functions:
        tools = [ToolDescription.new(f["name"], f.get("description") or "", f.get("parameters")) for f in functions]
        content = content.with_function_tools(tools)
    return Message.from_role_and_content(Role.DEVELOPER, content)


def user(text: str) -> Message:
    return Message.from_role_and_content(Role.USER, text)


def assistant(text: str, channel: str, recipient: str | None = None, content_type: str | None = None) -> Message:
    msg = Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)
    if recipient:
        msg = msg.with_recipient(recipient)
    if content_type:
        msg = msg.with_content_type(content_type)
    return msg


def tool_result(name: str, text: str, channel: str | None = "commentary") -> Message:
    """A tool's answer, addressed back to the assistant (the shape the model was trained on)."""
    msg = Message.from_author_and_content(Author.new(Role.TOOL, name), text).with_recipient("assistant")
    return msg.with_channel(channel) if channel else msg


def text_of(msg: Message) -> str:
    return "".join(c.text for c in msg.content if isinstance(c, TextContent))


def dump(messages: list[Message]) -> list[dict[str, Any]]:
    """JSON-safe form of messages, for the response store."""
    return json.loads(json.dumps([m.to_dict() for m in messages], default=lambda o: getattr(o, "value", str(o))))


def load(data: list[dict[str, Any]]) -> list[Message]:
    return [Message.from_dict(d) for d in data]


def render(messages: list[Message]) -> list[int]:
    """The prompt for the next assistant turn, as the library's `render_conversation_for_completion` renders it
    (tested equal): while the last assistant message is a final answer, analysis before the first final answer
    is dropped (as vLLM). Built message by message, so long texts are encoded by `encode_text`, off the GIL."""
    last_is_final = next((m.channel == "final" for m in reversed(messages) if m.author.role == Role.ASSISTANT), False)
    first_final = next((i for i, m in enumerate(messages) if m.channel == "final"), len(messages))
    tokens: list[int] = []
    for i, msg in enumerate(messages):
        if not (last_is_final and i < first_final and msg.channel == "analysis"):
            tokens += render_message(msg)
    return tokens + _assistant_start()


async def render_off_loop(messages: list[Message]) -> list[int]:
    """`render` in a worker thread when the messages hold enough text to keep the event loop from its other
    requests (`OFF_LOOP_CHARS`); a small prompt is rendered in place (a thread hop costs more than it)."""
    if _text_size(messages) < OFF_LOOP_CHARS:
        return render(messages)
    return await anyio.to_thread.run_sync(render, messages)


OFF_LOOP_CHARS = 64 * 1024
"""Text (characters) from which a render goes to a worker thread: ~1 ms of encoding on the loop."""


def _text_size(messages: list[Message]) -> int:
    return sum(len(c.text) for m in messages for c in m.content if isinstance(c, TextContent))


def final_text(tokens: list[int]) -> str:
    """The last final-channel text in sampled tokens; tokens that break the grammar: their plain text."""
    parser = TurnParser()
    done = [m for t in tokens if (m := parser.feed(t)[2]) is not None]
    finals = [text_of(m) for m in done if m.channel == "final"] or [text_of(m) for m in done[-1:]]
    return finals[-1] if finals else encoding().decode([t for t in tokens if t < FIRST_SPECIAL])


def render_message(msg: Message) -> list[int]:
    """One message's tokens, as `encoding().render(msg)` gives them, without its cost per call.

    The library looks each special token up afresh (a set of all its special tokens built per lookup,
    ~25 us each, ~120 us a message), while the text in a message is encoded on its own. So a text
    message is its header's frame (rendered by the library once per header) around its texts' tokens;
    any other message (system, developer) is rendered by the library.
    """
    texts = [c.text for c in msg.content if isinstance(c, TextContent)]
    frame = None
    if len(texts) == len(msg.content):
        frame = _frame(msg.author.role, msg.author.name, msg.recipient, msg.channel, msg.content_type)
    if frame is None:
        return list(_rendered(msg))
    head, tail = frame
    tokens = list(head)
    for text in texts:  # each content encoded on its own, as the library does
        tokens += encode_text(text)
    tokens += tail
    return tokens


_RENDERED: dict[str, tuple[int, ...]] = {}
_RENDERED_KEPT = 256
_RENDERED_LOCK = threading.Lock()


def _rendered(msg: Message) -> tuple[int, ...]:
    """The library's rendering of a message other than plain text (a system or developer message), kept by the
    JSON the library renders it from (`to_json`, ~8 us): a render costs ~170 us, and a deployment's responses
    send the same few such messages again and again. The oldest is dropped past `_RENDERED_KEPT`."""
    key = msg.to_json()
    if (tokens := _RENDERED.get(key)) is None:
        tokens = tuple(encoding().render(msg))
        with _RENDERED_LOCK:  # a long prompt renders in a worker thread (`render_off_loop`) beside the loop's
            _RENDERED[key] = tokens
            if len(_RENDERED) > _RENDERED_KEPT:
                del _RENDERED[next(iter(_RENDERED))]
    return tokens


def encode_text(text: str) -> list[int]:
    """Text as the library encodes a message's text: ordinary tokens only, `<|end|>` in it is plain text.

    Encoded by tiktoken's o200k (the same ordinary tokens as Harmony's o200k_harmony; tested equal), which
    releases the GIL while it encodes, where the library holds it: a long text rendered in a worker thread
    leaves the event loop serving."""
    return o200k().encode_ordinary(text)


_PROBES = ("probe", " 42\n")


@functools.lru_cache(maxsize=1024)
def _frame(
    role: Role, name: str | None, recipient: str | None, channel: str | None, content_type: str | None
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The library's rendering of a text message with this header, split where its text goes; None if
    no single split point holds for every probe text (then the library renders each such message)."""

    def rendered(text: str) -> list[int]:
        msg = Message(author=Author(role=role, name=name), content=[TextContent(text=text)])
        msg.channel, msg.recipient, msg.content_type = channel, recipient, content_type
        return encoding().render(msg)

    empty = rendered("")
    probes = [(rendered(text), encode_text(text)) for text in _PROBES]
    for k in range(len(empty) + 1):
        if all(full == empty[:k] + text + empty[k:] for full, text in probes):
            return tuple(empty[:k]), tuple(empty[k:])
    return None


class Renderer:
    """`render` for a conversation that only grows: renders just the new messages.

    Within one response nothing before the newest final answer changes, so the prompt is the last
    prompt (without its trailing `<|start|>assistant`) plus the new messages; a new final-channel
    message (which moves the analysis-dropping point) falls back to a full render. (The library's full
    render drops analysis only while the last assistant message is a final answer, so after a final answer
    earlier in the conversation it would bring the dropped analysis back once the model reasons or calls a
    tool; the prompt here keeps extending the last one instead, as it always has, and the worker's prefix
    cache keeps hitting.)
    """

    def __init__(self) -> None:
        self._count = 0
        self._tokens: list[int] | None = None  # the last prompt without `<|start|>assistant`, extended in place

    async def render_off_loop(self, messages: list[Message]) -> list[int]:
        """`render` in a worker thread when what it will encode holds much text (as `harmony.render_off_loop`)."""
        if _text_size(self._to_encode(messages)) < OFF_LOOP_CHARS:
            return self.render(messages)
        return await anyio.to_thread.run_sync(self.render, messages)

    def render(self, messages: list[Message]) -> list[int]:
        new = self._to_encode(messages)
        if new is messages or self._tokens is None:
            self._tokens = render(messages)[: -len(_assistant_start())]
        else:
            for m in new:
                self._tokens += render_message(m)
        self._count = len(messages)
        return self._tokens + _assistant_start()

    def _to_encode(self, messages: list[Message]) -> list[Message]:
        """The new messages when the prompt extends the last one, else `messages` itself (a full render)."""
        new = messages[self._count :]
        if self._tokens is not None and len(messages) >= self._count and all(m.channel != "final" for m in new):
            return new
        return messages


@functools.cache
def _assistant_start_tuple() -> tuple[int, ...]:
    return tuple(encoding().encode("<|start|>assistant", allowed_special="all"))


def _assistant_start() -> list[int]:
    return list(_assistant_start_tuple())


# --- parsing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    channel: str | None
    recipient: str | None
    content_type: str | None


_CONSTRAIN, _CHANNEL = 200003, 200005
_HEADER_SPECIALS = frozenset((_CHANNEL, _CONSTRAIN))
"""The special tokens a header may hold on the fast path; any other one there is left to the library."""
_LONGEST_CACHED_HEADER = 64


@dataclass(frozen=True)
class _Opened:
    """What the library makes of one message header: the header `TurnParser` reports, and the message it
    opens (its text empty), whose author, channel, recipient and content type every such message copies."""

    header: Header
    message: Message


@functools.lru_cache(maxsize=4096)
def _opened(tokens: tuple[int, ...], role_given: bool) -> _Opened | None:
    """The library's reading of a header (the tokens before `<|message|>`; without `role_given`, the tokens
    after `<|start|>`), asked once per distinct header: its parser costs tens of microseconds per header
    token, and a conversation's headers repeat (`<|channel|>analysis to=python`). None: the library refuses it."""
    parser = StreamableParser(encoding(), Role.ASSISTANT if role_given else None, strict=False)
    try:
        for token in ((START,) if not role_given else ()) + tokens + (MESSAGE,):
            parser.process(token)
        header = Header(parser.current_channel, parser.current_recipient, parser.current_content_type)
        parser.process(END)
    except HarmonyError:
        return None
    return _Opened(header, parser.messages[-1])


def _token_text(token: int) -> str | None:
    """An ordinary token's text, when its bytes are whole UTF-8 by themselves (None: a special token, or part
    of a character that spans tokens)."""
    if token >= FIRST_SPECIAL:
        return None
    try:
        return o200k().decode_single_token_bytes(token).decode()
    except (KeyError, UnicodeDecodeError):
        return None


_EXPECT_START, _HEADER, _CONTENT = range(3)


class TurnParser:
    """Sampled tokens as message starts, text deltas and ends, read as harmony's StreamableParser reads them.

    The common turn (headers of ordinary tokens and `<|channel|>` / `<|constrain|>`, texts whose tokens are
    each whole UTF-8, messages ended by a stop token) is read here: the library's parser costs ~20 us a token
    (~0.3 ms of a 13-token tool call, the largest part of the orchestrator's CPU per turn), while each distinct
    header is read by the library once (`_opened`). Anything else (a character split across tokens, a special
    token out of place, a header the library refuses) hands the turn to the library's parser: it is given the
    tokens read so far and reads on from there, so what is reported is always the library's reading.
    Tokens that break the Harmony grammar (a random model) end parsing: `broken` turns true and the rest
    of the turn is ignored, so the response stays well-formed.
    """

    def __init__(self) -> None:
        self._library: StreamableParser | None = None  # the library's parser, once it has taken the turn over
        self._seen: list[int] = []  # the tokens read here, for the library to take over from
        self._state, self._role_given = _HEADER, True
        self._head: list[int] = []
        self._opened: _Opened | None = None
        self._text: list[str] = []
        self._in_content = False
        self._done = 0
        self.broken = False
        self.header: Header | None = None

    def feed(self, token: int) -> tuple[Header | None, str, Message | None]:
        """Process one token: (header if a message body just began, text delta, message if one just ended)."""
        if self.broken:
            return None, "", None
        if self._library is None:
            if (read := self._read(token)) is not None:
                self._seen.append(token)
                return read
            if not self._take_over():
                return None, "", None
        return self._library_feed(token)

    def _read(self, token: int) -> tuple[Header | None, str, Message | None] | None:
        """One token on the fast path; None: the library is to read it."""
        if self._state == _CONTENT:
            if token in MESSAGE_END_TOKENS:
                return None, "", self._end()
            if (text := _token_text(token)) is None:
                return None
            self._text.append(text)
            return None, text, None
        if self._state == _HEADER:
            if token == MESSAGE:
                return self._open()
            if token >= FIRST_SPECIAL and token not in _HEADER_SPECIALS:
                return None
            self._head.append(token)
            return None, "", None
        if token != START:
            return None
        self._state, self._role_given, self._head = _HEADER, False, []
        return None, "", None

    def _open(self) -> tuple[Header | None, str, Message | None] | None:
        head = tuple(self._head)
        if len(head) > _LONGEST_CACHED_HEADER or (opened := _opened(head, self._role_given)) is None:
            return None
        self._state, self._opened, self._text, self._in_content = _CONTENT, opened, [], True
        self.header = opened.header
        return opened.header, "", None

    def _end(self) -> Message:
        self._state, self._in_content = _EXPECT_START, False
        self._done += 1
        return self._message()

    def _message(self) -> Message:
        """The open message with the text read so far, as the library would end it."""
        assert self._opened is not None
        opened = self._opened.message
        return Message(
            author=opened.author.model_copy(),
            content=[TextContent(text="".join(self._text))],
            channel=opened.channel,
            recipient=opened.recipient,
            content_type=opened.content_type,
        )

    def _take_over(self) -> bool:
        """Hand the turn to the library's parser, fed what was read here; False: it broke on those tokens."""
        self._library = StreamableParser(encoding(), Role.ASSISTANT, strict=False)
        try:
            for token in self._seen:
                self._library.process(token)
        except HarmonyError:
            self.broken = True
            return False
        return True

    def _library_feed(self, token: int) -> tuple[Header | None, str, Message | None]:
        parser = self._library
        assert parser is not None
        try:
            parser.process(token)
        except HarmonyError:
            self.broken = True
            return None, "", None
        started = None
        if token == MESSAGE:
            self._in_content = True
            self.header = started = Header(
                parser.current_channel, parser.current_recipient, parser.current_content_type
            )
            return started, "", None
        if token in MESSAGE_END_TOKENS:
            self._in_content = False
            messages = parser.messages
            if len(messages) > self._done:
                self._done = len(messages)
                return None, "", messages[-1]
            return None, "", None
        delta = parser.last_content_delta if self._in_content else None
        return None, delta or "", None

    def finish(self) -> Message | None:
        """End of the stream without a stop token (length limit): the partial message, if any."""
        if self.broken or not self._in_content:
            return None
        if self._library is None:
            return self._message()
        try:
            self._library.process_eos()
        except HarmonyError:
            return None
        messages = self._library.messages
        return messages[-1] if len(messages) > self._done else None

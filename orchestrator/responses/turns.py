"""The Harmony turn loop: generate, parse into output items and events, call tools, re-render, repeat.

Each turn renders the whole conversation again (analysis before the last final answer dropped, as
vLLM does), so a turn's prompt extends the previous turn's prompt plus its output and the worker's
prefix cache hits. A response ends at a final answer, a function call, an approval request, the
token budget, or a tool-call limit. The items themselves are the kinds' (`kinds/`).
"""

from __future__ import annotations

import contextlib

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.kinds import Stream, custom, open_stream
from orchestrator.kinds.mcp import resume_approvals
from orchestrator.responses import compaction, toolcalls, truncation
from orchestrator.responses.run import Call, Constraint, Run, Turn, TurnModel, TurnState
from orchestrator.worker.client import Chunk, GenerateRequest, TokenLogprob


class HarmonyTurns:
    """Harmony workers: the prompt rendered to token ids here, the sampled tokens parsed here."""

    async def turn(self, r: Run, budget: int) -> Turn:
        outcome, stream = await _turn(r, budget)
        last = r.messages[-1] if r.messages else None
        if outcome == "call" and last is not None and last.author.role == h.Role.ASSISTANT and last.recipient:
            return Turn("call", [Call(last, stream, r.tools.admitted)])
        return Turn("return" if outcome == "call" else outcome)

    async def count(self, r: Run) -> int:
        return len(await r.turn.renderer.render_off_loop(r.messages))

    async def aside(self, r: Run, messages: list[Message], budget: int) -> str:
        prompt = await h.render_off_loop(messages)
        tokens: list[int] = []
        prompt_tokens = 0
        req = GenerateRequest(prompt, budget, r.sampling, r.affinity)
        async with contextlib.aclosing(r.generate(req)) as chunks:
            async for chunk in chunks:
                prompt_tokens = chunk.prompt_tokens or prompt_tokens
                tokens += chunk.token_ids
        r.usage.account(prompt_tokens or len(prompt), len(tokens))
        return h.final_text(tokens)


HARMONY: TurnModel = HarmonyTurns()


async def run(r: Run, *, resumed: bool = False) -> None:
    """Drive turns until the response is finished; the caller handles cancellation and worker errors.
    `resumed`: an adopted response (`adopt.py`), whose input was added before its first replica stopped."""
    model = r.model or HARMONY
    if not resumed and await _begin(r, model):
        return
    while True:
        if r.checkpoint is not None:  # the last completed item: where another replica would go on from
            await r.checkpoint.save(r)
        remaining = r.limits.max_output_tokens - r.usage.output
        if remaining <= 0:
            return r.builder.finish("incomplete", usage=r.usage.as_dict(), incomplete_reason="max_output_tokens")
        if r.compact_threshold is not None and await model.count(r) > r.compact_threshold:
            await compaction.compact_in_stream(r, model)
        if r.context_tokens is not None:
            await truncation.fit(r, model, r.context_tokens)
        turn = await model.turn(r, remaining)
        if turn.outcome in ("force", "retry"):
            continue  # force: tool_choice wants a call and the header is prefilled; retry: generate again
        if turn.outcome == "length":
            return r.builder.finish("incomplete", usage=r.usage.as_dict(), incomplete_reason="max_output_tokens")
        builtin, functions, ignored = toolcalls.sort(r, turn.calls)
        if builtin or ignored:
            if r.tools.count > r.limits.max_turns:
                return r.builder.finish("incomplete", usage=r.usage.as_dict(), incomplete_reason="max_messages")
            if await _call_tools(r, builtin, ignored) and not functions:
                continue
        if not builtin and _retry_bad_arguments(r, [c for c in functions if c.kind and c.kind.json_arguments]):
            continue
        return _end(r)


async def _begin(r: Run, model: TurnModel) -> bool:
    """The approvals the input answers resumed and the new input added; True when that was the whole response
    (a warm-up, or a compaction trigger)."""
    await resume_approvals(r)  # a call the stored conversation stopped at
    r.messages.extend(r.new_input)
    if r.tools.answered:  # a stateless history carries the request and its answer: resume that call
        r.tools.pending, r.tools.answered = r.tools.answered, {}
        await resume_approvals(r)
    if r.warm_only:  # one token, discarded: the worker now holds the prompt's prefix
        await model.aside(r, r.messages, 1)
    elif r.compact_only:  # the response is the compaction of its context, and nothing else
        await compaction.compact_in_stream(r, model)
    else:
        return False
    r.builder.finish("completed", usage=r.usage.as_dict())
    return True


async def _call_tools(r: Run, builtin: list[Call], ignored: list[Call]) -> bool:
    """Run the built-in calls of a turn (the ignored ones are refused); False: an approval request ends it."""
    for c in ignored:
        toolcalls.refuse(r, c)
    answered = True
    for call in builtin:
        if r.checkpoint is not None:  # in flight: rerun or told interrupted if this replica stops now
            await r.checkpoint.save(r, call)
        answered = await toolcalls.call(r, call) and answered
    return answered


def _end(r: Run) -> None:
    """The response ends on an answer (or a client call): failed when tool_choice still wants a call."""
    if r.turn.required is not None:
        error = {
            "code": "server_error",
            "message": "tool_choice requires a tool call; the model answered without one even when prompted",
        }
        return r.builder.finish("failed", usage=r.usage.as_dict(), error=error)
    return r.builder.finish("completed", usage=r.usage.as_dict())


def _retry_bad_arguments(r: Run, calls: list[Call]) -> bool:
    """Client calls whose arguments are not what their kind takes (JSON; an apply_patch operation) go back
    to the model as errors (a bounded number of times per response); their items were closed `incomplete`
    (`FunctionStream.close`) or never added. True: generate again."""
    errors = [(c.msg, err) for c in calls if c.kind and (err := c.kind.argument_error(h.text_of(c.msg))) is not None]
    if not errors or r.turn.json_retries <= 0:
        return False
    r.turn.json_retries -= 1
    for msg, err in errors:
        r.messages.append(h.tool_result(msg.recipient or "", err + " Write the call again.", msg.channel))
    return True


def open_item(r: Run, channel: str | None, recipient: str | None) -> Stream | None:
    """The item a message header opens; a call past `max_tool_calls` opens none (no item, no events)."""
    if recipient is not None and recipient != "assistant" and not r.tools.admit(r.limits):
        return None
    return open_stream(r, channel, recipient)


async def _turn(r: Run, budget: int) -> tuple[str, Stream | None]:
    """One generation. Returns "call" (with the item the call streamed into), "return" (or end of stream),
    "length" or "force"."""
    t = r.turn
    constrained, t.constraining = t.constraining, None
    g = Generation(r, constrained)
    prefill = g.prefill(_prefill(t, constrained))
    prompt = await t.renderer.render_off_loop(r.messages) + prefill
    if t.answer_format is not None and constrained is None:
        budget = max(1, budget // 2)  # the free part (reasoning, calls) leaves room for the constrained answer
    structured = constrained.structured if constrained is not None else None
    req = GenerateRequest(prompt, budget, r.sampling, r.affinity, r.logprobs, structured)
    try:
        async with contextlib.aclosing(r.generate(req)) as chunks:
            async for chunk in chunks:
                if g.chunk(chunk):
                    return "force", None  # closing the stream aborts the generation on the worker
        g.end_constrained()
    finally:
        g.close(len(prompt))
    return g.outcome()


class Generation:
    """One generation's sampled tokens, parsed as they come into the response's items and messages: the item
    now open, the item of the call the generation ended with, and what the worker said of it."""

    def __init__(self, r: Run, constrained: Constraint | None) -> None:
        self.r, self.constrained = r, constrained
        self.parser = h.TurnParser()
        self.stream: Stream | None = None  # the item now open
        self.call_stream: Stream | None = None  # the item of the call this generation ended with
        self.prompt_tokens = self.generated = 0
        self.finish: str | None = None
        self.last_token: int | None = None

    def prefill(self, tokens: list[int]) -> list[int]:
        """The header the model must continue, read as if it had sampled it."""
        for token in tokens:
            header, _, _ = self.parser.feed(token)
            if header is not None:
                self.stream = open_item(self.r, header.channel, header.recipient)
        return tokens

    def chunk(self, chunk: Chunk) -> bool:
        """A chunk of the worker's stream; True: the generation is to stop and be written again ("force")."""
        if chunk.prompt_tokens is not None:
            self.prompt_tokens = chunk.prompt_tokens
        if chunk.cached_tokens is not None:
            self.r.usage.cached += chunk.cached_tokens
        if chunk.finish_reason:
            self.finish = chunk.finish_reason
        for i, token in enumerate(chunk.token_ids):
            lp = chunk.logprobs[i] if chunk.logprobs and i < len(chunk.logprobs) else None
            if self.feed(token, lp):
                return True
        return False

    def feed(self, token: int, lp: TokenLogprob | None = None) -> bool:
        """One sampled token; True when tool_choice or a constraint wants the generation written again."""
        r, t = self.r, self.r.turn
        self.generated += 1
        if token == h.END_OF_TEXT:
            return False  # the worker's end of sequence: the message is ended below, not written on
        self.last_token = t.last_token = token
        header, delta, msg = self.parser.feed(token)
        if header is not None and t.required is not None and _misses(r, header):
            t.forced = True
            return True
        if self.constrained is None and (constraint := _constraint(r, header, self.parser)) is not None:
            t.constraining = constraint  # written again under it (an answer format, a tool's grammar)
            return True
        self._apply(header, delta, msg, lp)
        return False

    def end_constrained(self) -> None:
        """The constraint ended the text and the worker stopped on its end of sequence: end the message."""
        parser = self.parser
        if self.constrained is None or self.finish != "stop" or self.last_token in h.STOP_TOKENS or not parser.header:
            return
        self.last_token = h.CALL if parser.header.recipient not in (None, "assistant") else h.RETURN
        header, delta, msg = parser.feed(self.last_token)
        self._apply(header, delta, msg)

    def close(self, prompt_len: int) -> None:
        """The generation's tokens counted, and the item it left open closed with what was written of it."""
        self.r.usage.account(self.prompt_tokens or prompt_len, self.generated)
        if self.stream is not None and self.stream.in_progress:
            partial = self.parser.finish()
            if partial is not None and not _is_function(partial):
                self.r.messages.append(partial)
            self.stream.close(partial, complete=False)

    def outcome(self) -> tuple[str, Stream | None]:
        """How the generation ended: "call" (with its item), "force" (no answer yet under an answer format:
        written again under it), "length" or "return"."""
        t = self.r.turn
        if self.last_token == h.CALL:
            return "call", self.call_stream
        if t.answer_format is not None and self.constrained is None:
            t.constraining = Constraint(FINAL_PREFILL, t.answer_format.structured)  # no answer yet: write one
            return "force", None
        if self.finish == "length" and self.last_token not in h.STOP_TOKENS:
            return "length", None
        return "return", None

    def _apply(self, header: h.Header | None, delta: str, msg: Message | None, lp: TokenLogprob | None = None) -> None:
        """One token's effect on the output items: the item a header opens, a delta, or the message ended."""
        if self.parser.header is not None and self.parser.header.channel in ("analysis", "commentary") and not header:
            self.r.usage.reasoning += 1
        if header is not None:
            self.stream = open_item(self.r, header.channel, header.recipient)
        elif self.stream is not None and (delta or lp is not None) and msg is None:
            self.stream.delta(delta, lp)
        if msg is not None:
            self.r.messages.append(msg)
            if self.stream is not None:
                self.stream.close(msg)
            self.call_stream, self.stream = self.stream, None


FINAL_PREFILL = "<|channel|>final<|message|>"


def _prefill(t: TurnState, constrained: Constraint | None) -> list[int]:
    """The header the next generation continues: tool_choice's, or the one a constraint applies after."""
    if t.forced and t.required:
        text = t.required.prefill
    elif constrained is not None:
        text = constrained.prefill
    else:
        return []
    return h.encoding().encode(text, allowed_special="all")


def _constraint(r: Run, header: h.Header | None, parser: h.TurnParser) -> Constraint | None:
    """Whether the model heads for text that must be constrained: a call of a custom tool with a grammar,
    or, under an answer format, a free answer (or it left the Harmony grammar). That text is then written
    again under the constraint; reasoning and other calls stay free."""
    t = r.turn
    if t.required is not None:
        return None
    recipient = header.recipient if header is not None else None
    if recipient and recipient.startswith("functions."):
        tool = r.toolset.custom.get(recipient.removeprefix("functions.").split(" ")[0])
        grammar = custom.constraint(tool) if tool is not None else None
        if grammar is not None:
            return Constraint(f"<|channel|>{header.channel or 'commentary'} to={recipient}<|message|>", grammar)
    if t.answer_format is None:
        return None
    final = header is not None and header.channel == "final" and recipient in (None, "assistant")
    return Constraint(FINAL_PREFILL, t.answer_format.structured) if final or parser.broken else None


def _is_function(msg: Message) -> bool:
    return (msg.recipient or "").startswith("functions.")


def _misses(r: Run, header: h.Header) -> bool:
    """Whether a message header defies tool_choice; reasoning and preambles (no recipient) are fine."""
    required = r.turn.required
    assert required is not None
    if required.met_by(header.recipient):
        r.turn.required = None
        return False
    if header.recipient is None and header.channel in ("analysis", "commentary"):
        return False
    return not r.turn.forced

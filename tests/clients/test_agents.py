"""The OpenAI Agents SDK (PyPI `openai-agents`) against the fleet: the SDK's default model and settings,
function tools, streaming, `output_type`, a local `ShellTool`. The scripted worker stands in for the
model's choices."""

from __future__ import annotations

import json

from tests.clients.conftest import run_python

WEATHER_CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
SHELL_CALL = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd": ["echo", "shell-ok"]}<|call|>'
FORECAST_CALL = '<|channel|>commentary to=weather.get_forecast <|constrain|>json<|message|>{"city": "Oslo"}<|call|>'
THINK = "<|channel|>analysis<|message|>A tool knows.<|end|><|start|>assistant"
RULES = [
    ("functions\\.get_weather to=assistant.*sunny in Paris", "<|channel|>final<|message|>Sunny in Paris.<|return|>"),
    ("container\\.exec to=assistant.*shell-ok", "<|channel|>final<|message|>The shell said shell-ok.<|return|>"),
    ("weather in Paris", THINK + WEATHER_CALL),
    ("Run the shell", THINK + SHELL_CALL),
    # output_type: prose first; the orchestrator aborts it and asks again with the answer constrained
    ("final<\\|message\\|>$", '{"name": "Paris", "population": 2100000}<|return|>'),
    ("Name a city", "<|channel|>final<|message|>Paris, I think.<|return|>"),
    ("weather\\.get_forecast to=assistant.*Sunny in Oslo", "<|channel|>final<|message|>Oslo is sunny.<|return|>"),
    ("Forecast for Oslo", THINK + FORECAST_CALL),
]

AGENTS = """
import asyncio, json, subprocess
from pydantic import BaseModel
from agents import Agent, Runner, ShellTool, function_tool

@function_tool
def get_weather(city: str) -> str:
    "The weather of a city."
    return f"It is sunny in {city}."

class City(BaseModel):
    name: str
    population: int

def run_shell(request):
    return subprocess.run(request.data.action.commands[0], shell=True, capture_output=True, text=True).stdout

weather = Agent(name="assistant", instructions="Be brief.", tools=[get_weather])
typed = Agent(name="typed", output_type=City)
shell = Agent(name="shell", tools=[ShellTool(executor=run_shell)])

async def main():
    result = await Runner.run(weather, "What is the weather in Paris?")
    streamed = Runner.run_streamed(weather, "What is the weather in Paris?")
    kinds = [e.type async for e in streamed.stream_events()]
    city = (await Runner.run(typed, "Name a city.")).final_output
    shelled = await Runner.run(shell, "Run the shell.")
    print(json.dumps({"final": result.final_output, "streamed": streamed.final_output,
                      "items": [i.type for i in result.new_items], "events": sorted(set(kinds)),
                      "city": city.model_dump(), "shell": shelled.final_output,
                      "shell_items": [i.type for i in shelled.new_items]}))

asyncio.run(main())
"""


def test_agents_on_the_sdk_defaults_use_function_tools_streaming_output_type_and_a_local_shell(clients, fleet):
    fleet.script(RULES)
    got = run_python(clients, AGENTS, f"{fleet.url}/v1")
    assert got["final"] == got["streamed"] == "Sunny in Paris."
    assert got["items"] == ["reasoning_item", "tool_call_item", "tool_call_output_item", "message_output_item"]
    assert {"raw_response_event", "run_item_stream_event"} <= set(got["events"])
    assert got["city"] == {"name": "Paris", "population": 2100000}
    assert got["shell"] == "The shell said shell-ok."
    assert "tool_call_output_item" in got["shell_items"]


HOSTED_MCP = """
import asyncio, json, os
from agents import Agent, HostedMCPTool, Runner

asked = []

def approve(request):
    asked.append(request.data.name)
    return {"approve": True}

tool = HostedMCPTool(tool_config={"type": "mcp", "server_label": "weather", "server_url": os.environ["MCP_URL"],
                                  "require_approval": "always"}, on_approval_request=approve)
agent = Agent(name="mcp", tools=[tool])

async def main():
    result = await Runner.run(agent, "Forecast for Oslo?", max_turns=4)
    print(json.dumps({"final": result.final_output, "asked": asked,
                      "items": [i.type for i in result.new_items]}))

asyncio.run(main())
"""


def test_a_hosted_mcp_tool_with_an_approval_callback_resumes_without_previous_response_id(clients, fleet, tool_urls):
    fleet.script(RULES)
    got = run_python(clients, HOSTED_MCP, f"{fleet.url}/v1", MCP_URL=tool_urls["weather"])
    assert got["final"] == "Oslo is sunny." and got["asked"] == ["get_forecast"]
    assert "mcp_approval_request_item" in got["items"]


def _patch_call(operation: dict) -> str:
    return f"<|channel|>commentary to=functions.apply_patch <|constrain|>json<|message|>{json.dumps(operation)}<|call|>"


UPDATE = "@@\n-old\n+new"
PATCH_RULES = [
    ("completed: updated notes.txt", "<|channel|>final<|message|>The note is fixed.<|return|>"),
    ("completed: created notes.txt", _patch_call({"type": "update_file", "path": "notes.txt", "diff": UPDATE})),
    ("Write the note", _patch_call({"type": "create_file", "path": "notes.txt", "diff": "+old\n"})),
]

APPLY_PATCH = """
import asyncio, json, os, pathlib, sys
from agents import Agent, ApplyPatchTool, Runner
from agents.apply_diff import apply_diff

class Editor:
    "Applies the model's operations inside one directory."
    def __init__(self, root):
        self.root = pathlib.Path(root)
    def create_file(self, op):
        (self.root / op.path).write_text(apply_diff("", op.diff, mode="create"))
        return f"created {op.path}"
    def update_file(self, op):
        target = self.root / op.path
        target.write_text(apply_diff(target.read_text(), op.diff))
        return f"updated {op.path}"
    def delete_file(self, op):
        (self.root / op.path).unlink()
        return f"deleted {op.path}"

async def main():
    plain, streamed = (os.path.join(os.environ["WORK"], d) for d in ("plain", "streamed"))
    for d in (plain, streamed):
        os.makedirs(d)
    result = await Runner.run(Agent(name="editor", tools=[ApplyPatchTool(editor=Editor(plain))]), "Write the note.")
    live = Runner.run_streamed(Agent(name="editor", tools=[ApplyPatchTool(editor=Editor(streamed))]), "Write the note.")
    [e async for e in live.stream_events()]
    print(json.dumps({"final": result.final_output, "streamed": live.final_output,
                      "items": [i.type for i in result.new_items],
                      "files": [pathlib.Path(d, "notes.txt").read_text() for d in (plain, streamed)]}))

asyncio.run(main())
"""


def test_an_apply_patch_tool_edits_files_in_a_directory_through_the_agents_sdk(clients, fleet, tmp_path):
    fleet.script(PATCH_RULES)
    got = run_python(clients, APPLY_PATCH, f"{fleet.url}/v1", WORK=str(tmp_path))
    assert got["final"] == got["streamed"] == "The note is fixed."
    assert got["files"] == ["new", "new"]  # created, then updated, by the SDK's editor (V4A drops the last newline)
    assert got["items"].count("tool_call_item") == 2


CODE_INTERPRETER = """
import asyncio, json
from openai import OpenAI
from agents import Agent, CodeInterpreterTool, Runner

client = OpenAI()
upload = client.files.create(file=("data.csv", b"x,y\\n1,2\\n3,40\\n"), purpose="user_data")
config = {"type": "code_interpreter", "container": {"type": "auto", "file_ids": [upload.id]}}
agent = Agent(name="analyst", tools=[CodeInterpreterTool(tool_config=config)])

async def main():
    result = await Runner.run(agent, "Sum column y of data.csv.")
    (call,) = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    (message,) = [i.raw_item for i in result.new_items if i.type == "message_output_item"]
    (cited,) = message.content[0].annotations
    content = client.containers.files.content.retrieve(cited.file_id, container_id=cited.container_id).read()
    print(json.dumps({"final": result.final_output, "container": call.container_id, "logs": call.outputs[0].logs,
                      "cited": cited.model_dump(), "content": content.decode()}))

asyncio.run(main())
"""
SUM = (
    "import csv\n"
    "total = sum(int(r['y']) for r in csv.DictReader(open('/mnt/data/data.csv')))\n"
    "_ = open('/mnt/data/total.txt', 'w').write(str(total))\n"
    "print(total)"
)


def test_agents_code_interpreter_tool_with_a_file_reads_it_and_cites_what_it_wrote(clients, fleet):
    """`CodeInterpreterTool` with `file_ids`: the upload is in /mnt/data, the file the code wrote is cited and
    downloads through the SDK's containers resource (the real python tool behind the real gateway)."""
    fleet.script(
        [
            ("python to=assistant", "<|channel|>final<|message|>The total is in total.txt.<|return|>"),
            ("Sum column y", f"<|channel|>analysis to=python<|message|>{SUM}<|call|>"),
        ]
    )
    got = run_python(clients, CODE_INTERPRETER, f"{fleet.url}/v1")
    assert got["final"] == "The total is in total.txt." and got["logs"].strip() == "42"
    assert got["container"].startswith("cntr_") and got["content"] == "42"
    cited = got["cited"]
    assert (cited["type"], cited["filename"], cited["container_id"]) == (
        "container_file_citation",
        "total.txt",
        got["container"],
    )
    assert got["final"][cited["start_index"] : cited["end_index"]] == "total.txt"

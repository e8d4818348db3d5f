"""The python namespace description is harmony's own, with our timeout and no-internet facts; a file replaces it."""

from __future__ import annotations

from pathlib import Path

from openai_harmony import ToolNamespaceConfig

from tools.python_sandbox.server import instructions
from tools.python_sandbox.settings import PythonSandboxSettings


def test_harmonys_text_with_our_timeout_and_no_internet() -> None:
    library = ToolNamespaceConfig.python().description
    ours = instructions(7.5)
    assert "time out after 7.5 seconds" in ours and "Internet access for this session is disabled." in ours
    assert "UNKNOWN" not in ours and "Depends on the cluster" not in ours
    kept = library.split("python will respond")[0]  # everything before the facts is the library's, word for word
    assert ours.startswith(kept)


def test_an_instructions_file_replaces_the_description(tmp_path: Path) -> None:
    path = tmp_path / "python.txt"
    path.write_text("Run Python here. Timeout 5 s.\n")
    settings = PythonSandboxSettings.from_args(["--instructions-file", str(path)], prog="t")
    assert settings.instructions(instructions(5)) == "Run Python here. Timeout 5 s."

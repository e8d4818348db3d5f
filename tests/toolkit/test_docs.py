"""The README's flag and environment tables are generated from the settings classes, and kept in step."""

from __future__ import annotations

from pathlib import Path

from toolkit import docs
from toolkit.settings import ServiceSettings
from tools.python_sandbox.settings import PythonSandboxSettings


def test_the_readme_lists_exactly_what_the_settings_classes_define() -> None:
    assert docs.main(["--check"]) == 0, "run `python -m toolkit.docs` and commit README.md"


def test_every_setting_of_a_service_is_a_row_with_its_flag_env_var_and_default() -> None:
    text = docs.table("python", PythonSandboxSettings)
    rows = [line for line in text.splitlines() if line.startswith("| `--")]
    assert len(rows) == len(PythonSandboxSettings.model_fields)
    assert "| `--pool-size` | `TOOLFLEET_PYTHON_POOL_SIZE` | `2` |" in text
    assert "| `--port` | `TOOLFLEET_PYTHON_PORT` | `8802` | port to bind |" in text  # description from the base


def test_each_service_of_the_cli_finds_its_own_settings_class() -> None:
    found = {name: docs.settings_class(module) for name, (module, _) in docs.SERVICES.items()}
    present = {name: cls for name, cls in found.items() if cls is not None}
    assert {"python", "gateway", "orchestrator", "worker"} <= set(present)
    assert all(issubclass(cls, ServiceSettings) for cls in present.values())
    prefixes = [cls.model_config["env_prefix"] for cls in present.values()]
    assert len(set(prefixes)) == len(prefixes) and "TOOLFLEET_PYTHON_" in prefixes


def test_a_stale_readme_fails_the_check_and_is_rewritten_in_place(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{docs.BEGIN}\n| `--gone` | `TOOLFLEET_GONE` | | removed |\n{docs.END}\noutro\n")
    assert docs.main(["--check", str(readme)]) == 1
    assert docs.main([str(readme)]) == 0
    text = readme.read_text()
    assert "--gone" not in text and "`TOOLFLEET_GATEWAY_CONFIG`" in text
    assert text.startswith("intro\n") and text.endswith(f"{docs.END}\noutro\n")
    assert docs.main(["--check", str(readme)]) == 0

"""The README's promises: its usage example runs, and it shows the two commands."""

from __future__ import annotations

import re
import subprocess

from tests.builders import PYTHON, REPO, subprocess_env

README = (REPO / "README.md").read_text()


def test_readme_starts_with_the_two_commands() -> None:
    """The first code block is exactly `make demo` and `make test`."""
    first = re.search(r"```sh\n(.*?)```", README, re.DOTALL)
    assert first is not None
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert commands == ["make demo", "make test"]


def test_usage_example_runs_and_verifies(tmp_path) -> None:
    """The Python usage example runs as written and reports the verified effect."""
    blocks = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    assert len(blocks) == 1
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    result = subprocess.run(
        [PYTHON, str(script)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["write-hello verified done"]

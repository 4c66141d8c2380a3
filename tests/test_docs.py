"""Every documented command runs as printed, from the files the repository ships (issue 14).

Which lines are commands: in README.md, docs/*.md and examples/README.md, every line of a fenced
block tagged ``sh``, ``bash`` or ``shell`` that starts with ``python -m dcsim``, and every line of
a ``console`` block that starts with ``$ python -m dcsim`` (the prompt removed). In a ``console``
block the lines after a command, up to the next ``$`` line, are what it prints: they must be its
output, line for line, or its first lines when they end with a line ``...``. A block tagged
``sh steps`` is one script: its lines (comments aside) run in order, joined by ``&&``, as a user
following the steps would type them. Other commands in
those blocks (``pip install``, ``streamlit run``, ``pytest``) are not run here: a server, an
installer and the test run itself. A ``python -m dcsim`` line in any other fenced block fails,
since no test would run it; commands in inline code are prose and are not run.

Each command runs through ``/bin/sh`` exactly as printed, from a fresh copy of the tracked files
(``git ls-files``), so a file that is not committed cannot make a command pass. The shell's
``python`` is this interpreter; JAX is kept to the CPU (no accelerator probing), proxies point at
a closed port so any network request fails at once, and dcsim's ``DCSIM_*`` settings are cleared
so the documented defaults apply. A command must exit 0 with nothing on stderr that looks like a
traceback, and print something: on stdout, or into the file it names after ``>``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dcsim import hf
from dcsim.compare import Comparison
from dcsim.model.config import ModelConfig

pytestmark = pytest.mark.slow  # runs every documented command in a fresh copy of the repository

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/*.md", "examples/README.md")
_COMMAND = re.compile(r"python -m dcsim(\s|$)")  # not python -m dcsim.checkpoint.child
PROMPT = "$ "
RUN_LANGUAGES = ("sh", "bash", "shell")
OUTPUT_LANGUAGE = "console"
# The README held 23 commands when this test was written (22 in issue 14, then one for --dtype);
# since issue 15 most of them live in docs/, the README keeping one for each thing it answers.
# Fewer means the extractor broke (a renamed fence, a changed prefix) and the tests below would
# pass on nothing. Lower them only with the commands they count.
MIN_README_COMMANDS = 6
MIN_COMMANDS = 32
# A checkpoint sweep starts 7 JAX processes; leave a busy CI machine room, still ending a hang.
TIMEOUT_SECONDS = 600


@dataclasses.dataclass(frozen=True)
class Command:
    """One documented command: where it is, its text, and the output shown under it, if any."""

    source: str
    line: int
    text: str
    shown: tuple[str, ...] | None = None  # the lines a console block shows it printing
    prefix_only: bool = False  # the shown lines end with "...": they are its first lines

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Extracted:
    commands: tuple[Command, ...]
    stray: tuple[str, ...]  # "file:line: text" of dcsim commands in blocks no test runs


def doc_files(root: Path = ROOT) -> list[Path]:
    return sorted({path for pattern in DOCS for path in root.glob(pattern)})


def extract(text: str, source: str) -> Extracted:
    """The commands of one markdown file (see the module docstring for which lines count)."""
    commands: list[Command] = []
    stray: list[str] = []
    language: str | None = None  # inside a fence: its tag ("" for none); outside: None
    pending: tuple[int, str, list[str]] | None = None  # a console command and the lines under it
    steps: tuple[int, list[str]] | None = None  # a ```sh steps block: where it starts, its lines

    def close_console() -> None:
        nonlocal pending
        if pending is not None:
            number, command, shown = pending
            prefix_only = bool(shown) and shown[-1].strip() == "..."
            lines = tuple(shown[:-1] if prefix_only else shown)
            commands.append(Command(source, number, command, lines, prefix_only))
        pending = None

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            if language is None:
                language, _, rest = stripped[3:].strip().lower().partition(" ")
                steps = (number + 1, []) if language in RUN_LANGUAGES and rest.strip() == "steps" else None
            else:
                close_console()
                if steps is not None and steps[1]:
                    commands.append(Command(source, steps[0], " && ".join(steps[1])))
                language, steps = None, None
            continue
        if language is None:
            continue
        if steps is not None:
            if stripped and not stripped.startswith("#"):
                steps[1].append(stripped)
            continue
        if language in RUN_LANGUAGES:
            if _COMMAND.match(stripped):
                commands.append(Command(source, number, stripped))
            elif _COMMAND.search(stripped):  # after `cd x &&` or a prompt: run on its own line
                stray.append(f"{source}:{number}: {stripped}")
        elif language == OUTPUT_LANGUAGE:
            if stripped.startswith(PROMPT):
                close_console()
                if _COMMAND.match(stripped[len(PROMPT) :]):
                    pending = (number, stripped[len(PROMPT) :], [])
            elif pending is not None:
                pending[2].append(line.rstrip())
        elif _COMMAND.search(stripped):
            stray.append(f"{source}:{number}: {stripped}")
    return Extracted(tuple(commands), tuple(stray))


def extract_all(root: Path = ROOT) -> Extracted:
    found = [extract(path.read_text(encoding="utf-8"), str(path.relative_to(root))) for path in doc_files(root)]
    return Extracted(
        tuple(command for one in found for command in one.commands),
        tuple(line for one in found for line in one.stray),
    )


EXTRACTED = extract_all()


def unique_commands() -> list[Command]:
    """Each distinct command once (the first place it is shown, or one whose output is shown):
    the same command in two places, comments aside, need not run twice."""
    chosen: dict[tuple[str, ...], Command] = {}
    for command in EXTRACTED.commands:
        try:
            key = tuple(shlex.split(command.text, comments=True))  # the same words, whatever the comment
        except ValueError:  # an unclosed quote: test_command_is_one_line says so; run it as it is
            key = (command.text,)
        if key not in chosen or (command.shown is not None and chosen[key].shown is None):
            chosen[key] = command
    return list(chosen.values())


def output_file(command: str) -> str | None:
    """The file a command's stdout is redirected to (``... > arrays.csv``), if any."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    for token, following in itertools.pairwise(lexer):
        if token in (">", ">>"):
            return following
    return None


# --- the extractor, on its own --------------------------------------------------------------------


def test_extractor_reads_each_kind_of_block():
    text = "\n".join(
        [
            "```sh",
            "python -m dcsim count   # a comment",
            "python -m pip install -r requirements.txt",
            "cd examples && python -m dcsim presets",
            "python -m dcsim.checkpoint.child single",
            "```",
            "```console",
            "$ python -m dcsim count --shards 3",
            "total parameters       20",
            "...",
            "$ python -m dcsim presets",
            "```",
            "```python",
            "python -m dcsim layout",
            "```",
            "`python -m dcsim count` in prose",
        ]
    )
    found = extract(text, "x.md")
    script = "mkdir -p cache\npython -m dcsim count --hf a/b --hf-cache cache"
    steps = extract(f"```sh steps\n# make a folder\n{script}\n```", "y.md")
    assert [(c.line, c.text) for c in steps.commands] == [(2, script.replace("\n", " && "))]
    assert [(c.line, c.text, c.shown, c.prefix_only) for c in found.commands] == [
        (2, "python -m dcsim count   # a comment", None, False),
        (8, "python -m dcsim count --shards 3", ("total parameters       20",), True),
        (11, "python -m dcsim presets", (), False),
    ]
    assert found.stray == ("x.md:4: cd examples && python -m dcsim presets", "x.md:14: python -m dcsim layout")


@pytest.mark.parametrize(
    "command, expected",
    [
        ("python -m dcsim count --format csv > arrays.csv", "arrays.csv"),
        ("python -m dcsim compare - --format json < examples/comparison.json", None),
        ("python -m dcsim layout --rule '*/kernel=None,model'  # 36 -> 18", None),
    ],
    ids=["redirect", "stdin", "arrow-in-comment"],
)
def test_output_file(command, expected):
    assert output_file(command) == expected


# --- the documents --------------------------------------------------------------------------------


def test_enough_commands_are_found():
    """Guards every test below from passing on nothing."""
    readme = [command for command in EXTRACTED.commands if command.source == "README.md"]
    assert len(readme) >= MIN_README_COMMANDS, [command.text for command in readme]
    assert len(EXTRACTED.commands) >= MIN_COMMANDS, len(EXTRACTED.commands)
    assert {"docs/cli.md", "docs/checkpoint.md", "docs/compare.md"} <= {c.source for c in EXTRACTED.commands}
    assert any(command.shown for command in readme), "the README's shown `count` output was not found"
    assert any(command.source == "examples/README.md" for command in EXTRACTED.commands)


def test_no_command_outside_a_block_that_runs():
    assert not EXTRACTED.stray, (
        "these dcsim commands are in fenced blocks no test runs; tag the block ```sh (or ```console "
        "with a `$ ` prompt for a command and its output):\n" + "\n".join(EXTRACTED.stray)
    )


@pytest.mark.parametrize("command", EXTRACTED.commands, ids=lambda command: command.where)
def test_command_is_one_line(command):
    assert not command.text.endswith("\\"), f"{command.where}: a `\\` continuation; write the command on one line"
    assert "<<" not in command.text, f"{command.where}: a here-document spans lines"
    shlex.split(command.text, comments=True)  # an unclosed quote would continue on the next line


def test_examples_are_as_dcsim_writes_them():
    """The shipped files are what dcsim itself writes (so they show the current format), and the
    config.json is one Hugging Face file that opens under its own name."""
    model = (ROOT / "examples" / "model.json").read_text(encoding="utf-8")
    assert ModelConfig.from_json(model).to_json() == model
    comparison = (ROOT / "examples" / "comparison.json").read_text(encoding="utf-8")
    assert Comparison.from_json(comparison).to_json() == comparison
    config, message = hf.read_config_file((ROOT / "examples" / "config.json").read_bytes())
    assert config.origin is not None and message is not None


# --- every command, run ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> Path:
    """A copy of the repository's tracked files only, as a fresh clone has them."""
    # safe.directory: CI runs as root over a checkout another user may own; reading is safe.
    try:
        listed = subprocess.run(
            ["git", "-c", "safe.directory=*", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode("utf-8")
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.fail(f"the documented commands run from the tracked files, which needs git and a git checkout: {err}")
    copy = tmp_path_factory.mktemp("tracked") / "repo"
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if not source.exists():  # deleted in the working tree, not yet committed
            continue
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copy / name, follow_symlinks=False)
    assert (copy / "dcsim" / "cli" / "__init__.py").is_file()
    return copy


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> dict[str, str]:
    """The shell's environment: `python` is this interpreter, offline, dcsim's defaults."""
    bin_dir = tmp_path_factory.mktemp("bin")
    # A script, not a symlink: a virtual environment's python finds its packages by its own path.
    # `python -m dcsim` goes to the fork server when one is running (DOCS_FORK_SOCKET, below).
    python, forks = shlex.quote(sys.executable), shlex.quote(str(FORKS))
    (bin_dir / "python").write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ] && [ "$2" = "dcsim" ] && [ -n "$DOCS_FORK_SOCKET" ]; then\n'
        f'  exec {python} -S {forks} --client "$DOCS_FORK_SOCKET" "$@"\n'
        "fi\n"
        f'exec {python} "$@"\n'
    )
    (bin_dir / "python").chmod(0o755)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DCSIM_", "JAX_", "XLA_")) and key not in ("PYTHONPATH", "PYTHONHOME")
    }
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens, a request fails at once
    loopback = "127.0.0.1,localhost,::1"  # jax.distributed's coordinator stays reachable
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "JAX_PLATFORMS": "cpu",
        "http_proxy": closed,
        "https_proxy": closed,
        "HTTP_PROXY": closed,
        "HTTPS_PROXY": closed,
        "no_proxy": loopback,
        "NO_PROXY": loopback,
        "no_grpc_proxy": loopback,
        "HF_HUB_OFFLINE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return env


FORKS = ROOT / "tests" / "children" / "dcsim_forks.py"


@pytest.fixture(scope="module")
def forked(tracked, environment, tmp_path_factory) -> Iterator[dict[str, str]]:
    """The shell's environment with a fork server (``tests/children/dcsim_forks.py``) behind its
    ``python -m dcsim``: dcsim imported once from the tracked copy, each command a fork of it."""
    socket_path = tmp_path_factory.mktemp("forks") / "socket"
    server = subprocess.Popen(
        [sys.executable, str(FORKS), str(socket_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tracked,
        env=environment | {"PYTHONPATH": str(tracked)},
        text=True,
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready", "the fork server did not start"
    try:
        yield environment | {"DOCS_FORK_SOCKET": str(socket_path)}
    finally:
        assert server.stdin is not None
        server.stdin.close()  # its signal to stop
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.parametrize("command", unique_commands(), ids=lambda command: command.where)
def test_command_runs_as_printed(command, tracked, forked, tmp_path):
    fresh = tmp_path / "repo"
    shutil.copytree(tracked, fresh, symlinks=True)
    result = subprocess.run(
        command.text,
        shell=True,
        cwd=fresh,
        env=forked,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    said = f"{command.where}: {command.text}\nexit {result.returncode}\nstderr:\n{result.stderr[-3000:]}"
    assert result.returncode == 0, said
    assert "Traceback" not in result.stderr, said
    written = output_file(command.text)
    if written is None:
        assert result.stdout.strip(), f"{said}\nprinted nothing"
    else:
        target = fresh / written
        assert target.is_file() and target.stat().st_size > 0, f"{said}\nwrote nothing to {written}"
    if command.shown is not None:
        printed = [line.rstrip() for line in result.stdout.splitlines()]
        expected = list(command.shown)
        if command.prefix_only:
            printed = printed[: len(expected)]
        assert printed == expected, f"{command.where}: the output shown under `{command.text}` is not what it prints"


def test_readme_shows_count_output():
    """The README shows what `count` prints (checked when it runs, above)."""
    shown = [c for c in EXTRACTED.commands if c.source == "README.md" and c.text == "python -m dcsim count" and c.shown]
    assert shown and len(shown[0].shown) >= 5
    assert re.match(r"total parameters\s+20$", shown[0].shown[0]), "count leads with the answer"


# A figure of a worked example in the README's prose: a count or byte figure of a million or more,
# or an answer in sequences (issue 43: "127 sequences" and the ZeRO figures were checked nowhere).
_README_FIGURE = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3}){2,}(?![\d,])|\b\d+ sequences\b")


def test_every_readme_figure_is_printed_by_a_checked_command():
    """Every headline figure the README states is in the output a ``console`` block shows, which
    ``test_command_runs_as_printed`` compares with what the command prints: a figure dcsim stops
    printing fails there, and a figure the README states without a checked command fails here."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    figures = sorted(set(_README_FIGURE.findall(readme)))
    shown = "\n".join(line for command in EXTRACTED.commands if command.shown for line in command.shown)
    missing = [figure for figure in figures if not re.search(rf"(?<![\d,.]){re.escape(figure)}(?![\d,])", shown)]
    assert "127 sequences" in figures and "17,244,162,052" in figures, "the pattern misses the README's figures"
    assert not missing, f"the README states {missing}, which no console block in the docs shows a command printing"


_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def test_every_relative_link_in_the_docs_reaches_a_file():
    """The README and docs/ link into each other and into the repository: each such link must
    reach a file that ships (web addresses and ``javascript:`` examples of hostile links aside)."""
    missing = []
    for path in doc_files():
        for target in _LINK.findall(path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            if not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)}: {target}")
    assert not missing, missing

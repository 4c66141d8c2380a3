"""Every limit in the Limits table (docs/limits.md), pushed one past through the path the server
takes (a link, a widget value, an upload, a click; the CLI for its own flags), with the message the
table promises. The table is read from the docs, so a row without a probe, a probe without a row,
or a message that drifted from the code fails here (issue 8)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from conftest import open_app, uploader
from dcsim import cli
from dcsim.runtime import checks
from dcsim.ui import cache
from dcsim.ui import checkpoint as measuring
from dcsim.ui import compare as compare_widgets
from dcsim.ui import layout as layout_widgets
from dcsim.ui import memory as memory_widgets
from dcsim.ui import weights as weight_widgets

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
EDITOR = "w.layers.0"


def readme_limits() -> dict[str, dict[str, str]]:
    """The Limits table of docs/limits.md: what -> {limit, where, message} (cells as written)."""
    text = (ROOT / "docs" / "limits.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 4 or cells[0] in ("what", "---"):
            continue
        rows[cells[0]] = {"limit": cells[1], "where": cells[2], "message": cells[3]}
    return rows


def promised(cell: str) -> str | None:
    """The message a table cell quotes (its code span), or None for a cell that says what
    happens instead (a recomputed cache entry shows nothing)."""
    match = re.fullmatch(r"(`+) ?(.*?) ?\1(?: .*)?", cell)
    return match.group(2) if match else None


def matches(expected: str, actual: str) -> bool:
    """``expected`` with ``...`` standing for any text is the whole of ``actual``."""
    pattern = ".*".join(re.escape(piece) for piece in expected.split("..."))
    return re.fullmatch(pattern, actual, flags=re.DOTALL) is not None


# --- probes: each returns the one message a person sees past the limit -----------------------------


def _alerts(at: AppTest) -> list[str]:
    return [element.value.replace("\\", "") for kind in ("warning", "error") for element in at.get(kind)]


def _one(at: AppTest) -> str:
    assert not at.exception
    (alert,) = _alerts(at)
    return alert


def _link(query: dict, page: str | None = None) -> str:
    return _one(open_app(query, page))


def _edit(rows: dict) -> str:
    at = open_app()
    at.session_state[EDITOR] = {"edited_rows": {}, "added_rows": [], "deleted_rows": [], **rows}
    return _one(at.run())


def _upload(content: bytes) -> str:
    at = open_app()
    uploader(at).set_value(("model.json", content, "application/json")).run()
    assert not at.exception
    (alert,) = at.sidebar.get("error")  # the page repeats it in the main area for a phone
    assert alert.value in [error.value for error in at.main.get("error")]
    return alert.value.replace("\\", "")


def _typed(page: str, label_words: str, value: str, kind: str = "text_input") -> str:
    at = open_app(page=page)
    widget = next(widget for widget in at.get(kind) if label_words in widget.label)
    widget.set_value(value).run()
    return _one(at)


def _custom_rules(text: str) -> str:
    at = open_app({"strategy": "custom"}, "pages/layout.py")
    at.text_area[0].set_value(text).run()
    return _one(at)


def _cli(argv: list[str], capsys, code: int = 2) -> str:
    assert cli.main(argv) == code
    return capsys.readouterr().err.strip()


TINY_MEMORY = ["memory", "--input-dim", "8", "--features", "16,4", "--mesh", "data=4"]


def _verify_busy(monkeypatch, capsys) -> str:
    """Every slot held, as by two visitors' checks: the next check waits, then says so."""
    monkeypatch.setattr(checks, "BUSY_WAIT_SECONDS", 0.1)
    held = [checks._RUNNING.acquire(timeout=5) for _ in range(checks.MAX_RUNNING)]
    try:
        return _cli([*TINY_MEMORY, "--verify"], capsys, code=1)
    finally:
        for taken in held:
            if taken:
                checks._RUNNING.release()


def _compare_file(folder: Path, document, capsys) -> str:
    path = folder / "comparison.json"
    if isinstance(document, dict):
        document = json.dumps({"format": "dcsim.comparison", "version": 1, **document})
    path.write_text(document)
    return _cli(["compare", str(path)], capsys)


def _busy(monkeypatch) -> str:
    monkeypatch.setattr(measuring, "WAIT_SECONDS", 0.1)
    at = open_app(page="pages/checkpoint.py")
    with measuring.measurement_lock().hold():
        next(button for button in at.button if "measure" in button.label.lower()).click().run()
    return next(text for text in _alerts(at) if text.startswith("Busy"))


def _timeout(monkeypatch) -> str:
    """A real child, ended at a time limit it cannot meet (it imports JAX first)."""
    monkeypatch.setattr(measuring, "TIMEOUT_SECONDS", 0.5)
    at = open_app(page="pages/checkpoint.py")
    next(button for button in at.button if "measure" in button.label.lower()).click().run()
    return _one(at)


PROBES = {
    "Dense layers": lambda **_: _edit({"added_rows": [{"features": 4, "use_bias": True}] * 256}),
    "layer width": lambda **_: _edit({"edited_rows": {0: {"features": 1048577}}}),
    "input dimension, batch size": lambda **_: _link({"input_dim": "1048577"}),
    "shards": lambda **_: _link({"shards": "0"}),
    "seed": lambda **_: _link({"seed": "4294967296"}),
    "preset hyperparameters": lambda **_: _link({"preset": "gpt2-small", "h.num_layers": "257"}),
    "link field": lambda **_: _link({"shards": "9" * 40}),
    "link field repeated": lambda **_: _link({"shards": ["2", "3"]}),
    "link version": lambda **_: _link({"v": "3"}),
    "configuration file": lambda **_: _upload(b" " * 70_000),
    "Hugging Face config.json": lambda **_: _upload(
        json.dumps(json.loads((ROOT / "tests/data/hf/llama-2-7b.json").read_text()) | {"attention_bias": True}).encode()
    ),
    "configuration file nesting": lambda **_: _upload(b"[" * 60_000),
    "mesh devices": lambda **_: _typed("pages/layout.py", "Mesh", "data=1024,model=2048"),
    "mesh axes": lambda **_: _typed("pages/layout.py", "Mesh", ",".join(f"a{index}=1" for index in range(9))),
    "mesh text": lambda **_: _link({"mesh": "data=2," * 80}, "pages/layout.py"),
    "custom rules": lambda **_: _custom_rules("\n".join(["*/kernel=None"] * 65)),
    "rule pattern": lambda **_: _custom_rules("k" * 257 + "=None"),
    "rules text": lambda **_: _link({"strategy": "custom", "rules": "*=None\n" * 600}, "pages/layout.py"),
    "checkpoint devices": lambda **_: _link({"mesh": "data=128"}, "pages/checkpoint.py"),
    "checkpoint ceiling": lambda **_: _link({"preset": "gpt2-small"}, "pages/checkpoint.py"),
    "checkpoint time limit": lambda monkeypatch, **_: _timeout(monkeypatch),
    "checkpoint measurements": lambda monkeypatch, **_: _busy(monkeypatch),
    "CLI `--timeout`": lambda capsys, **_: _cli(["checkpoint", "--timeout", "3601"], capsys),
    "CLI `--max-params`": lambda capsys, **_: _cli(["checkpoint", "--max-params", "0"], capsys),
    "processes per checkpoint": lambda capsys, **_: _cli(["checkpoint", "--processes", "9"], capsys),
    "comparison scenarios": lambda capsys, tmp_path, **_: _compare_file(
        tmp_path, {"scenarios": [{"name": f"s{index}"} for index in range(9)]}, capsys
    ),
    "scenario name": lambda capsys, tmp_path, **_: _compare_file(
        tmp_path, {"scenarios": [{"name": "x" * 10_000}]}, capsys
    ),
    "comparison file": lambda capsys, tmp_path, **_: _compare_file(tmp_path, " " * 300_000, capsys),
    "budget": lambda **_: _link({"budget": "1e400"}, "pages/compare.py"),
    "ZeRO stage, parts, optimizer, training dtypes": lambda capsys, **_: _cli([*TINY_MEMORY, "--zero", "5"], capsys),
    "device memory budget": lambda capsys, **_: _cli([*TINY_MEMORY, "--budget", "80"], capsys),
    "XLA memory check devices": lambda capsys, **_: _cli(
        ["memory", "--preset", "llama2-7b", "--mesh", "data=4096", "--verify"], capsys
    ),
    "XLA memory check arrays": lambda capsys, **_: _cli(
        [
            *("memory", "--preset", "llama2-7b", "--set", "num_layers=256", "--mesh", "data=8"),
            *("--optimizer", "adafactor", "--master-dtype", "float32", "--verify"),
        ],
        capsys,
    ),
    "XLA memory check time": lambda capsys, monkeypatch, **_: (
        monkeypatch.setenv("DCSIM_VERIFY_TIMEOUT_SECONDS", "0.01"),
        _cli([*TINY_MEMORY, "--verify"], capsys, code=1),
    )[1],
    "XLA memory checks at once": lambda capsys, monkeypatch, **_: _verify_busy(monkeypatch, capsys),
    "training step sequence": lambda capsys, **_: _cli([*TINY_MEMORY, "--sequence", "0"], capsys),
    "training micro-batch": lambda capsys, **_: _cli([*TINY_MEMORY, "--sequence", "8", "--micro-batch", "0"], capsys),
    "remat policy, attention kind, compute dtype": lambda capsys, **_: _cli([*TINY_MEMORY, "--remat", "most"], capsys),
    "expert capacity factor": lambda capsys, **_: _cli([*TINY_MEMORY, "--capacity-factor", "lots"], capsys),
    "XLA training-step check": lambda capsys, **_: _cli(
        ["memory", "--preset", "llama2-7b", "--mesh", "data=2", "--sequence", "8", "--verify"], capsys
    ),
    "serving context": lambda capsys, **_: _cli(["serve", "--context", "16777217"], capsys),
    "serving concurrency": lambda capsys, **_: _cli(["serve", "--concurrency", "0"], capsys),
    "serving reserve": lambda capsys, **_: _cli(["serve", "--reserve", "1"], capsys),
    "serving mesh axes": lambda capsys, **_: _cli(["serve", "--mesh", "fsdp=2"], capsys),
    "KV cache dtype": lambda capsys, **_: _cli(["serve", "--kv-dtype", "int4"], capsys),
    "XLA decode-step check": lambda capsys, **_: _cli(
        ["serve", "--preset", "gpt2-small", "--context", "64", "--mesh", "stage=2", "--verify"], capsys
    ),
    "weight format": lambda capsys, **_: _cli(["serve", "--weights", "q4"], capsys),
    "weight format group": lambda capsys, **_: _cli(["serve", "--weights", "gptq-int4", "--group", "65537"], capsys),
    "weight format tile": lambda capsys, **_: _cli(["serve", "--weights", "int4", "--tile", "65537"], capsys),
    "written weight file": lambda capsys, tmp_path, **_: _cli(
        ["serve", "--preset", "llama2-7b", "--weights", "gptq-int4", "--write", str(tmp_path / "out")], capsys
    ),
}

# Bounded caches: past the bound the oldest entry is dropped and recomputed on request; no message.
CACHES = {
    "dashboard count cache": cache._count,
    "optimizer states": cache._optimizer_state,
    "layouts": layout_widgets._cached_layout,
    "layout sweeps": layout_widgets._cached_sweep,
    "checkpoint plans": measuring._plan,
    "kept checkpoint reports": measuring._reports,
    "kept sweeps": measuring._sweeps,
    "budget answers": compare_widgets._answer,
    "memory layouts": memory_widgets._cached_memory,
    "memory sweeps": memory_widgets._cached_sweep,
    "memory budget answers": memory_widgets._cached_fit,
    "weight tables": weight_widgets._table,
}
# Rows that describe what happens instead of quoting a message: Streamlit or the web server acts
# first (link length, uploads), or the page explains and offers another way (a comparison link).
NOT_DCSIM = {"link length", "uploaded file", "comparison link"}


def test_every_row_of_the_readme_table_is_checked_here():
    assert set(readme_limits()) == set(PROBES) | set(CACHES) | NOT_DCSIM


# Probes that start a child interpreter (a checkpoint's, an XLA check's) to see it ended at its limit.
STARTS_A_CHILD = {"checkpoint time limit", "XLA memory check time"}


@pytest.mark.parametrize(
    "what", [pytest.param(what, marks=pytest.mark.slow) if what in STARTS_A_CHILD else what for what in sorted(PROBES)]
)
def test_past_each_limit_the_server_shows_the_readme_message(what, capsys, monkeypatch, tmp_path):
    expected = promised(readme_limits()[what]["message"])
    assert expected, f"the docs/limits.md row {what!r} quotes no message"
    actual = PROBES[what](capsys=capsys, monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert matches(expected, actual), f"docs/limits.md: {expected}\nactual: {actual}"


@pytest.mark.parametrize("what", sorted(CACHES))
def test_each_cache_is_bounded_as_the_readme_says(what):
    limit = int(re.match(r"[\d,]+", readme_limits()[what]["limit"]).group().replace(",", ""))
    assert CACHES[what]._info.max_entries == limit


def test_the_server_caps_uploads_as_the_upload_box_does():
    """``max_upload_size`` on the widget is a cap the browser enforces; only the server's own
    ``server.maxUploadSize`` stops a client that skips it before the bytes are in memory."""
    settings = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    box = uploader(open_app())
    assert settings["server"]["maxUploadSize"] == box.proto.max_upload_size_mb == 1
    assert "1 MB" in readme_limits()["uploaded file"]["limit"]


def test_the_matcher_can_fail():
    assert matches("`seed` must be ... got 4294967296", "`seed` must be an integer, got 4294967296")
    assert not matches("`seed` must be ... got 4294967296", "`seed` must be an integer, got 4294967297")
    assert promised("`` `layers` may hold ``") == "`layers` may hold"
    assert promised("older entries are recomputed") is None
    assert json.dumps(sorted(NOT_DCSIM))

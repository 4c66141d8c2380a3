"""User-chosen text is shown as text, never as HTML or markdown that runs (issue 8).

Every field dcsim echoes (link values, preset names, hyperparameter values, mesh and rule text,
uploaded JSON values) is given markup and very long values; each must reach the page escaped, so
it reads back literally. A source scan keeps eval/exec/pickle/raw HTML out of the code, and the
checkpoint's temporary folders are private and never named by a user.
"""

from __future__ import annotations

import ast
import json
import re
import stat
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
from hostile import IMG, MD_LINK, SCRIPT
from streamlit.testing.v1 import AppTest

from conftest import open_app, uploader
from dcsim import cli
from dcsim.checkpoint import measurement
from dcsim.checkpoint.measurement import MeasurementOptions
from dcsim.model.config import ModelConfig
from dcsim.ui.frame import plain

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")

PAYLOADS = {
    "script": SCRIPT,
    "img": IMG,
    "link": MD_LINK,
    "bold": "**bold**",
    "directive": ":red[x] :material/home: $x$",
}
LONG = "<b>" + "y" * 5000 + "</b>"


def _bodies(at: AppTest) -> list[str]:
    return [
        str(element.value)
        for kind in ("markdown", "caption", "warning", "error", "info", "success")
        for element in at.get(kind)
    ]


def _echoed_literally(at: AppTest, payload: str) -> None:
    """``payload`` (the first 40 characters of a long one, which dcsim quotes shortened) is on
    the page only escaped, reading back literally; a long one may instead be refused by length
    without being quoted at all."""
    shown = payload if len(payload) <= 60 else payload[:40]
    bodies = _bodies(at)
    assert not [body for body in bodies if shown in body], "shown raw, as markdown"
    if any(plain(shown) in body for body in bodies):
        return
    assert len(payload) > 60, f"{shown!r} is not on the page"
    assert any("characters" in body for body in bodies), "a long value neither quoted nor refused by length"


FIELDS = {
    # link fields the codec reads, each echoed in its warning
    "shards": lambda value: open_app({"shards": value}),
    "layers": lambda value: open_app({"layers": value}),
    "v": lambda value: open_app({"v": value}),
    "preset": lambda value: open_app({"preset": value}),
    "hyperparameter": lambda value: open_app({"preset": "resnet18", "h.stage_blocks": value}),
    "hyperparameter name": lambda value: open_app({"preset": "resnet18", "h." + value: "1"}),
    # page settings in links
    "mesh (Layout link)": lambda value: open_app({"mesh": value}, "pages/layout.py"),
    "rules (Layout link)": lambda value: open_app({"strategy": "custom", "rules": value}, "pages/layout.py"),
    "strategy (Layout link)": lambda value: open_app({"strategy": value}, "pages/layout.py"),
    "mesh (Checkpoint link)": lambda value: open_app({"mesh": value}, "pages/checkpoint.py"),
    "dtype (Checkpoint link)": lambda value: open_app({"dtype": value}, "pages/checkpoint.py"),
    "opt (Bytes link)": lambda value: open_app({"opt": value}, "pages/bytes.py"),
}


def _typed_mesh(value: str) -> AppTest:
    at = open_app(page="pages/layout.py")
    at.text_input[0].set_value(value).run()
    return at


def _typed_rules(value: str) -> AppTest:
    at = open_app({"strategy": "custom"}, "pages/layout.py")
    at.text_area[0].set_value(f"{value}=None,model\n*/kernel={value}").run()
    return at


def _typed_hyperparameter(value: str) -> AppTest:
    at = open_app({"preset": "resnet18"})
    next(box for box in at.text_input if box.label == "stage_blocks").set_value(value).run()
    return at


def _uploaded(field: str):
    def upload(value: str) -> AppTest:
        at = open_app()
        document = {
            "preset": {"preset": value},
            "overrides": {"preset": "gpt2-small", "overrides": {"num_layers": value}},
            "name": {value: 1},
            "hf model_type": {"model_type": value},
            "hf field": {"model_type": "llama", "vocab_size": value},  # the first field read
        }.get(field, {field: value})
        uploader(at).set_value(("x.json", json.dumps(document).encode(), "application/json")).run()
        return at

    return upload


FIELDS |= {
    "mesh (typed)": _typed_mesh,
    "rules (typed)": _typed_rules,
    "hyperparameter (typed)": _typed_hyperparameter,
    "uploaded preset": _uploaded("preset"),
    "uploaded field value": _uploaded("input_dim"),
    "uploaded field name": _uploaded("name"),
    "uploaded override": _uploaded("overrides"),
    "uploaded Hugging Face model_type": _uploaded("hf model_type"),
    "uploaded Hugging Face field": _uploaded("hf field"),
}


# HTML payloads and a long value in every field; the markdown ones (links, emphasis, directives)
# through one field of each way in (link, typed, uploaded), since one escape serves them all.
MATRIX = [(field, name) for field in sorted(FIELDS) for name in ("script", "img", "long")] + [
    (field, name)
    for field in ("shards", "rules (Layout link)", "mesh (typed)", "hyperparameter (typed)", "uploaded preset")
    for name in ("link", "bold", "directive")
]


# The quick loop sends one payload through each way in (a link, a typed box, an uploaded file) and the
# markdown ones through one field; the whole suite sends the whole matrix.
QUICK = {("shards", "script"), ("mesh (typed)", "img"), ("uploaded field value", "long"), ("shards", "link")}


@pytest.mark.parametrize(
    ("field", "name"),
    [
        pytest.param(field, name, id=f"{field}-{name}", marks=() if (field, name) in QUICK else pytest.mark.slow)
        for field, name in MATRIX
    ],
)
def test_every_echoed_field_shows_markup_as_literal_text(field, name):
    payload = LONG if name == "long" else PAYLOADS[name]
    _echoed_literally(FIELDS[field](payload), payload)


def test_the_check_would_catch_markup_that_got_through():
    at = open_app({"shards": "<img src=x onerror=alert(1)>"})
    at.warning[0].proto.body = "Link: got '<img src=x onerror=alert(1)>'"
    with pytest.raises(AssertionError):
        _echoed_literally(at, "<img src=x onerror=alert(1)>")


# --- in a real browser: no element injected, no dialog --------------------------------------------


@pytest.mark.browser
def test_a_hostile_link_injects_no_element_and_opens_no_dialog(server, page):
    from playwright.sync_api import expect

    from conftest import wait_for_app

    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    query = "&".join(
        [
            f"shards={quote(PAYLOADS['script'])}",
            f"layers={quote(PAYLOADS['img'])}",
            f"preset={quote(PAYLOADS['link'])}",
            f"mesh={quote('<svg onload=alert(1)>')}",
        ]
    )
    page.goto(f"{server}/layout?{query}")
    wait_for_app(page)
    expect(page.get_by_text("<script>alert(1)</script>", exact=False).first).to_be_visible()
    expect(page.get_by_text("<img src=x onerror=alert(1)>", exact=False).first).to_be_visible()
    page.wait_for_timeout(1000)  # time for an injected handler to fire
    injected = page.evaluate(
        """() => ({
            img: document.querySelectorAll('img[src="x"], img[onerror]').length,
            svg: document.querySelectorAll('svg[onload]').length,
            handlers: document.querySelectorAll('[onerror], [onload]').length,
            scripts: [...document.scripts].filter(s => s.textContent.includes('alert(1)')).length,
            links: document.querySelectorAll('a[href^="javascript:"]').length,
        })"""
    )
    assert injected == {"img": 0, "svg": 0, "handlers": 0, "scripts": 0, "links": 0}
    assert dialogs == []
    page.evaluate("() => alert('control')")  # the listener itself works
    assert dialogs == ["control"]


# --- the source: nothing that runs or unpickles what a user sent ------------------------------------

SOURCES = sorted([*ROOT.glob("dcsim/**/*.py"), *ROOT.glob("pages/*.py"), ROOT / "app.py"])
# Regular expressions read from the package's own data files, never from anything a user sent: the
# function that compiles them ("file:function", so an edit above it does not move the allowance) and
# the file they come from (a test of its module checks every row compiles).
SHIPPED_PATTERNS = {"dcsim/quant/names.py:_scheme": "dcsim/quant/names.toml"}
BANNED_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "joblib", "cloudpickle"}


def _findings(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    constants = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    # The function each node is in, the innermost winning (ast.walk reaches outer functions first).
    enclosing = {
        id(inner): function.name
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for inner in ast.walk(function)
    }
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if any(str(name).split(".")[0] in BANNED_MODULES for name in names):
                found.append(f"{where} imports {names}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("eval", "exec", "compile") and isinstance(func, ast.Name):
            found.append(f"{where} calls {name}")
        # st.html / components.html: only on a module-level constant (the frame's static CSS)
        if name == "html" and not (node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in constants):
            found.append(f"{where} calls {name} on something other than a module constant")
        for keyword in node.keywords:
            if keyword.arg in ("unsafe_allow_html", "shell") and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                found.append(f"{where} passes {keyword.arg}")
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "re":
            # regular expressions are the code's own literals, never a user's (users write globs)
            pattern = node.args[0] if node.args else None
            owner = f"{path.relative_to(root)}:{enclosing.get(id(node), '<module>')}"
            shipped = owner in SHIPPED_PATTERNS and (root / SHIPPED_PATTERNS[owner]).is_file()
            if name != "escape" and pattern is not None and not isinstance(pattern, ast.Constant) and not shipped:
                found.append(f"{where} builds a regular expression from {ast.unparse(pattern)}")
    return found


def test_no_eval_exec_pickle_or_raw_html_on_anything_a_user_sent():
    found = [finding for path in SOURCES for finding in _findings(path)]
    assert found == []
    assert len(SOURCES) > 20


def test_the_scan_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nimport streamlit as st\nx = input()\neval(x)\nst.html(x)\n"
        "st.markdown(x, unsafe_allow_html=True)\nimport re\nre.compile(x)\n"
    )
    found = _findings(bad, tmp_path)
    assert [finding.split(" ", 1)[1].split(" ")[0] for finding in found] == [
        "imports",
        "calls",
        "calls",
        "passes",
        "builds",
    ]


# --- temporary checkpoint folders: private, and never named by a user --------------------------------


def test_checkpoint_folders_are_private_temporary_and_named_by_dcsim(monkeypatch):
    seen = []

    def inspect(jobs, **_):
        (job,) = jobs
        folder = Path(job.folder)
        seen.append((folder, stat.S_IMODE(folder.stat().st_mode), json.dumps(job.request)))
        raise measurement.WorkerFailed("stopped by the test")

    monkeypatch.setattr(measurement, "run_workers", inspect)
    hostile = ModelConfig(preset="resnet18", overrides={"stage_blocks": (1, 1, 1, 1)}, seed=7)
    plan = measurement.plan_checkpoint(hostile, MeasurementOptions(mesh="data=2", strategy="fsdp", max_params=10**9))
    with pytest.raises(measurement.CheckpointFailed):
        measurement.run_checkpoint(plan)
    ((folder, mode, request),) = seen
    assert mode == 0o700  # tempfile.mkdtemp: only this user can list, read or write it
    assert folder.parent == Path(tempfile.gettempdir())
    assert folder.name.startswith("dcsim-checkpoint-")
    assert str(folder) not in request  # the child is told no path; it works in its own cwd
    assert not folder.exists()


def test_no_command_line_flag_or_setting_names_a_folder():
    """Every path the CLI opens is a file to read (--config); nothing takes an output path."""
    parser = cli.build_parser()
    subparsers = next(action for action in parser._actions if action.choices and "checkpoint" in action.choices)
    for name, command in subparsers.choices.items():
        for action in command._actions:
            for flag in action.option_strings:
                assert not re.fullmatch(r"--(.+-)?(dir|path|out|output|folder|tmp|workdir)", flag), (name, flag)

"""Rules of the tree that no linter knows: no test hooks in the engine, no import cycles, Streamlit's
private modules named in one place. ruff and mypy run as their own step (``.ci/lint``, ``make lint``),
not inside pytest: a test run should not pay for a cold type check.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_production_modules_hold_no_test_hooks():
    """Faults reach a checkpoint child from ``tests/faults.py``, through the worker's own stage
    events; nothing under dcsim/ exists only for tests."""
    hooked = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "dcsim").rglob("*.py"))
        if re.search(r"TEST_FAULT|[Tt]est-only|fault injected", path.read_text())
    ]
    assert hooked == []


def _dcsim_imports() -> dict[str, set[str]]:
    """Each dcsim module and the dcsim modules it imports, at the top or inside a function
    (``if TYPE_CHECKING:`` blocks aside). Importing ``a.b.c`` runs ``a/b/__init__`` too, unless the
    importer is itself inside ``a.b`` (a package's modules import each other under it)."""
    modules = {}
    for path in (ROOT / "dcsim").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        hidden = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        named = set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                named |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                named |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        imported = set()
        for target in named:
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                enclosing = end < len(parts) and (name == prefix or name.startswith(prefix + "."))
                if prefix in modules and prefix != name and not enclosing:
                    imported.add(prefix)
        graph[name] = imported
    return graph


def test_no_import_cycles():
    """No dcsim module imports, directly or through others, a module that imports it."""
    graph = _dcsim_imports()
    assert len(graph) > 50  # every module was read
    for start in graph:
        stack, seen = list(graph[start]), set()
        while stack:
            module = stack.pop()
            assert module != start, f"{start} imports itself through its imports"
            if module not in seen:
                seen.add(module)
                stack.extend(graph[module])


# Streamlit's public surface: `streamlit` itself (st.*), its components API and the AppTest
# package; anything else (runtime, web, proto, commands, elements, app_test...) is private.
_PRIVATE_STREAMLIT = re.compile(
    r"^\s*(?:from|import)\s+streamlit\.(?!components\.v1\b|testing\.v1\s+import\s+AppTest\b)", re.M
)


def test_only_the_router_workaround_and_its_test_name_private_streamlit_modules():
    naming = sorted(
        str(path.relative_to(ROOT))
        for folder in ("dcsim", "pages", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if _PRIVATE_STREAMLIT.search(path.read_text())
    )
    naming += [name for name in ("app.py",) if _PRIVATE_STREAMLIT.search((ROOT / name).read_text())]
    assert naming == ["dcsim/ui/router.py", "tests/test_router.py"]

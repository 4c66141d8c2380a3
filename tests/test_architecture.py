"""Rules of the tree that no linter knows: no test hooks in the engine, no import cycles, Streamlit's
private modules named in one place. ruff and mypy run as their own step (``.ci/lint``, ``make lint``),
not inside pytest: a test run should not pay for a cold type check.
"""

import ast
import itertools
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


_NAME_TESTS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _names_a_family(node: ast.AST) -> bool:
    """``family``, ``config.family``, ``self.family``, ``vision_family``..."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "family" or name.endswith("_family")


def _spells_a_family(node: ast.AST) -> bool:
    """A family's name written out: a string, a constant in capitals (``zoo_schemas.MULTIMODAL``,
    ``families.ENCODER_DECODERS``), or a collection holding one."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_spells_a_family(element) for element in node.elts)
    if isinstance(node, ast.Starred):
        return _spells_a_family(node.value)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.isupper()


def _family_name_tests(source: str) -> list[tuple[int, str]]:
    """Each comparison in ``source`` (==, !=, in, not in) of a family with a family's name: line, text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, (left, right) in zip(node.ops, itertools.pairwise(operands), strict=True):
            if isinstance(op, _NAME_TESTS) and (
                (_names_a_family(left) and _spells_a_family(right))
                or (_names_a_family(right) and _spells_a_family(left))
            ):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_the_registry_tests_a_familys_name():
    """A question about a family (its KV heads, positions, whether it decodes) is asked of its object
    in ``dcsim.model.registry``, never by comparing ``family == "..."``; what only the Flax side or the
    schemas know (how a family is built, its rules) is a row of a table keyed by the family. Adding
    a family then touches its own module, its rows and the registry, not every module that serves,
    traces or names it (issue 43)."""
    sources = [*(ROOT / "dcsim").rglob("*.py"), *(ROOT / "pages").rglob("*.py"), ROOT / "app.py"]
    assert len(sources) > 50  # every module was read
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted(sources)
        if path.relative_to(ROOT).as_posix() != "dcsim/model/registry.py"
        for line, text in _family_name_tests(path.read_text())
    ]
    assert found == []


def test_the_family_name_check_sees_each_way_of_writing_one():
    source = (
        'family == "moe"\nconfig.family not in ("moe", "jamba")\nfamily in families.DECODING_FAMILIES\n'
        'self.family == MAMBA\n"t5" == family\nentry.family != family\nfamily is None\nkind == "moe"\n'
    )
    assert [line for line, _ in _family_name_tests(source)] == [1, 2, 3, 4, 5]

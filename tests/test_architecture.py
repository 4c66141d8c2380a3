"""Rules of the tree that no linter knows: no test hooks in the engine, no import cycles, Streamlit's
private modules named in one place. ruff and mypy run as their own step (``.ci/lint``, ``make lint``),
not inside pytest: a test run should not pay for a cold type check.
"""

import ast
import itertools
import re
from collections.abc import Mapping, Sequence
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


# dcsim's layers, lowest first (docs/architecture.md, "Layout"). A unit is a package or module under
# dcsim, named without the ``dcsim.`` prefix; a module belongs to the longest unit that holds it, so
# ``links.comparisons`` (a comparison's link, written with ``compare``'s scenarios) sits above
# ``compare`` while the configuration's codec, ``links``, sits below it. A unit may import units of
# lower layers only, never one of its own layer or above; "" is the root ``dcsim/__init__.py``, the
# public API, whose modules are all below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("inputs",),  # checks for what a person supplies
    ("quantities", "shipped", "runtime"),  # sizes and amounts; shipped tables; child processes
    ("model",),
    ("hf", "sharding", "quant"),  # Hugging Face files, layouts, quantised formats: each over model
    ("memory", "checkpoint", "simulate"),
    ("serving", "links"),  # serving reads the memory check's bounds; links, the configuration's codec
    # The checkpoint at cluster scale (memory's state, serving's accelerators); step time and serving
    # speed (FLOPs, bytes, collectives over the catalog's speeds).
    ("checkpoint.plan", "speed"),
    ("compare", "report", "requests"),  # scenarios, tables; each page's settings declared (flags, keys, parsers)
    ("links.comparisons",),
    ("cli", "ui"),
    ("__main__", ""),
)


def _unit_of(module: str, units: Sequence[str]) -> str:
    """The longest unit holding ``module`` (``dcsim.links.comparisons`` -> ``links.comparisons``); a
    module no unit holds is its own, undeclared, unit."""
    name = module.removeprefix("dcsim").removeprefix(".")
    holding = [unit for unit in units if name == unit or (unit and name.startswith(unit + "."))]
    return max(holding, key=len) if holding else name


def _upward_imports(graph: Mapping[str, set[str]], layers: Sequence[Sequence[str]]) -> list[str]:
    """Each import in ``graph`` (module -> modules it imports) of a unit in the importer's own layer
    or above: ``"a -> b (a.x imports b.y)"``, once a pair of units. An import of the root package
    ``dcsim`` itself is left out: ``from dcsim import inputs`` names it, and Python runs it before any
    of its modules whoever imports them, so it says nothing of layers."""
    rank = {unit: level for level, layer in enumerate(layers) for unit in layer}
    units = list(rank)
    found: dict[tuple[str, str], str] = {}
    for importer, imported in sorted(graph.items()):
        source = _unit_of(importer, units)
        for target_module in sorted(imported):
            target = _unit_of(target_module, units)
            if target_module == "dcsim" or target == source:
                continue
            if source not in rank or target not in rank or rank[target] >= rank[source]:
                found.setdefault((source, target), f"{source} -> {target} ({importer} imports {target_module})")
    return list(found.values())


def test_dcsim_packages_import_only_downward_in_the_declared_layers():
    """Packages import only lower layers, so no two packages import each other (a cycle the
    module-level check misses when it runs through different modules: ``model.optimizer`` imported
    ``sharding.payload`` while ``sharding.layout`` imported ``model``, issue 43)."""
    graph = _dcsim_imports()
    declared = {unit for layer in LAYERS for unit in layer}
    assert {_unit_of(module, list(declared)) for module in graph} <= declared  # every module has a layer
    assert _upward_imports(graph, LAYERS) == []


def test_the_layer_check_sees_a_package_level_cycle():
    """Two packages that import each other through different modules, with no module-level cycle:
    whichever order is declared, one import goes upward."""
    graph = {"dcsim.a.x": {"dcsim.b.y"}, "dcsim.b.z": {"dcsim.a.w"}, "dcsim.a.w": set(), "dcsim.b.y": set()}
    assert _upward_imports(graph, [("a",), ("b",)]) == ["a -> b (dcsim.a.x imports dcsim.b.y)"]
    assert _upward_imports(graph, [("b",), ("a",)]) == ["b -> a (dcsim.b.z imports dcsim.a.w)"]
    assert _upward_imports(graph, [("a", "b")]) == [
        "a -> b (dcsim.a.x imports dcsim.b.y)",
        "b -> a (dcsim.b.z imports dcsim.a.w)",
    ]
    # a longer unit is its own: links.comparisons above compare above links is not a cycle
    codec = {"dcsim.links": set(), "dcsim.compare": {"dcsim.links"}, "dcsim.links.comparisons": {"dcsim.compare"}}
    assert _upward_imports(codec, [("links",), ("compare",), ("links.comparisons",)]) == []
    assert _upward_imports({"dcsim.m": {"dcsim"}, "dcsim": set()}, [("m",), ("",)]) == []
    # a package no layer declares is reported, whichever way it imports
    assert _upward_imports({"dcsim.new.x": {"dcsim.m"}, "dcsim.m": set()}, [("m",)]) == [
        "new.x -> m (dcsim.new.x imports dcsim.m)"
    ]


def test_every_package_and_layer_has_a_row_in_the_architecture_doc():
    """docs/architecture.md's table names every package under dcsim/ and every top-level module of
    the layers, so a new package cannot arrive undocumented."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    packages = sorted(
        f"dcsim/{path.parent.relative_to(ROOT / 'dcsim').as_posix()}/"
        for path in (ROOT / "dcsim").rglob("__init__.py")
        if path.parent != ROOT / "dcsim"
    )
    modules = [f"dcsim/{unit}.py" for layer in LAYERS for unit in layer if (ROOT / "dcsim" / f"{unit}.py").is_file()]
    missing = [name for name in [*packages, *modules] if not any(f"`{name}`" in row for row in rows)]
    assert missing == []


MAX_MODULE_LINES = 600  # issue 43: a module past this is two subjects, or one that wants a package


def test_no_module_in_dcsim_or_pages_is_over_600_lines():
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for folder in ("dcsim", "pages")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


# Streamlit's public surface: `streamlit` itself (st.*), its components API and the AppTest
# package; anything else (runtime, web, proto, commands, elements, app_test...) is private.
_PRIVATE_STREAMLIT = re.compile(
    r"^\s*(?:from|import)\s+streamlit\.(?!components\.v1\b|testing\.v1\s+import\s+AppTest\b)", re.M
)


def test_only_the_router_workaround_its_test_and_the_harness_name_private_streamlit_modules():
    naming = sorted(
        str(path.relative_to(ROOT))
        for folder in ("dcsim", "pages", "tests")
        for path in (ROOT / folder).rglob("*.py")
        if _PRIVATE_STREAMLIT.search(path.read_text())
    )
    naming += [name for name in ("app.py",) if _PRIVATE_STREAMLIT.search((ROOT / name).read_text())]
    # conftest.py keeps AppTest's scan of the installed packages for component manifests, which
    # AppTest repeats for each new test app (a test-harness cost; no page or dcsim module uses it).
    assert naming == ["dcsim/ui/router.py", "tests/conftest.py", "tests/test_router.py"]


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

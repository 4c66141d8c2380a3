"""Scenarios side by side: several named configurations, each with its shard count and dtype.

Teams compare the model they have with the one they want, at several shard counts, against a
per-device budget. A ``Comparison`` holds up to ``MAX_SCENARIOS`` named ``Scenario``s, which one is
the baseline, and the budget question (``dcsim.sharding.budget``). It travels three ways, each checked here:

- **JSON** (``"format": "dcsim.comparison"``, version 1): each scenario is its configuration's
  JSON object (``ModelConfig.to_dict``) plus ``name`` and ``dtype``; unknown keys are refused by
  name; at most ``MAX_COMPARISON_BYTES``.
- **a link**: ``cv=1`` (this encoding's version), one ``s=`` per scenario, ``base`` and the budget
  keys. A scenario token is ``DTYPE~KEY=VALUE~...~n=NAME``: the fields are the configuration link's
  own (``dcsim.links``: ``shards``, ``layers``, ``preset``, ``h.<name>``...; defaults left out), so
  one codec reads a configuration wherever it appears. The name comes last and may hold anything,
  ``~`` included. Decoding never raises: each bad scenario or field is reported and dropped or
  defaulted, and the good ones are kept.
- **tables** (``comparison_frame``, ``sweep_frame``) for the page, the CLI and CSV.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any
from urllib.parse import urlencode

import pandas as pd

from dcsim import links
from dcsim.inputs import as_int, json_kind, load_json, reject_unknown, show
from dcsim.model import optimizer, presets
from dcsim.model.config import CONFIG_FORMAT, CONFIG_VERSION, MODEL_KEYS, ModelConfig
from dcsim.model.count import ParamReport
from dcsim.report import units
from dcsim.sharding import budget as budgets
from dcsim.sharding import payload, shares

MAX_SCENARIOS = 8
MAX_NAME_CHARS = 64
MAX_COMPARISON_BYTES = 256 * 1024  # eight configurations of 256 distinct layers each fit
COMPARISON_FORMAT = "dcsim.comparison"
COMPARISON_VERSION = 1

# Link keys. `v`, `input_dim`, `shards`... stay the session configuration's (dcsim.links).
VERSION_KEY = "cv"
SCENARIO_KEY = "s"
BASELINE_KEY = "base"
BUDGET_KEY = "budget"
UNIT_KEY = "bunit"
TRAINING_KEY = "btrain"
STRATEGY_KEY = "bstrat"
KEYS = (VERSION_KEY, SCENARIO_KEY, BASELINE_KEY, BUDGET_KEY, UNIT_KEY, TRAINING_KEY, STRATEGY_KEY)
NO_TRAINING = "none"
MAX_LINK_CHARS = 6000  # the whole query string: well under the 8 KB that common proxies pass
# One token: the longest layer token, the preset's hyperparameters, a name and the separators.
MAX_TOKEN_CHARS = links.MAX_LAYERS_CHARS + 1024
TOKEN_SEPARATOR = "~"
NAME_FIELD = "n="
_CONFIG_DEFAULTS = links.encode(ModelConfig())


def check_name(name: Any) -> str:
    """A scenario's name: text, stripped, 1 to 64 printable characters (any script; no control
    or formatting characters such as a right-to-left override)."""
    if not isinstance(name, str):
        raise TypeError(f"a scenario name must be text, got {type(name).__name__} {show(name)}")
    stripped = name.strip()
    if not stripped:
        raise ValueError("a scenario name must not be empty")
    if len(stripped) > MAX_NAME_CHARS:
        raise ValueError(f"a scenario name may be at most {MAX_NAME_CHARS} characters, got {len(stripped):,}")
    if not stripped.isprintable():
        raise ValueError(f"a scenario name must be printable text (no control characters), got {show(stripped)}")
    return stripped


def check_dtype(dtype: Any) -> str:
    if not isinstance(dtype, str) or dtype not in payload.RAW_DTYPES:
        raise ValueError(f"a scenario's `dtype` must be one of {', '.join(payload.RAW_DTYPES)}, got {show(dtype)}")
    return dtype


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scenario:
    """One named configuration in a comparison.

    Attributes:
      name: shown as text only, never as markdown or HTML (see ``check_name``).
      config: the model; its ``num_shards`` is this scenario's shard count.
      dtype: the storage dtype of its raw payload and of a budget in bytes.
    """

    name: str
    config: ModelConfig
    dtype: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_name(self.name))
        if not isinstance(self.config, ModelConfig):
            raise TypeError(f"a scenario's config must be a ModelConfig, got {type(self.config).__name__}")
        object.__setattr__(self, "dtype", check_dtype(self.dtype))
        # One dtype per scenario: its configuration carries it too, as every configuration does.
        object.__setattr__(self, "config", dataclasses.replace(self.config, dtype=self.dtype))

    @property
    def num_shards(self) -> int:
        return self.config.num_shards

    def to_dict(self) -> dict[str, Any]:
        data = self.config.to_dict()
        del data["format"], data["version"]
        return {"name": self.name, "dtype": self.dtype, **data}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Comparison:
    """Named scenarios, the baseline (a 1-based scenario number, as the table numbers them) and
    the budget question. Names are unique; at most ``MAX_SCENARIOS`` scenarios; none is allowed
    (an empty comparison is where a page starts)."""

    scenarios: tuple[Scenario, ...] = ()
    baseline: int = 1
    budget: budgets.Budget = dataclasses.field(default_factory=budgets.Budget)

    def __post_init__(self) -> None:
        if isinstance(self.scenarios, (str, bytes)) or not isinstance(self.scenarios, (list, tuple)):
            raise TypeError(f"`scenarios` must be a list of scenarios, got {type(self.scenarios).__name__}")
        scenarios = tuple(self.scenarios)
        if len(scenarios) > MAX_SCENARIOS:
            raise ValueError(f"a comparison may hold at most {MAX_SCENARIOS} scenarios, got {len(scenarios):,}")
        seen: set[str] = set()
        for index, scenario in enumerate(scenarios, start=1):
            if not isinstance(scenario, Scenario):
                raise TypeError(f"scenario {index} must be a Scenario, got {type(scenario).__name__}")
            if scenario.name in seen:
                raise ValueError(f"scenario names must differ; {show(scenario.name)} appears twice")
            seen.add(scenario.name)
        object.__setattr__(self, "scenarios", scenarios)
        object.__setattr__(
            self, "baseline", as_int(self.baseline, "baseline", minimum=1, maximum=max(1, len(scenarios)))
        )
        if not isinstance(self.budget, budgets.Budget):
            raise TypeError(f"`budget` must be a Budget, got {type(self.budget).__name__}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(scenario.name for scenario in self.scenarios)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": COMPARISON_FORMAT,
            "version": COMPARISON_VERSION,
            "baseline": self.baseline,
            "budget": dataclasses.asdict(self.budget),
            "scenarios": [scenario.to_dict() for scenario in self.scenarios],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> Comparison:
        if not isinstance(data, dict):
            raise TypeError(f"a comparison must be a JSON object, got {json_kind(data)}")
        reject_unknown(data, ("format", "version", "baseline", "budget", "scenarios"), "comparison")
        if data.get("format") != COMPARISON_FORMAT:
            raise ValueError(
                f"`format` must be {COMPARISON_FORMAT!r} for a dcsim comparison, got {show(data.get('format'))}"
            )
        if "version" in data:
            version = as_int(data["version"], "version")
            if version > COMPARISON_VERSION:
                raise ValueError(
                    f"this comparison has version {version}, newer than this dcsim reads (up to "
                    f"{COMPARISON_VERSION}); upgrade dcsim to open it"
                )
        raw = data.get("scenarios", [])
        if not isinstance(raw, list):
            raise TypeError(f"`scenarios` must be a JSON array, got {json_kind(raw)}")
        if len(raw) > MAX_SCENARIOS:
            raise ValueError(f"a comparison may hold at most {MAX_SCENARIOS} scenarios, got {len(raw):,}")
        scenarios = []
        for index, item in enumerate(raw, start=1):
            try:
                scenarios.append(_scenario_from_dict(item))
            except (TypeError, ValueError) as err:
                raise type(err)(f"scenario {index}: {err}") from None
        return cls(
            scenarios=tuple(scenarios), baseline=data.get("baseline", 1), budget=_budget_from_dict(data.get("budget"))
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Comparison:
        """Parse and validate comparison JSON (at most MAX_COMPARISON_BYTES, duplicate keys refused)."""
        data = load_json(text, "comparison", MAX_COMPARISON_BYTES, parse_constant=_no_constant)
        return cls.from_dict(data)


# A scenario's JSON is its name and its configuration's fields (a file's model has an "origin").
_SCENARIO_KEYS = ("name", *MODEL_KEYS)


def _scenario_from_dict(item: Any) -> Scenario:
    if not isinstance(item, dict):
        raise TypeError(f'must be an object like {{"name": "base", "dtype": "float32", ...}}, got {json_kind(item)}')
    reject_unknown(item, _SCENARIO_KEYS, "scenario")
    if "name" not in item:
        raise ValueError("needs a `name`")
    fields = {key: value for key, value in item.items() if key not in ("name", "dtype")}
    config = ModelConfig.from_dict({"format": CONFIG_FORMAT, "version": CONFIG_VERSION, **fields})
    return Scenario(name=item["name"], config=config, dtype=item.get("dtype", "float32"))


_BUDGET_KEYS = ("amount", "unit", "training", "strategy")


def _budget_from_dict(item: Any) -> budgets.Budget:
    if item is None:
        return budgets.Budget()
    if not isinstance(item, dict):
        raise TypeError(
            f'`budget` must be an object like {{"amount": 85899345920, "unit": "bytes"}}, got {json_kind(item)}'
        )
    reject_unknown(item, _BUDGET_KEYS, "budget")
    try:
        return budgets.Budget(**item)
    except (TypeError, ValueError) as err:
        raise type(err)(f"`budget`: {err}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def unique_name(wanted: str, taken: Sequence[str]) -> str:
    """``wanted`` cut to the name limit, or with `` (2)``, `` (3)``... when it is taken."""
    base = wanted.strip()[:MAX_NAME_CHARS].strip() or "Scenario"
    if base not in taken:
        return base
    for number in range(2, MAX_SCENARIOS + len(taken) + 2):
        suffix = f" ({number})"
        name = base[: MAX_NAME_CHARS - len(suffix)].rstrip() + suffix
        if name not in taken:
            return name
    raise ValueError(f"no free name like {show(base)}")  # unreachable: more candidates than names


def model_text(config: ModelConfig) -> str:
    """The model in one line: ``llama2-70b (num_layers=40)``, a file's model under its own name
    (``GemmaForCausalLM (gemma, from config.json)``), or ``Dense 784 → 512x2_10``."""
    if config.origin is not None:
        return config.origin.title
    if config.preset is not None:
        changed = ", ".join(f"{name}={presets.value_text(value)}" for name, value in config.overrides)
        return f"{config.preset} ({changed})" if changed else config.preset
    return f"Dense {config.input_dim:,} → {links.encode_layers(config.layers)}"


# --- tables -------------------------------------------------------------------------------------


def _ratio(value: int, base: int) -> Fraction:
    return Fraction(value, base)  # a baseline's total and raw bytes are at least 1


def comparison_frame(comparison: Comparison, reports: Sequence[ParamReport]) -> pd.DataFrame:
    """One row per scenario, in order: ``number``, ``name``, ``is_baseline``, ``model``,
    ``num_shards``, ``dtype``, ``total_params``, ``ideal_share`` (float) and ``ideal_share_text``
    (exact), ``raw_bytes`` (in the scenario's dtype), ``raw_<dtype>_bytes`` for every dtype, and
    against the baseline: ``params_vs_baseline`` and ``raw_bytes_vs_baseline`` (exact int
    differences), ``params_ratio``/``raw_bytes_ratio`` (floats) with their exact ``..._text``,
    and ``ideal_share_vs_baseline_text`` (the exact difference of the shares)."""
    if len(reports) != len(comparison.scenarios):
        raise ValueError(
            f"one report per scenario is needed: {len(comparison.scenarios)} scenarios, {len(reports)} reports"
        )
    totals = [report.total_params for report in reports]
    share_of = [
        shares.ideal_share(total, s.num_shards).exact for total, s in zip(totals, comparison.scenarios, strict=True)
    ]
    raw = [payload.raw_bytes(total, s.dtype) for total, s in zip(totals, comparison.scenarios, strict=True)]
    base = comparison.baseline - 1
    rows: dict[str, Any] = {
        "number": list(range(1, len(totals) + 1)),
        "name": list(comparison.names),
        "is_baseline": [index == base for index in range(len(totals))],
        "model": [model_text(s.config) for s in comparison.scenarios],
        "num_shards": [s.num_shards for s in comparison.scenarios],
        "dtype": [s.dtype for s in comparison.scenarios],
        "total_params": totals,
        "ideal_share": [float(share) for share in share_of],
        "ideal_share_text": [units.share(share) for share in share_of],
        "raw_bytes": raw,
        **{f"raw_{dtype}_bytes": [payload.raw_bytes(total, dtype) for total in totals] for dtype in payload.RAW_DTYPES},
    }
    if totals:
        params_ratio = [_ratio(total, totals[base]) for total in totals]
        bytes_ratio = [_ratio(value, raw[base]) for value in raw]
        rows |= {
            "params_vs_baseline": [total - totals[base] for total in totals],
            "params_ratio": [float(r) for r in params_ratio],
            "params_ratio_text": [units.share(r) for r in params_ratio],
            "raw_bytes_vs_baseline": [value - raw[base] for value in raw],
            "raw_bytes_ratio": [float(r) for r in bytes_ratio],
            "raw_bytes_ratio_text": [units.share(r) for r in bytes_ratio],
            "ideal_share_vs_baseline_text": [units.share(share - share_of[base]) for share in share_of],
        }
    else:
        rows |= {name: [] for name in _DIFF_COLUMNS}
    frame = pd.DataFrame(rows)
    for name in INT_COLUMNS:
        frame[name] = pd.array(frame[name].tolist(), dtype="int64")
    return frame


_DIFF_COLUMNS = (
    "params_vs_baseline",
    "params_ratio",
    "params_ratio_text",
    "raw_bytes_vs_baseline",
    "raw_bytes_ratio",
    "raw_bytes_ratio_text",
    "ideal_share_vs_baseline_text",
)
INT_COLUMNS = (
    "number",
    "num_shards",
    "total_params",
    "raw_bytes",
    *(f"raw_{dtype}_bytes" for dtype in payload.RAW_DTYPES),
    "params_vs_baseline",
    "raw_bytes_vs_baseline",
)


def sweep_frame(comparison: Comparison, reports: Sequence[ParamReport], up_to: int = 4096) -> pd.DataFrame:
    """The ideal share of every scenario at every power of two up to ``up_to`` and at its own
    shard count: ``name``, ``num_shards``, ``ideal_share`` (float) and ``ideal_share_text`` (exact)."""
    rows: dict[str, list[Any]] = {"name": [], "num_shards": [], "ideal_share": [], "ideal_share_text": []}
    for scenario, report in zip(comparison.scenarios, reports, strict=True):
        counts = sorted({*shares.powers_of_two(up_to), scenario.num_shards})
        for share in shares.sweep(report.total_params, counts):
            rows["name"].append(scenario.name)
            rows["num_shards"].append(share.num_shards)
            rows["ideal_share"].append(share.value)
            rows["ideal_share_text"].append(units.share(share.exact))
    frame = pd.DataFrame(rows)
    frame["num_shards"] = pd.array(rows["num_shards"], dtype="int64")
    return frame


def budget_frame(comparison: Comparison, answers: Sequence[budgets.Answer]) -> pd.DataFrame:
    """One row per scenario: ``name``, ``need`` (what must fit in all, in the budget's unit),
    ``ideal_shards`` (ideal share, an average), ``ideal_share_text``, ``devices`` (real layout,
    JAX's sharding rules; missing when no N up to 4,096 fits), ``per_device``, ``larger_searched``
    (how many N above the answer were searched), ``larger_that_fit`` and ``larger_that_fail`` (how
    many of them fit and do not), and ``summary`` (``dcsim.sharding.budget.summary``: the answer in words)."""
    budget = comparison.budget
    return pd.DataFrame(
        {
            "name": list(comparison.names),
            "need": pd.array([a.need for a in answers], dtype="int64"),
            "ideal_shards": pd.array([a.ideal_shards for a in answers], dtype="int64"),
            "ideal_share_text": [units.share(a.ideal_share) for a in answers],
            "devices": pd.array([a.devices for a in answers], dtype="Int64"),
            "per_device": pd.array([a.per_device for a in answers], dtype="Int64"),
            "larger_searched": pd.array(
                [0 if a.devices is None else a.searched - a.devices for a in answers], dtype="int64"
            ),
            "larger_that_fit": pd.array([len(a.fits_above) for a in answers], dtype="int64"),
            "larger_that_fail": pd.array([len(a.fails_above) for a in answers], dtype="int64"),
            "summary": [budgets.summary(a, budget) for a in answers],
        }
    )


def held_frame(comparison: Comparison, answers: Sequence[budgets.Answer]) -> pd.DataFrame:
    """What the fullest device holds under the real layout at the device counts worth showing
    (``dcsim.sharding.budget.shown_counts``: the counts a team buys, the answer, the ideal share's count),
    per scenario: ``name``, ``devices``, ``mesh``, ``held`` (float, missing where the layout is
    impossible), ``held_text`` (exact), ``verdict`` (fits the budget, over the budget, cannot be
    laid out), ``is_answer`` (the fewest devices that fit), ``on_trend`` (a power of two: the
    line a reader follows) and ``note`` (why the count is shown when a team would not buy it)."""
    budget = comparison.budget
    rows: dict[str, list[Any]] = {
        key: [] for key in ("name", "devices", "mesh", "held", "held_text", "verdict", "is_answer", "on_trend", "note")
    }
    for scenario, found in zip(comparison.scenarios, answers, strict=True):
        for devices in budgets.shown_counts(found):
            held = found.held[devices - 1]
            notes = [
                *(["the fewest devices that fit"] if devices == found.devices else []),
                *(["the ideal share's shard count"] if devices == found.ideal_shards else []),
            ]
            rows["name"].append(scenario.name)
            rows["devices"].append(devices)
            rows["mesh"].append(f"{budget.mesh_axis}={devices}")
            rows["held"].append(None if held is None else float(held))
            rows["held_text"].append("cannot be laid out" if held is None else budgets.amount_text(held, budget.unit))
            rows["verdict"].append(
                BUDGET_VERDICTS[2] if held is None else BUDGET_VERDICTS[0 if held <= budget.amount else 1]
            )
            rows["is_answer"].append(devices == found.devices)
            rows["on_trend"].append(devices & (devices - 1) == 0)
            rows["note"].append("; ".join(notes))
    frame = pd.DataFrame(rows)
    frame["devices"] = pd.array(rows["devices"], dtype="int64")
    frame["held"] = frame["held"].astype(float)
    return frame


# What a device count is against the budget, in the chart's legend and tooltips.
BUDGET_VERDICTS = ("Fits the budget", "Over the budget", "Cannot be laid out")


def comparison_record(
    comparison: Comparison, reports: Sequence[ParamReport], answers: Sequence[budgets.Answer] | None = None
) -> dict[str, Any]:
    """The comparison and its table as one JSON-ready object (``comparison``, ``table``, and
    ``budget_answers`` when given); every count an exact int."""
    table = comparison_frame(comparison, reports)
    record: dict[str, Any] = {
        "comparison": comparison.to_dict(),
        "table": [_plain(row) for row in table.to_dict(orient="records")],
    }
    if answers is not None:
        record["budget_answers"] = [
            {
                "name": scenario.name,
                "budget": comparison.budget.amount,
                "unit": comparison.budget.unit,
                "holds": comparison.budget.holds,
                "need": a.need,
                "ideal_shards": a.ideal_shards,
                "ideal_share_fraction": str(a.ideal_share),
                "devices": a.devices,
                "mesh": None if a.devices is None else f"{comparison.budget.mesh_axis}={a.devices}",
                "strategy": comparison.budget.strategy,
                "per_device": a.per_device,
                "larger_device_counts_that_fail": list(a.fails_above),
                "larger_device_counts_that_fit": list(a.fits_above),
                "summary": budgets.summary(a, comparison.budget),
                "num_impossible_device_counts": a.num_impossible,
            }
            for scenario, a in zip(comparison.scenarios, answers, strict=True)
        ]
    return record


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A table row with NumPy scalars as Python ones, so ``json.dumps`` takes it."""
    return {key: value.item() if hasattr(value, "item") else value for key, value in row.items()}


# --- the link -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decoded:
    """What a comparison link described, and one sentence per thing it got wrong."""

    comparison: Comparison
    problems: tuple[str, ...] = ()


def scenario_token(scenario: Scenario) -> str:
    """``DTYPE~KEY=VALUE~...~n=NAME``: the configuration link's fields, defaults left out."""
    fields = [
        f"{key}={value}"
        for key, value in links.encode(scenario.config).items()
        if key not in (links.VERSION_KEY, links.DTYPE_KEY) and (key == "shards" or _CONFIG_DEFAULTS.get(key) != value)
    ]
    return TOKEN_SEPARATOR.join([scenario.dtype, *fields, NAME_FIELD + scenario.name])


def encode(comparison: Comparison) -> dict[str, str | list[str]]:
    """The query parameters of a comparison: ``cv``, one ``s`` per scenario, ``base``, budget."""
    params: dict[str, str | list[str]] = {VERSION_KEY: str(COMPARISON_VERSION)}
    if comparison.scenarios:
        params[SCENARIO_KEY] = [scenario_token(scenario) for scenario in comparison.scenarios]
        params[BASELINE_KEY] = str(comparison.baseline)
    budget = comparison.budget
    params |= {
        BUDGET_KEY: str(budget.amount),
        UNIT_KEY: budget.unit,
        TRAINING_KEY: budget.training or NO_TRAINING,
        STRATEGY_KEY: budget.strategy,
    }
    return params


def query_string(params: Mapping[str, str | list[str]]) -> str:
    return urlencode(params, doseq=True)


def fits_in_link(query: str) -> bool:
    return len(query) <= MAX_LINK_CHARS


def decode_scenario(token: str, position: int) -> tuple[Scenario | None, list[str]]:
    """One ``s=`` token as a scenario, and what was wrong with it. Never raises.

    A bad name or dtype is replaced (``Scenario 2``, float32) and a bad configuration field takes
    its default, each with a sentence; a token that is not a scenario at all is dropped.
    """
    where = f"Link: scenario {position}"
    if len(token) > MAX_TOKEN_CHARS:
        return None, [f"{where} is {len(token):,} characters, more than the {MAX_TOKEN_CHARS:,} one may have; dropped."]
    parts = token.split(TOKEN_SEPARATOR)
    name_at = next((index for index, part in enumerate(parts) if index and part.startswith(NAME_FIELD)), None)
    if len(parts) < 2 or name_at is None:
        return None, [f"{where} is not DTYPE~KEY=VALUE~…~n=NAME: {show(token)}; dropped."]
    problems: list[str] = []
    name_text = TOKEN_SEPARATOR.join(parts[name_at:])[len(NAME_FIELD) :]
    try:
        name = check_name(name_text)
    except (TypeError, ValueError) as err:
        name = f"Scenario {position}"
        problems.append(f"{where}: {err}; calling it {name}.")
    where = f"Link: scenario {position} ({name})"
    try:
        dtype = check_dtype(parts[0])
    except ValueError as err:
        dtype = "float32"
        problems.append(f"{where}: {err}; using float32.")
    params: dict[str, list[str]] = {}
    valid = set(links.KEYS) - {links.VERSION_KEY, links.DTYPE_KEY}  # the token's first part is its dtype
    for field in parts[1:name_at]:
        key, equals, value = field.partition("=")
        if not equals or not (key in valid or key.startswith(links.HPARAM_PREFIX)):
            problems.append(
                f"{where}: {show(field)} is not a configuration field (KEY=VALUE with KEY one of "
                f"{', '.join(sorted(valid))} or h.<name>); ignoring it."
            )
            continue
        params.setdefault(key, []).append(value)
    decoded = links.decode(params)
    problems += [f"{where}: {problem.removeprefix('Link: ')}" for problem in decoded.problems]
    return Scenario(name=name, config=decoded.config, dtype=dtype), problems


def decode(params: Mapping[str, Sequence[str]]) -> Decoded:
    """Read a comparison from query parameters (each key with all its values). Never raises.

    Keys other than the comparison's are ignored (the session's configuration shares the query
    string). Scenarios past ``MAX_SCENARIOS`` are dropped, a repeated name gets `` (2)``, a bad
    baseline is the first scenario, and each bad budget field takes its default; each with a
    sentence saying so.
    """
    problems: list[str] = []
    default = budgets.Budget()
    version, problem = links.read_version(params, VERSION_KEY, COMPARISON_VERSION, "comparison link")
    if problem:
        problems.append(problem)
    if version > COMPARISON_VERSION:
        return Decoded(
            comparison=Comparison(),
            problems=(
                f"This comparison link was made by a newer dcsim (comparison link version {version:,}; "
                f"this one reads up to version {COMPARISON_VERSION}). No scenarios were opened: ask for "
                "the comparison JSON, or open the link where it was made.",
            ),
        )
    tokens = list(params.get(SCENARIO_KEY, ()))
    if len(tokens) > MAX_SCENARIOS:
        problems.append(
            f"Link: {len(tokens):,} scenarios, more than the {MAX_SCENARIOS} a comparison may hold; "
            f"keeping the first {MAX_SCENARIOS}."
        )
        tokens = tokens[:MAX_SCENARIOS]
    scenarios: list[Scenario] = []
    for position, token in enumerate(tokens, start=1):
        scenario, found = decode_scenario(token, position)
        problems += found
        if scenario is None:
            continue
        taken = [s.name for s in scenarios]
        if scenario.name in taken:
            renamed = unique_name(scenario.name, taken)
            problems.append(
                f"Link: scenario {position}: the name {show(scenario.name)} is taken; calling it {show(renamed)}."
            )
            scenario = dataclasses.replace(scenario, name=renamed)
        scenarios.append(scenario)

    baseline = 1
    if BASELINE_KEY in params:
        try:
            baseline = as_int(
                int(_digits(links.single(params, BASELINE_KEY), BASELINE_KEY)),
                BASELINE_KEY,
                maximum=max(1, len(scenarios)),
            )
        except (TypeError, ValueError) as err:
            problems.append(f"Link: {err}; using scenario 1 as the baseline.")

    fields: dict[str, Any] = {}
    readers = (
        (
            BUDGET_KEY,
            "amount",
            lambda text: budgets.check_amount(int(_digits(text, BUDGET_KEY)), shown=text),
            default.amount_text,
        ),
        (UNIT_KEY, "unit", _choice(budgets.BUDGET_UNITS, UNIT_KEY), default.unit),
        (TRAINING_KEY, "training", _training, NO_TRAINING),
        (STRATEGY_KEY, "strategy", _choice(budgets.BUDGET_STRATEGIES, STRATEGY_KEY), default.strategy),
    )
    for key, field, read, shown_default in readers:
        if key not in params:
            continue
        try:
            fields[field] = read(links.single(params, key))
        except (TypeError, ValueError) as err:
            problems.append(f"Link: {err}; using the default {shown_default}.")
    return Decoded(
        comparison=Comparison(scenarios=tuple(scenarios), baseline=baseline, budget=budgets.Budget(**fields)),
        problems=tuple(problems),
    )


def _digits(text: str, key: str) -> str:
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"`{key}` must be a whole number written in digits, got {show(text)}")
    return text


def _choice(choices: tuple[str, ...], key: str):
    def read(text: str) -> str:
        if text not in choices:
            raise ValueError(f"`{key}` must be one of {', '.join(choices)}, got {show(text)}")
        return text

    return read


def _training(text: str) -> str | None:
    if text == NO_TRAINING:
        return None
    if text not in optimizer.OPTIMIZERS:
        raise ValueError(
            f"`{TRAINING_KEY}` must be {NO_TRAINING} or an optimizer ({', '.join(optimizer.OPTIMIZER_NAMES)}), "
            f"got {show(text)}"
        )
    return text

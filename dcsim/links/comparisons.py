"""A comparison's link: ``cv=2`` (this encoding's version; a ``cv=1`` link's ``btrain=sgd`` meant SGD with
momentum, today's ``momentum``), one ``s=`` per scenario, ``base`` and the
budget keys. A scenario token is ``DTYPE~KEY=VALUE~...~n=NAME``: its fields are the configuration
link's own (``dcsim.links``: ``shards``, ``layers``, ``preset``, ``h.<name>``...; defaults left
out), so one codec reads a configuration wherever it appears. A scenario's training step adds the
Memory page's ``seq``, ``mb``, ``remat``, ``attn``; its run on an accelerator the Serving page's
``device`` and the timing request's ``dph``, ``tokens``, ``price``, ``mbs`` (``dcsim.requests.timing``;
defaults left out), so a link without them opens as it always did. The name comes last and may hold
anything, ``~`` included. Decoding never raises: each bad scenario or field is reported and dropped
or defaulted, and the good ones are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from dcsim import compare, links
from dcsim.compare import (
    COMPARISON_VERSION,
    MAX_SCENARIOS,
    NO_TRAINING,
    STEP_FIELDS,
    TIME_FIELDS,
    Comparison,
    Scenario,
    Timing,
    check_dtype,
    check_name,
    check_step_field,
    check_weights,
    step_of,
    training_of_version,
    unique_name,
)
from dcsim.inputs import as_int, number_from_text, show
from dcsim.memory import budget as budgets
from dcsim.memory.step import Step, check_for_model
from dcsim.model import optimizer
from dcsim.model.config import ModelConfig
from dcsim.requests.serving import SERVING
from dcsim.requests.timing import TIMING

# Link keys. `v`, `input_dim`, `shards`... stay the session configuration's (dcsim.links).
VERSION_KEY = "cv"
SCENARIO_KEY = "s"
BASELINE_KEY = "base"
BUDGET_KEY = "budget"
UNIT_KEY = "bunit"
TRAINING_KEY = "btrain"
STRATEGY_KEY = "bstrat"
KEYS = (VERSION_KEY, SCENARIO_KEY, BASELINE_KEY, BUDGET_KEY, UNIT_KEY, TRAINING_KEY, STRATEGY_KEY)
MAX_LINK_CHARS = 6000  # the whole query string: well under the 8 KB that common proxies pass
# One token: the longest layer token, the preset's hyperparameters, a name and the separators.
MAX_TOKEN_CHARS = links.MAX_LAYERS_CHARS + 1024
TOKEN_SEPARATOR = "~"
NAME_FIELD = "n="
WEIGHTS_FIELD = "weights"  # a scenario's weight format (dcsim.quant.formats), beside its configuration
# A scenario's training step: ``seq=``, ``mb=``, ``remat=``, ``attn=`` (the Memory page's link keys).
STEP_LINK_FIELDS = {field: key for key, field in STEP_FIELDS.items()}
_STEP_DEFAULTS = {key: field.default for key, field in Step.__dataclass_fields__.items() if key in STEP_FIELDS}
_CONFIG_DEFAULTS = links.encode(ModelConfig())
# A scenario's run: ``device=``, ``dph=``, ``tokens=``, ``price=``, ``mbs=`` (by ``Timing`` field).
TIME_LINK_FIELDS = {field: key for key, field in TIME_FIELDS.items()}
_TIME_DEFAULTS = {key: field.default for key, field in Timing.__dataclass_fields__.items() if key in TIME_FIELDS}


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
    if scenario.weights is not None:
        fields.append(f"{WEIGHTS_FIELD}={scenario.weights}")
    if scenario.step is not None:  # the sequence always, the other settings where not their defaults
        fields += [
            f"{field}={getattr(scenario.step, key)}"
            for key, field in STEP_FIELDS.items()
            if key == "sequence" or getattr(scenario.step, key) != _STEP_DEFAULTS[key]
        ]
    if scenario.time is not None:  # the device always, the other settings where not their defaults
        fields += [
            f"{field}={_time_value(getattr(scenario.time, key))}"
            for key, field in TIME_FIELDS.items()
            if key == "device" or getattr(scenario.time, key) != _TIME_DEFAULTS[key]
        ]
    return TOKEN_SEPARATOR.join([scenario.dtype, *fields, NAME_FIELD + scenario.name])


def _time_value(value: Any) -> str:
    """A run's setting as its link field writes it: a price as Python's shortest exact float text."""
    return repr(value) if isinstance(value, float) else str(value)


def time_setting(field: str, text: str) -> Any:
    """One ``Timing`` setting from its link field's text, read as the Memory page reads its box
    (``dcsim.requests.timing``; the device as the Serving page's)."""
    read = (SERVING if field == "device" else TIMING)[field].read(text)
    if field == "device":
        return read
    if read == compare.NO_FIGURE:  # tokens or price: none
        return None
    return float(number_from_text(text.strip())) if field == "price" else int(read)


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
    weights = None
    step_values: dict[str, Any] = {}
    time_values: dict[str, Any] = {}
    refused_sequence = refused_device = False
    for field in parts[1:name_at]:
        key, equals, value = field.partition("=")
        if key == WEIGHTS_FIELD and equals:
            try:
                weights = check_weights(value)
            except ValueError as err:
                problems.append(f"{where}: {err}; showing it without a weight format.")
            continue
        if key in STEP_LINK_FIELDS and equals:
            try:  # each on its own, so a bad one is named and the others kept
                step_values[STEP_LINK_FIELDS[key]] = check_step_field(STEP_LINK_FIELDS[key], value, key, True)
            except (TypeError, ValueError) as err:
                instead = f"using the default {_STEP_DEFAULTS[STEP_LINK_FIELDS[key]]}"
                problems.append(f"{where}: {err}; {'showing it without a step' if key == 'seq' else instead}.")
                refused_sequence |= key == "seq"
            continue
        if key in TIME_LINK_FIELDS and equals:
            name_of = TIME_LINK_FIELDS[key]
            try:  # each on its own, so a bad one is named and the others kept
                time_values[name_of] = time_setting(key, value)
            except (TypeError, ValueError) as err:
                instead = f"using the default {_TIME_DEFAULTS[name_of]}"
                if name_of in ("tokens", "price_per_device_hour"):
                    instead = "leaving it out"
                problems.append(f"{where}: {err}; {'showing it without a time' if key == 'device' else instead}.")
                refused_device |= key == "device"
            continue
        if not equals or not (key in valid or key.startswith(links.HPARAM_PREFIX)):
            problems.append(
                f"{where}: {show(field)} is not a configuration field (KEY=VALUE with KEY one of "
                f"{', '.join(sorted(valid))} or h.<name>); ignoring it."
            )
            continue
        params.setdefault(key, []).append(value)
    decoded = links.decode(params)
    problems += [f"{where}: {problem.removeprefix('Link: ')}" for problem in decoded.problems]
    if decoded.hub is not None:  # a comparison never fetches: its scenarios carry their hyperparameters
        problems.append(
            f"{where}: names the Hub model {show(decoded.hub.repo_id)} without its hyperparameters, and a "
            "comparison link does not fetch from the Hub; open it on the Model page and add it from there. "
            "Showing the Dense stack in its place."
        )
    step = None if refused_sequence else _step(step_values, decoded.config, where, problems)
    time = None if refused_device else _time(time_values, where, problems)
    try:
        scenario = Scenario(name=name, config=decoded.config, dtype=dtype, weights=weights, step=step, time=time)
        return scenario, problems
    except ValueError as err:  # a format on a model it does not apply to (a Dense stack)
        problems.append(f"{where}: {err}; showing it without a weight format.")
        return Scenario(name=name, config=decoded.config, dtype=dtype, step=step, time=time), problems


def _time(values: dict[str, Any], where: str, problems: list[str]) -> Timing | None:
    """The token's run on an accelerator, when it names a device; else None, said why if it gave settings."""
    if not values:
        return None
    if "device" not in values:
        problems.append(
            f"{where}: {', '.join(f'`{TIME_FIELDS[key]}`' for key in values)} without a `device`; showing it "
            "without a time."
        )
        return None
    try:
        return Timing(**values)
    except (TypeError, ValueError) as err:
        problems.append(f"{where}: {err}; showing it without a time.")
        return None


def _step(values: dict[str, Any], config: ModelConfig, where: str, problems: list[str]) -> Step | None:
    """The token's step, when its fields make one the model can take; else None, said why."""
    try:
        step = step_of(values, label=STEP_FIELDS.get)
        if step is not None:
            check_for_model(config, step)  # a family with a training forward, the model's positions
        return step
    except (TypeError, ValueError) as err:
        problems.append(f"{where}: {err}; showing it without a step.")
        return None


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
        (TRAINING_KEY, "training", lambda text: _training(training_of_version(text, version)), NO_TRAINING),
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

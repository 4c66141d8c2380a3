"""The Compare page's comparison: kept in the session, mirrored in the URL, changed by actions.

Like the configuration (``dcsim.ui.state``), the comparison starts from the link on the page's
first run in a session (``dcsim.links.comparisons.decode``, which never raises) and then lives in
``st.session_state``; every run writes it back into the URL through the page's settings, unless
the query string would pass ``comparisons.MAX_LINK_CHARS``, in which case the page says so and offers
the JSON instead. Actions (add, duplicate, rename, remove, baseline, budget, import) are button
callbacks: each validates through ``dcsim.compare`` and leaves one message for the next run.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from dcsim import compare
from dcsim.compare import Comparison, Scenario, runs, tables
from dcsim.links import comparisons
from dcsim.memory import budget
from dcsim.model.config import ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import amounts
from dcsim.ui import cache, state

COMPARISON = "dcsim.comparison"
PROBLEMS = "dcsim.comparison_problems"
GENERATION = "dcsim.comparison_generation"
MESSAGE = "dcsim.comparison_message"
IMPORT_DONE = "dcsim.comparison_import_done"
MAX_CACHED_ANSWERS = 64


def comparison() -> Comparison:
    """The session's comparison: the link's on the page's first run, the last valid one after."""
    if COMPARISON not in st.session_state:
        decoded = comparisons.decode({key: st.query_params.get_all(key) for key in st.query_params})
        st.session_state[COMPARISON] = decoded.comparison
        st.session_state[PROBLEMS] = decoded.problems
        st.session_state[GENERATION] = 0
    return st.session_state[COMPARISON]


def problems() -> tuple[str, ...]:
    comparison()
    return st.session_state[PROBLEMS]


def generation() -> int:
    """Bumped by every change, so the edit widgets are seeded afresh from the comparison."""
    comparison()
    return st.session_state[GENERATION]


def message() -> tuple[str, str] | None:
    """What the last action said, ``("success" | "error", text)``, shown once."""
    return st.session_state.pop(MESSAGE, None)


def _say(kind: str, text: str) -> None:
    st.session_state[MESSAGE] = (kind, text)


def _set(new: Comparison, said: str) -> None:
    st.session_state[COMPARISON] = new
    st.session_state[PROBLEMS] = ()
    st.session_state[GENERATION] = generation() + 1
    _say("success", said)


def _change(action: str, build) -> None:
    """Run ``build()`` (the new comparison and what to say) or leave its error as the message."""
    try:
        new, said = build()
    except (TypeError, ValueError) as err:
        _say("error", f"{action}: {err}")
        return
    _set(new, said)


def _weights(name: str) -> str | None:
    return None if name == "none" else name


NO_SEQUENCE = "none"  # the sequence box's text for the state alone, as on the Memory page
# The step's boxes, by ``compare.STEP_FIELDS`` key, with what each is named in a refusal.
STEP_LABELS = {"sequence": "Sequence", "micro_batch": "Micro-batch", "remat": "Remat", "attention": "Attention"}


def step(texts: dict[str, str] | None) -> compare.Step | None:
    """The step the page's boxes describe (``STEP_LABELS``' keys; a sequence of ``none`` or empty:
    no step, whatever the others say), checked as the memory command checks them."""
    if not texts or texts.get("sequence", "").strip().lower() in ("", NO_SEQUENCE):
        return None
    return compare.step_of(dict(texts), label=STEP_LABELS.get, as_text=True)


NO_DEVICE = "none"  # the device picker's choice for no time, as on the Memory page
# The run's boxes, by ``compare.TIME_FIELDS`` key (the device's picker aside), with what each is named
# in a refusal: the Memory page's time section's labels.
TIME_LABELS = {
    "devices_per_host": "Devices a host",
    "tokens": "Run's tokens",
    "price_per_device_hour": "Price",
    "micro_batches": "Micro-batches a step",
}


def timing(texts: dict[str, str] | None) -> compare.Timing | None:
    """The run the page's boxes describe (``compare.TIME_FIELDS``' keys; a device of ``none``: no
    time, whatever the others say), each box read as the Memory page reads it."""
    if not texts or texts.get("device", NO_DEVICE) == NO_DEVICE:
        return None
    from dcsim.links.comparisons import TIME_FIELDS, time_setting

    values = {}
    for key, label in TIME_LABELS.items():
        try:
            values[key] = time_setting(TIME_FIELDS[key], str(texts.get(key, "")))
        except (TypeError, ValueError) as err:
            raise type(err)(f"{label}: {err}") from None
    return compare.Timing(device=texts["device"], **values)


@dataclasses.dataclass(frozen=True)
class FormTexts:
    """What a scenario's form holds, as typed: its name, raw dtype, weight format, and the texts of its
    step and run boxes (``None``: the form had none)."""

    name: str
    dtype: str
    weights: str = "none"
    steps: dict[str, str] | None = None
    times: dict[str, str] | None = None

    def scenario(self, config: ModelConfig) -> Scenario:
        """The scenario the boxes describe for ``config``: its weights, step and run read from their texts."""
        return Scenario(
            name=self.name,
            config=config,
            dtype=self.dtype,
            weights=_weights(self.weights),
            step=step(self.steps),
            time=timing(self.times),
        )


def add(config: ModelConfig, form: FormTexts) -> None:
    def build():
        current = comparison()
        if len(current.scenarios) >= compare.MAX_SCENARIOS:
            raise ValueError(f"a comparison may hold at most {compare.MAX_SCENARIOS} scenarios; remove one first")
        scenario = form.scenario(config)
        return dataclasses.replace(current, scenarios=(*current.scenarios, scenario)), f"Added {scenario.name}."

    _change("Not added", build)


def duplicate(index: int) -> None:
    def build():
        current = comparison()
        if len(current.scenarios) >= compare.MAX_SCENARIOS:
            raise ValueError(f"a comparison may hold at most {compare.MAX_SCENARIOS} scenarios; remove one first")
        original = current.scenarios[index]
        copy = dataclasses.replace(original, name=compare.unique_name(original.name, current.names))
        scenarios = (*current.scenarios[: index + 1], copy, *current.scenarios[index + 1 :])
        baseline = current.baseline + (current.baseline > index + 1)
        return dataclasses.replace(current, scenarios=scenarios, baseline=baseline), f"Duplicated as {copy.name}."

    _change("Not duplicated", build)


def remove(index: int) -> None:
    def build():
        current = comparison()
        number = index + 1
        gone = current.scenarios[index]
        baseline = current.baseline
        if baseline == number:
            baseline = 1
        elif baseline > number:
            baseline -= 1
        scenarios = current.scenarios[:index] + current.scenarios[index + 1 :]
        return dataclasses.replace(current, scenarios=scenarios, baseline=baseline), f"Removed {gone.name}."

    _change("Not removed", build)


def edit(index: int, form: FormTexts, num_shards: object) -> None:
    def build():
        current = comparison()
        old = current.scenarios[index]
        config = dataclasses.replace(old.config, num_shards=num_shards)
        new = form.scenario(config)
        scenarios = (*current.scenarios[:index], new, *current.scenarios[index + 1 :])
        return dataclasses.replace(current, scenarios=scenarios), f"Saved {new.name}."

    _change("Not saved", build)


def set_baseline(number: int) -> None:
    _change("Baseline not changed", lambda: (dataclasses.replace(comparison(), baseline=number), "Baseline changed."))


def set_budget(amount_text: str, unit: str, training: str | None, strategy: str) -> None:
    def build():
        amount = amounts.parse_amount(amount_text, unit)
        new = budget.Budget(amount=amount, unit=unit, training=training, strategy=strategy)
        return dataclasses.replace(comparison(), budget=new), "Budget set."

    _change("Budget not set", build)


def import_json(data: bytes) -> None:
    _change("This file was not opened", lambda: (Comparison.from_json(data), "Comparison opened."))


def amount_input_text(spec: budget.Budget) -> str:
    """The budget as a person would type it: ``80 GiB`` when whole GiB, else the exact int."""
    if spec.unit == "bytes" and spec.amount % 2**30 == 0:
        return f"{spec.amount // 2**30} GiB"
    return str(spec.amount)


def reports(current: Comparison) -> list[ParamReport]:
    return [cache.count(scenario.config) for scenario in current.scenarios]


@st.cache_data(max_entries=MAX_CACHED_ANSWERS, show_spinner="Searching every device count from 1 to 4,096…")
def _answer(
    config_json: str, dtype: str, amount: int, unit: str, training: str | None, strategy: str, step_json: str = ""
):
    spec = budget.Budget(amount=amount, unit=unit, training=training, strategy=strategy)
    config = ModelConfig.from_json(config_json)
    step = compare.Step(**json.loads(step_json)) if step_json else None
    # The step's activations come from ``activations.cached_trace``, the cache the Memory page's search uses.
    return tables.scenario_answer(Scenario(name="-", config=config, dtype=dtype, step=step), cache.count(config), spec)


def answers(current: Comparison) -> list[budget.Answer]:
    """``tables.scenario_answer`` for every scenario, cached (bounded) per (configuration, dtype,
    budget, and the step when the budget counts it)."""
    spec = current.budget
    return [
        _answer(
            s.config.architecture().to_json(),
            s.dtype,
            spec.amount,
            spec.unit,
            spec.training,
            spec.strategy,
            *([_step_json(s.step)] if s.step is not None and tables.counts_activations(s, spec) else []),
        )
        for s in current.scenarios
    ]


@st.cache_resource(max_entries=MAX_CACHED_ANSWERS, show_spinner="Timing the step…")
def _time(config_json: str, num_shards: int, dtype: str, step_json: str, time_json: str, budget_json: str) -> Any:
    # cache_resource, as the Memory page's memory: a StepTime is frozen and unpickling it is waste.
    config = dataclasses.replace(ModelConfig.from_json(config_json), num_shards=num_shards)
    scenario = Scenario(
        name="-",
        config=config,
        dtype=dtype,
        step=compare.Step(**json.loads(step_json)) if step_json else None,
        time=compare.Timing(**json.loads(time_json)) if time_json else None,
    )
    return runs.scenario_time(scenario, cache.count(config), budget.Budget(**json.loads(budget_json)))


def times(current: Comparison) -> list[Any]:
    """``runs.scenario_time`` for every scenario (a ``Timed`` or why there is none), cached
    (bounded) per configuration, dtype, step, run and budget; a scenario without a device is not
    counted or traced."""
    spec = json.dumps(dataclasses.asdict(current.budget), sort_keys=True)
    return [
        runs.NO_DEVICE_TEXT
        if s.time is None
        else _time(
            s.config.architecture().to_json(),
            s.num_shards,
            s.dtype,
            "" if s.step is None else _step_json(s.step),
            json.dumps(s.time.to_dict(), sort_keys=True),
            spec,
        )
        for s in current.scenarios
    ]


def _step_json(step: compare.Step) -> str:
    return json.dumps(dataclasses.asdict(step), sort_keys=True)


def publish(current: Comparison) -> tuple[str, bool]:
    """Put the comparison in the page's settings when the whole query string stays within the
    link ceiling; return that query string and whether it fits."""
    params = comparisons.encode(current)
    config_params = state.wanted_query()
    query = urlencode({**config_params, **params}, doseq=True)
    fits = comparisons.fits_in_link(query)
    if not fits:  # the budget and the version still travel; the scenarios go by JSON
        params = {
            key: value
            for key, value in params.items()
            if key not in (comparisons.SCENARIO_KEY, comparisons.BASELINE_KEY)
        }
    state.set_page_params(params)
    return query, fits

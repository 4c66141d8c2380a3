"""Scenarios side by side: several named configurations, each with its shard count and dtype.

Teams compare the model they have with the one they want, at several shard counts, against a
per-device budget. A ``Comparison`` holds up to ``MAX_SCENARIOS`` named ``Scenario``s, which one is
the baseline, and the budget question (``dcsim.memory.budget``). It travels three ways, each checked here:

- **JSON** (``"format": "dcsim.comparison"``, version 1): each scenario is its configuration's
  JSON object (``ModelConfig.to_dict``) plus ``name`` and ``dtype`` (and, when it has them, its
  ``weights`` format, its training step: ``sequence``, ``micro_batch``, ``remat``, ``attention``,
  and its run's ``time``: ``device``, ``devices_per_host``, ``tokens``, ``price_per_device_hour``,
  ``micro_batches``, the ``memory`` command's JSON keys); unknown keys are refused by name; at most
  ``MAX_COMPARISON_BYTES``.
- **a link** (``dcsim.links.comparisons``), read with the configuration link's own codec.
- **tables** (``comparison_frame``, ``sweep_frame``) for the page, the CLI and CSV; ``time_frame``
  compares the scenarios' runs by days and cost (``scenario_time``: ``dcsim.speed.estimate``'s
  step time, the Memory page's call).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import pandas as pd

from dcsim import links
from dcsim.inputs import as_int, check_choice, check_document, json_kind, load_json, reject_unknown, show
from dcsim.memory import budget as budgets
from dcsim.memory import step as steps
from dcsim.memory.report import TrainingReport
from dcsim.memory.step import Step
from dcsim.model import presets, registry
from dcsim.model.config import CONFIG_FORMAT, CONFIG_VERSION, MODEL_KEYS, ModelConfig
from dcsim.model.count import ParamReport
from dcsim.quantities import payload, units
from dcsim.serving import catalog
from dcsim.sharding import shares
from dcsim.speed import system

MAX_SCENARIOS = 8
MAX_NAME_CHARS = 64
MAX_COMPARISON_BYTES = 256 * 1024  # eight configurations of 256 distinct layers each fit
COMPARISON_FORMAT = "dcsim.comparison"
COMPARISON_VERSION = 2
# Version 1 called SGD with momentum 0.9 `sgd`; version 2 follows optax: `sgd` is plain SGD (no
# state) and `momentum` the momentum variant. A version-1 link or file opens as it always did.
V1_TRAINING = {"sgd": "momentum"}


def training_of_version(training: Any, version: Any) -> Any:
    """A budget's optimizer as a comparison of ``version`` named it, in today's names."""
    if version == 1 and isinstance(training, str):
        return V1_TRAINING.get(training, training)
    return training


NO_TRAINING = "none"


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


def check_weights(name: Any) -> str:
    """A scenario's weight format (its default options), or a refusal naming the key."""
    from dcsim.quant.formats import check_format

    return check_format(name, names=("weights", "group", "bits", "tile", "quantize_head")).name


# A scenario's training step (``dcsim.memory.step.Step``): the settings a comparison carries,
# by JSON key, each with its link token field (the Memory page's link keys). The others keep the
# step's defaults: bfloat16 compute, no sequence parallelism, dropless experts.
STEP_FIELDS = {"sequence": "seq", "micro_batch": "mb", "remat": "remat", "attention": "attn"}


# Each field checked as JSON gives it and as text (a link's field, a box), as ``memory`` checks it:
# ``dcsim.memory.step``'s, which the link codec reads too.
check_step_field = steps.check_field
step_of = steps.from_fields


def step_text(step: Step | None) -> str:
    """A scenario's step in a line: ``sequence 4,096, micro-batch 1, remat none, flash attention``."""
    if step is None:
        return ""
    return (
        f"sequence {step.sequence:,}, micro-batch {step.micro_batch:,}, remat {step.remat}, {step.attention} attention"
    )


# A scenario's run on an accelerator: the Memory page's time settings, by their key in the
# ``memory`` command's ``time`` JSON (``dcsim.requests.timing``'s ``json``, less ``time.``), each
# with its link key (the timing request's: ``dph``, ``tokens``, ``price``, ``mbs``) inside a scenario's
# token. The device is the Serving page's ``device``. A comparison's mesh has no ``stage`` axis
# (``time_mesh``), so the pipeline's schedule keys (``sched``, ``vstages``) have nothing to set.
TIME_FIELDS = {
    "device": "device",
    "devices_per_host": "dph",
    "tokens": "tokens",
    "price_per_device_hour": "price",
    "micro_batches": "mbs",
}
NO_FIGURE = "none"  # the boxes' and the link's word for no tokens, no price


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    """A scenario's run on an accelerator, as the Memory page's time section sets it.

    Attributes:
      device: a catalog accelerator (``dcsim.serving.catalog``) with speed figures.
      devices_per_host: which of the mesh's devices share a host's scale-up links (default 8).
      tokens: the run's tokens (its steps, days and device-hours), or None for the step alone.
      price_per_device_hour: the cost of a device-hour (any currency), or None; priced only with tokens.
      micro_batches: a data-parallel replica's micro-batches a step (gradient accumulation).
    """

    device: str
    devices_per_host: int = system.DEFAULT_DEVICES_PER_HOST
    tokens: int | None = None
    price_per_device_hour: float | None = None
    micro_batches: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.device, str):
            raise TypeError(f"a scenario's `device` must be a catalog name, got {show(self.device)}")
        object.__setattr__(self, "device", catalog.get_accelerator(self.device).name)
        object.__setattr__(
            self,
            "devices_per_host",
            as_int(self.devices_per_host, "dph", maximum=system.MAX_DEVICES_PER_HOST, why="devices a host"),
        )
        if self.tokens is not None:
            object.__setattr__(self, "tokens", system.check_tokens(self.tokens, "tokens"))
        if self.price_per_device_hour is not None:
            object.__setattr__(self, "price_per_device_hour", system.check_price(self.price_per_device_hour, "price"))
        from dcsim.speed import pipeline

        object.__setattr__(
            self,
            "micro_batches",
            as_int(self.micro_batches, "mbs", maximum=pipeline.MAX_MICRO_BATCHES, why="micro-batches a step"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in TIME_FIELDS}


def timing_of(values: Any, label: str = "`time`") -> Timing | None:
    """A scenario's ``time`` JSON object (``TIME_FIELDS``' keys; ``device`` required), or None for null."""
    if values is None:
        return None
    if not isinstance(values, dict):
        raise TypeError(
            f'{label} must be an object like {{"device": "h100-sxm", "tokens": 2e12}}, got {json_kind(values)}'
        )
    reject_unknown(values, tuple(TIME_FIELDS), "time")
    if "device" not in values:
        raise ValueError(f"{label} needs a `device` ({', '.join(catalog.DEVICE_NAMES)})")
    try:
        return Timing(**values)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{label}: {err}") from None


def timing_text(timing: Timing | None) -> str:
    """A scenario's run in a line: ``h100-sxm, 8 a host, 2,000,000,000,000 tokens at 2.5 a device-hour``."""
    if timing is None:
        return ""
    said = [timing.device, f"{timing.devices_per_host:,} a host"]
    if timing.micro_batches != 1:
        said.append(f"{timing.micro_batches:,} micro-batches a step")
    if timing.tokens is not None:
        price = timing.price_per_device_hour
        said.append(f"{timing.tokens:,} tokens" + ("" if price is None else f" at {price:g} a device-hour"))
    return ", ".join(said)


def check_dtype(dtype: Any) -> str:
    return check_choice(dtype, payload.RAW_DTYPES, "a scenario's `dtype`")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scenario:
    """One named configuration in a comparison.

    Attributes:
      name: shown as text only, never as markdown or HTML (see ``check_name``).
      config: the model; its ``num_shards`` is this scenario's shard count.
      dtype: the storage dtype of its raw payload and of a budget in bytes.
      weights: a weight format (``dcsim.quant.formats``, its default options) whose exact bytes
        the table shows beside the raw payload, or None.
      step: a training step (``dcsim.memory.step.Step``: sequence, micro-batch, remat,
        attention) whose activations a training budget counts beside the state, or None for the
        state alone. Only the families with a training forward take one.
      time: the run on an accelerator (``Timing``) that times the step, or None. Without a step the
        time has nothing to time, and the table says so.
    """

    name: str
    config: ModelConfig
    dtype: str = "float32"
    weights: str | None = None
    step: Step | None = None
    time: Timing | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", check_name(self.name))
        if self.time is not None and not isinstance(self.time, Timing):
            raise TypeError(f"a scenario's time must be a Timing, got {type(self.time).__name__}")
        if not isinstance(self.config, ModelConfig):
            raise TypeError(f"a scenario's config must be a ModelConfig, got {type(self.config).__name__}")
        object.__setattr__(self, "dtype", check_dtype(self.dtype))
        if self.weights is not None:
            object.__setattr__(self, "weights", check_weights(self.weights))
            if not registry.family_of(self.config).weight_formats:
                raise ValueError(
                    f"a weight format ({self.weights}) applies to transformer families; "
                    f"{self.config.family or 'a Dense stack'} is not one: leave the format out"
                )
        if self.step is not None:
            if not isinstance(self.step, Step):
                raise TypeError(f"a scenario's step must be a Step, got {type(self.step).__name__}")
            steps.check_for_model(self.config, self.step)  # a family with a training forward, the positions
        # One dtype per scenario: its configuration carries it too, as every configuration does.
        object.__setattr__(self, "config", dataclasses.replace(self.config, dtype=self.dtype))

    @property
    def num_shards(self) -> int:
        return self.config.num_shards

    def to_dict(self) -> dict[str, Any]:
        data = self.config.to_dict()
        del data["format"], data["version"]
        weights = {} if self.weights is None else {"weights": self.weights}
        time = {} if self.time is None else {"time": self.time.to_dict()}
        return {"name": self.name, "dtype": self.dtype, **weights, **step_dict(self.step), **time, **data}


def step_dict(step: Step | None) -> dict[str, Any]:
    """A step's ``STEP_FIELDS`` as JSON (nothing without one)."""
    return {} if step is None else {key: getattr(step, key) for key in STEP_FIELDS}


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
        check_document(
            data,
            what="comparison",
            keys=("format", "version", "baseline", "budget", "scenarios"),
            format_name=COMPARISON_FORMAT,
            version=COMPARISON_VERSION,
            format_required=True,
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
            scenarios=tuple(scenarios),
            baseline=data.get("baseline", 1),
            budget=_budget_from_dict(data.get("budget"), data.get("version", COMPARISON_VERSION)),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Comparison:
        """Parse and validate comparison JSON (at most MAX_COMPARISON_BYTES, duplicate keys refused)."""
        data = load_json(text, "comparison", MAX_COMPARISON_BYTES, parse_constant=_no_constant)
        return cls.from_dict(data)


# A scenario's JSON is its name and its configuration's fields (a file's model has an "origin").
_SCENARIO_KEYS = ("name", "weights", *STEP_FIELDS, "time", *MODEL_KEYS)


def _scenario_from_dict(item: Any) -> Scenario:
    if not isinstance(item, dict):
        raise TypeError(f'must be an object like {{"name": "base", "dtype": "float32", ...}}, got {json_kind(item)}')
    reject_unknown(item, _SCENARIO_KEYS, "scenario")
    if "name" not in item:
        raise ValueError("needs a `name`")
    fields = {
        key: value for key, value in item.items() if key not in ("name", "dtype", "weights", "time", *STEP_FIELDS)
    }
    step = step_of({key: value for key, value in item.items() if key in STEP_FIELDS})
    config = ModelConfig.from_dict({"format": CONFIG_FORMAT, "version": CONFIG_VERSION, **fields})
    return Scenario(
        name=item["name"],
        config=config,
        dtype=item.get("dtype", "float32"),
        weights=item.get("weights"),
        step=step,
        time=timing_of(item.get("time")),
    )


_BUDGET_KEYS = ("amount", "unit", "training", "strategy")


def _budget_from_dict(item: Any, version: Any = COMPARISON_VERSION) -> budgets.Budget:
    if item is None:
        return budgets.Budget()
    if not isinstance(item, dict):
        raise TypeError(
            f'`budget` must be an object like {{"amount": 85899345920, "unit": "bytes"}}, got {json_kind(item)}'
        )
    reject_unknown(item, _BUDGET_KEYS, "budget")
    if "training" in item:
        item = {**item, "training": training_of_version(item["training"], version)}
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


def weights_bytes(scenario: Scenario, report: ParamReport) -> int | None:
    """The scenario's weights in its format, exact (its tensors' bytes), or None without one."""
    if scenario.weights is None:
        return None
    from dcsim.quant import layouts
    from dcsim.quant.formats import check_format

    return layouts.weight_table(scenario.config, report, check_format(scenario.weights)).payload_bytes


def counts_activations(scenario: Scenario, budget: budgets.Budget) -> bool:
    """Whether the budget counts the scenario's step: a training state in bytes, and a step."""
    return scenario.step is not None and budget.training is not None and budget.unit == "bytes"


def scenario_answer(
    scenario: Scenario, report: ParamReport, budget: budgets.Budget, up_to: int = budgets.MAX_SEARCH_DEVICES
) -> budgets.Answer:
    """``budget.answer`` for one scenario: with a step and a training budget in bytes, each mesh's
    step activations (``activations.cached_trace``, the Memory page's and ``memory``'s own figure,
    traced once per ``model`` axis size) beside the state."""
    demand = budgets.demand(report, scenario.dtype, budget.training)
    if not counts_activations(scenario, budget):
        return budgets.answer(demand, budget, up_to)
    config, step = scenario.config.architecture(), scenario.step
    assert step is not None  # counts_activations says so

    from dcsim.memory import activations  # JAX: a step is traced only when a budget counts it

    def per_mesh(mesh: Any) -> int:
        return activations.cached_trace(config, step, scenario.dtype, mesh).bytes_per_device

    return budgets.answer(demand, budget, up_to, activations=per_mesh)


def budget_counts(scenario: Scenario, budget: budgets.Budget) -> str:
    """What the scenario's verdict against the budget counts and leaves out, said beside it."""
    if budget.training is None:
        return (
            "Counts the parameters only: the training state and the step's activations are not counted."
            if scenario.step is not None
            else ""
        )
    if scenario.step is not None and budget.unit != "bytes":
        return "Counts the training state only: a step's activations are bytes, not counted in a budget of values."
    return budgets.leaves_out(scenario.step is not None)


# --- time and money --------------------------------------------------------------------------------

# The optimizer a scenario's state is timed with when the budget counts the parameters only: the
# Memory page's default (``dcsim.requests.training``'s ``optim``).
TIME_OPTIMIZER = "adam"
NO_DEVICE_TEXT = "no device: give the scenario a device to time it"
NO_SEQUENCE_TEXT = "no sequence: give the scenario a training step to time it"
NO_TOKENS_TEXT = "no run: give the run's tokens"
NO_PRICE_TEXT = "no price: give a price a device-hour"


def time_mesh(scenario: Scenario, budget: budgets.Budget) -> Any:
    """The mesh a scenario's step is timed on: its shards as devices on the budget's axis
    (``data=N``, ``model=N`` for the tensor strategy), the mesh the budget's search lays it out on."""
    from dcsim.sharding.meshes import MeshSpec

    return MeshSpec(((budget.mesh_axis, scenario.num_shards),))


def time_training(scenario: Scenario, budget: budgets.Budget) -> Any:
    """The state a scenario's step is timed with: the budget's (ZeRO-3, the budget's optimizer, in
    the scenario's dtype, no master copy), with ``TIME_OPTIMIZER`` where the budget counts parameters only."""
    from dcsim.memory.training import Training

    return Training.stage(3, optimizer=budget.training or TIME_OPTIMIZER, param_dtype=scenario.dtype)


def time_setup_text(budget: budgets.Budget) -> str:
    """How every scenario is timed, in a sentence for the page and the docs."""
    optimizer = budget.training or f"{TIME_OPTIMIZER} (the budget counts parameters only)"
    return (
        f"Each scenario runs on its shard count as devices, mesh {budget.mesh_axis}=N under the {budget.strategy} "
        f"strategy, with ZeRO-3's training state (parameters, gradients and {optimizer} optimizer state, all in the "
        "scenario's dtype, no master copy); the Memory page sets any mesh and state."
    )


@dataclasses.dataclass(frozen=True)
class Timed:
    """A scenario's step time (``dcsim.speed.estimate.StepTime``) and, where the state and the
    step's activations a device exceed the device's memory, by how much (the time is then of a step
    that cannot run as set, and its row says so on the same line)."""

    time: Any
    device_title: str
    over_bytes: int | None = None


def scenario_time(scenario: Scenario, report: ParamReport, budget: budgets.Budget) -> Timed | str:
    """The scenario's step time on its device (``dcsim.speed.estimate.training_time``, the call the
    Memory page makes, on ``time_mesh`` with ``time_training``) with what the device's memory says
    of the setup (``Timed``), or a sentence saying why there is none: no device, no step, or the
    engine's refusal (a layout, a device without speeds...)."""
    if scenario.time is None:
        return NO_DEVICE_TEXT
    if scenario.step is None:
        return NO_SEQUENCE_TEXT
    from dcsim.memory import activations
    from dcsim.memory.state import compute_memory
    from dcsim.speed import estimate, pipeline

    timing, mesh = scenario.time, time_mesh(scenario, budget)
    try:
        held = compute_memory(report, mesh, budget.strategy, (), time_training(scenario, budget))
        traced = activations.cached_trace(
            scenario.config.architecture(), scenario.step, scenario.dtype, mesh, with_recompute=True
        )
        device = catalog.get_accelerator(timing.device)
        time = estimate.training_time(
            scenario.config,
            report,
            held,
            traced,
            device,
            devices_per_host=timing.devices_per_host,
            tokens=timing.tokens,
            price=None if timing.tokens is None else timing.price_per_device_hour,
            schedule=pipeline.Pipeline(micro_batches=timing.micro_batches),
        )
    except (TypeError, ValueError) as err:
        return f"cannot be timed: {err}"
    headroom = TrainingReport.of(held, traced.bytes_per_device, device.bytes).headroom_bytes
    over = None if headroom is None or headroom >= 0 else -headroom
    return Timed(time=time, device_title=device.title, over_bytes=over)


def _figure(value: float) -> str:
    """An estimate to four significant figures, with thousands separators (27,880, not 2.788e+04)."""
    rounded = float(f"{value:.4g}")
    return f"{rounded:,.0f}" if abs(rounded) >= 1000 else f"{rounded:g}"


def _band(point: float, low: float, high: float, unit: str = "") -> str:
    return f"{_figure(point)}{unit} ({_figure(low)}–{_figure(high)}{unit})"


# The time table's text columns, in the order a page shows them: each figure with its band, or why
# it has none.
TIME_TEXTS = ("fits_text", "step_text", "tokens_per_second_text", "days_text", "device_hours_text", "cost_text")


def time_frame(comparison: Comparison, times: Sequence[Any]) -> pd.DataFrame:
    """One row per scenario, its run by time and money (``times``: ``scenario_time``'s answers, in
    order): ``name``, ``device``, ``run`` (``timing_text``), ``num_devices``, the step's
    ``step_seconds`` with its band ``step_seconds_low``/``_high`` (full to no overlap),
    ``tokens_per_second`` and ``global_tokens``; ``fits_text`` whether the state and the step's
    activations a device fit the device (the time of one that does not is of a step that cannot
    run as set, and the row says so); with the run's tokens ``steps`` and ``days``,
    ``device_hours`` (with ``_low``/``_high``: the steps at the band's ends), and with a price ``cost``
    (with its band); floats missing where there is no figure. The ``*_text`` columns are what a page
    shows: each figure with its band, or the reason it is missing (never a blank or a zero), and
    ``note`` says why a scenario is not timed and what the estimate leaves out."""
    if len(times) != len(comparison.scenarios):
        raise ValueError(f"one time per scenario is needed: {len(comparison.scenarios)} scenarios, {len(times)} times")
    float_keys = (
        "step_seconds",
        "step_seconds_low",
        "step_seconds_high",
        "tokens_per_second",
        *(f"{key}{end}" for key in ("days", "device_hours", "cost") for end in ("", "_low", "_high")),
    )
    rows: dict[str, list[Any]] = {
        key: []
        for key in (
            "name",
            "device",
            "run",
            "num_devices",
            "global_tokens",
            "steps",
            *float_keys,
            *TIME_TEXTS,
            "note",
        )
    }
    for scenario, time in zip(comparison.scenarios, times, strict=True):
        rows["name"].append(scenario.name)
        rows["device"].append(NO_DEVICE_TEXT if scenario.time is None else scenario.time.device)
        rows["run"].append(timing_text(scenario.time) or NO_DEVICE_TEXT)
        figures: dict[str, Any] = dict.fromkeys(("num_devices", "global_tokens", "steps", *float_keys))
        if isinstance(time, str):
            texts = dict.fromkeys(("fits", "step", "tokens_per_second", "days", "device_hours", "cost"), time)
            note = time
        else:
            fits = (
                f"yes, on the {time.device_title}"
                if time.over_bytes is None
                else f"no: over the {time.device_title}'s memory by {units.binary_bytes(time.over_bytes)}, "
                "so the time is of a step that cannot run as set"
            )
            time = time.time
            figures |= {
                "num_devices": time.num_devices,
                "global_tokens": time.global_tokens,
                "step_seconds": time.step_seconds,
                "step_seconds_low": time.step_seconds_low,
                "step_seconds_high": time.step_seconds_high,
                "tokens_per_second": time.tokens_per_second,
            }
            note = f"Estimate; leaves out {', '.join(time.leaves_out)}."
            texts = {
                "fits": fits,
                "step": _band(time.step_seconds, time.step_seconds_low, time.step_seconds_high, " s"),
                "tokens_per_second": _figure(time.tokens_per_second),
                "days": NO_TOKENS_TEXT,
                "device_hours": NO_TOKENS_TEXT,
                "cost": NO_TOKENS_TEXT,
            }
            run = time.run
            if run is not None:
                # The run's ends: its steps at the band's ends (the engine's seconds are the point's).
                seconds = {"": run.seconds, "_low": run.steps * time.step_seconds_low}
                seconds["_high"] = run.steps * time.step_seconds_high
                figures["steps"] = run.steps
                for end, value in seconds.items():
                    figures[f"days{end}"] = value / 86400
                    figures[f"device_hours{end}"] = value * time.num_devices / 3600
                    if run.price_per_device_hour is not None:
                        figures[f"cost{end}"] = figures[f"device_hours{end}"] * run.price_per_device_hour
                texts["days"] = _band(figures["days"], figures["days_low"], figures["days_high"])
                texts["device_hours"] = _band(
                    figures["device_hours"], figures["device_hours_low"], figures["device_hours_high"]
                )
                texts["cost"] = (
                    NO_PRICE_TEXT
                    if run.price_per_device_hour is None
                    else _band(figures["cost"], figures["cost_low"], figures["cost_high"])
                )
        for key, value in figures.items():
            rows[key].append(value)
        for key, value in texts.items():
            rows[f"{key}_text"].append(value)
        rows["note"].append(note)
    frame = pd.DataFrame(rows)
    for key in ("num_devices", "global_tokens", "steps"):
        frame[key] = pd.array(rows[key], dtype="Int64")
    for key in float_keys:
        frame[key] = pd.array([None if value is None else float(value) for value in rows[key]], dtype="Float64")
    return frame


def has_time(comparison: Comparison) -> bool:
    """Whether any scenario has a run on an accelerator: the page's time section shows then."""
    return any(scenario.time is not None for scenario in comparison.scenarios)


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
    in_format, refusals = [], []
    for scenario, report in zip(comparison.scenarios, reports, strict=True):
        try:
            in_format.append(weights_bytes(scenario, report))
            refusals.append("")
        except ValueError as err:  # a configuration the format cannot lay out (a group that does not divide)
            in_format.append(None)
            refusals.append(str(err))
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
        "weights": [s.weights or "" for s in comparison.scenarios],
        "weights_bytes": pd.array(in_format, dtype="Int64"),
        "weights_refusal": refusals,
        **{f"raw_{dtype}_bytes": [payload.raw_bytes(total, dtype) for total in totals] for dtype in payload.RAW_DTYPES},
    }
    if any(s.step is not None for s in comparison.scenarios):  # a comparison without steps keeps its columns
        rows["step"] = [step_text(s.step) for s in comparison.scenarios]
        rows |= {
            key: pd.array([None if s.step is None else getattr(s.step, key) for s in comparison.scenarios], dtype=kind)
            for key, kind in STEP_COLUMNS.items()
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


# A step's columns in the table, when any scenario has one (missing where a scenario has none).
STEP_COLUMNS = {"sequence": "Int64", "micro_batch": "Int64", "remat": "string", "attention": "string"}
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
    many of them fit and do not), ``summary`` (``dcsim.memory.budget.summary``: the answer in words),
    ``activations`` (a step's activations a device there, included in ``per_device``; missing
    where not counted) and ``counts`` (``budget_counts``: what the verdict counts and leaves out)."""
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
            "activations": pd.array([a.shown_activations for a in answers], dtype="Int64"),
            "counts": [budget_counts(s, budget) for s in comparison.scenarios],
        }
    )


def held_frame(comparison: Comparison, answers: Sequence[budgets.Answer]) -> pd.DataFrame:
    """What the fullest device holds under the real layout at the device counts worth showing
    (``dcsim.memory.budget.shown_counts``: the counts a team buys, the answer, the ideal share's count),
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
                **_step_answer(scenario, a, comparison.budget),
            }
            for scenario, a in zip(comparison.scenarios, answers, strict=True)
        ]
    return record


def _step_answer(scenario: Scenario, answer: budgets.Answer, budget: budgets.Budget) -> dict[str, Any]:
    """A scenario with a step: its activations a device at the answer (null when not counted) and
    what the verdict counts; nothing for a scenario without one, whose record stays as it was."""
    if scenario.step is None:
        return {}
    return {"activations_bytes_per_device": answer.shown_activations, "counts": budget_counts(scenario, budget)}


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A table row with NumPy scalars as Python ones, so ``json.dumps`` takes it."""
    return {key: value.item() if hasattr(value, "item") else value for key, value in row.items()}


# --- the link -----------------------------------------------------------------------------------

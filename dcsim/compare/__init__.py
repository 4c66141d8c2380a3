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
- **tables** (``dcsim.compare.tables``: ``comparison_frame``, ``sweep_frame``) for the page, the
  CLI and CSV; ``dcsim.compare.runs`` compares the scenarios' runs by days and cost
  (``scenario_time``: ``dcsim.speed.estimate``'s step time, the Memory page's call).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from dcsim import links
from dcsim.inputs import as_int, check_choice, check_document, json_kind, load_json, reject_unknown, show
from dcsim.memory import budget as budgets
from dcsim.memory import step as steps
from dcsim.memory.step import Step
from dcsim.model import presets, registry
from dcsim.model.config import CONFIG_FORMAT, CONFIG_VERSION, MODEL_KEYS, ModelConfig
from dcsim.quantities import payload
from dcsim.serving import catalog
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

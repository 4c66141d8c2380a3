"""The Memory page's settings, tables and cached training-memory computations.

The mesh, strategy and rules are the Layout page's settings under the same link keys (``mesh``,
``strategy``, ``rules``), remembered per session by ``dcsim.ui.state`` across pages, so a person who
laid a model out on the Layout page finds the same mesh here. The page's own link keys:

- ``zero``: the ZeRO stage, 0 to 3; or, instead of it, ``parts``: the parts split, named freely
  (``optimizer,grads``; ``none``). A link names one of the two.
- ``optim``: the optax optimizer (``dcsim.model.optimizer.OPTIMIZER_NAMES``).
- ``param``, ``grad``, ``master``: the parameters' dtype, the gradients' (``same``: the params'),
  and the master copy's (``none``: no master copy).
- ``devmem``: the memory budget of one device, with its unit (``80GiB``).
- A training step's activations (``dcsim.memory.activations``): ``seq`` (tokens a sequence;
  ``none``, the default, for the state alone), ``mb`` (the micro-batch a data-parallel replica),
  ``remat`` (the policy), ``attn`` (``flash`` or ``naive``), ``cdtype`` (the compute dtype), ``sp``
  (sequence parallelism, ``on`` or ``off``) and ``cf`` (a Mixture-of-Experts capacity factor;
  ``none``: dropless). With a sequence, "fits", the budget and the sweep count state + activations.

Each is checked on its own when a link arrives (``frame.setting_from_link``): a bad value is named
in a warning and replaced by its default. Answers are cached (bounded) on text: the configuration's
JSON, the mesh, the strategy, the rules and the training setup's JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from dcsim.memory import search, stages
from dcsim.memory import training as trainings
from dcsim.memory.report import TrainingReport
from dcsim.memory.state import MemoryReport, compute_memory
from dcsim.memory.step import sequence_limit
from dcsim.memory.training import PARTS, STAGES, Training
from dcsim.model import registry
from dcsim.model.config import ModelConfig
from dcsim.quantities import amounts, units
from dcsim.report import memory_charts
from dcsim.requests import is_on
from dcsim.requests.training import ATTENTIONS, COMPUTE_DTYPES, REMATS, TRAINING
from dcsim.sharding import meshes
from dcsim.ui import cache, frame, layout, state

T = TypeVar("T")

PAGE = "memory"
DEFAULT_ZERO = TRAINING["zero"].default
FREE_PARTS = "parts"  # the stage picker's choice that names the parts freely
STAGE_CHOICES = (*(str(stage) for stage in STAGES), FREE_PARTS)
STAGE_SHORT = {0: "nothing split", 1: "optimizer state split", 2: "optimizer + grads split", 3: "everything split"}
DEFAULT_PARTS = TRAINING["parts"].default
DEFAULT_OPTIMIZER = TRAINING["optim"].default
DEFAULT_PARAM_DTYPE = TRAINING["param"].default
SAME_AS_PARAMS = "same"
DEFAULT_GRAD_DTYPE = TRAINING["grad"].default  # SAME_AS_PARAMS
NO_MASTER = trainings.NO_MASTER
DEFAULT_MASTER_DTYPE = TRAINING["master"].default  # NO_MASTER
DEFAULT_BUDGET = TRAINING["devmem"].default
MAX_SETTING_CHARS = 64
MAX_CACHED_MEMORY = 128
MAX_CACHED_FITS = 32
MAX_VERIFIED = 16  # XLA answers kept per session: each took seconds of a child process
LAST_SPLIT = "dcsim.memory.split"  # ("zero", "3") or ("parts", "grads,optimizer"): what a page switch restores
VERIFIED = "dcsim.memory.verified"
PART_FILTER = "memory.part_filter"  # the table's filter: a view, not a setting, so not in the link
STAGE_KEY = state.WIDGET_PREFIX + f"{PAGE}.zero"
PARTS_KEY = state.WIDGET_PREFIX + f"{PAGE}.parts"
PART_TITLES = memory_charts.PART_TITLES
CAVEAT = (
    "Device memory for the training state only: parameters, gradients, master copy and optimizer state, "
    "values x their dtype's size. No activations, no XLA temporaries or buffers, no framework overhead; "
    "and not a checkpoint size (a checkpoint writes a replicated array once)."
)


# --- settings from a link, the session or a widget ------------------------------------------------


# Each setting's check is its declaration's (dcsim.requests.training.TRAINING): a link's or a box's text as the
# link writes it, or a ValueError saying what is allowed.
parse_zero = TRAINING["zero"].read  # a ZeRO stage, as the picker holds it ("3")
parse_parts_text = TRAINING["parts"].read  # parts, as the link writes them (grads,optimizer; none)
parse_grad = TRAINING["grad"].read
parse_master = TRAINING["master"].read
parse_param = TRAINING["param"].read


def parse_budget(text: str) -> tuple[str, int]:
    """The budget box's text (stripped) and its exact bytes; raises ValueError when it has no unit."""
    text = TRAINING["devmem"].read(text)
    return text, amounts.parse_budget(text)


STEP_FRAGMENT = "memory.step"  # the page's fragment: the step's settings and every figure


def seeded(name: str, default: str, parse: Callable[[str], Any], limit: int = MAX_SETTING_CHARS) -> str:
    """The widget key of the Memory page's setting ``name`` (``frame.seeded_setting``)."""
    return frame.seeded_setting(PAGE, name, default, parse, limit=limit)


def parsed(name: str, text: str, parse: Callable[[str], T], what: str) -> T:
    """``parse(text)`` or the last valid value (``frame.parsed_setting``)."""
    return frame.parsed_setting(PAGE, name, text, parse, what)


def seed_split() -> None:
    """Seed the ZeRO stage picker (and the parts picker): from the link's ``zero`` or ``parts``
    (one of them: a link with both keeps ``zero``), else from this session's last visit, else
    ZeRO-3. A bad value is named in a warning and ZeRO-3 is used."""
    if STAGE_KEY in st.session_state:
        return
    linked = [name for name in ("zero", "parts") if name in st.query_params]
    if linked == ["zero", "parts"]:
        st.warning(
            "Link: `parts` is ignored: the link also gives `zero`, and a link names either the ZeRO stage or "
            "the parts to split, not both.",
            icon=frame.LINK_ICON,
        )
    split = st.session_state.get(LAST_SPLIT, ("zero", DEFAULT_ZERO))
    if linked and linked[0] == "zero":
        split = ("zero", frame.setting_from_link("zero", DEFAULT_ZERO, parse_zero, limit=MAX_SETTING_CHARS)[1])
    elif linked:
        text, problem = state.page_setting("parts", DEFAULT_PARTS, limit=trainings.MAX_PARTS_CHARS)
        try:
            split = ("parts", parse_parts_text(text)) if problem is None else ("zero", DEFAULT_ZERO)
        except ValueError as err:
            problem = f"Link: `parts`: {err}"
        if problem is not None:
            st.warning(frame.plain(f"{problem.rstrip('.')}; using ZeRO-{DEFAULT_ZERO}."), icon=frame.LINK_ICON)
            split = ("zero", DEFAULT_ZERO)
    kind, text = split
    st.session_state[STAGE_KEY] = text if kind == "zero" else FREE_PARTS
    parts = trainings.parse_parts(text) if kind == "parts" else STAGES[int(DEFAULT_ZERO)]
    st.session_state[PARTS_KEY] = [part for part in PARTS if part in parts]


def remember_split(training: Training) -> None:
    """What the stage picker shows, for when the person comes back to the page (a page switch drops
    the pickers' state): the stage, or the parts named freely."""
    st.session_state[LAST_SPLIT] = (
        ("zero", str(training.zero)) if training.zero is not None else ("parts", trainings.parts_text(training.shard))
    )


def stage_label(choice: str) -> str:
    """The stage picker's words for a choice."""
    if choice == FREE_PARTS:
        return "Name the parts to split"
    return trainings.STAGE_HELP[int(choice)].split(":")[0] + f": {STAGE_SHORT[int(choice)]}"


# --- a training step's settings (the activations) -----------------------------------------------------

NO_SEQUENCE = TRAINING["seq"].default
DEFAULT_MICRO_BATCH = TRAINING["mb"].default
DEFAULT_REMAT = TRAINING["remat"].default
DEFAULT_ATTENTION = TRAINING["attn"].default
DEFAULT_COMPUTE_DTYPE = TRAINING["cdtype"].default
SWITCH = ("off", "on")
DEFAULT_CAPACITY = TRAINING["cf"].default
MAX_CACHED_ACTIVATIONS = 64


parse_sequence = TRAINING["seq"].read  # none (the state alone) or a sequence's tokens, as the box holds them
parse_micro_batch = TRAINING["mb"].read
parse_capacity = TRAINING["cf"].read  # none (dropless) or a capacity factor, as %g writes it


# The step's settings picked from a list: link key -> (the choices, the default). Sequence parallelism
# reads true/false as on/off too (its declaration's switch), and the link writes on/off as it always did.
CHOICES = {
    "remat": (REMATS, DEFAULT_REMAT),
    "attn": (ATTENTIONS, DEFAULT_ATTENTION),
    "cdtype": (COMPUTE_DTYPES, DEFAULT_COMPUTE_DTYPE),
    "sp": (SWITCH, TRAINING["sp"].default),
}


def choice(column: Any, name: str, label: str, help: str | None = None, on_change: Any = None) -> str:
    """The list of the setting ``name`` (a ``CHOICES`` key) in ``column`` (a Streamlit column, whose
    class is private), seeded from the link; a linked value not among the choices is named and
    replaced by the default."""
    choices, default = CHOICES[name]
    return state.held(column.selectbox)(
        label, choices, key=seeded(name, default, TRAINING[name].read), help=help, on_change=on_change
    )


def _step_setting(link: str) -> Any:
    """A ``StepSettings`` attribute: the link key it is written under, its default the request's."""
    return dataclasses.field(default=TRAINING[link].default, metadata={"link": link})


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepSettings:
    """The step's settings as the link writes them, each under the link key its field names;
    ``step`` is the engine's ``Step`` (None without a sequence)."""

    sequence: str = _step_setting("seq")
    micro_batch: str = _step_setting("mb")
    remat: str = _step_setting("remat")
    attention: str = _step_setting("attn")
    compute_dtype: str = _step_setting("cdtype")
    sequence_parallel: str = _step_setting("sp")
    capacity: str = _step_setting("cf")

    def params(self) -> dict[str, str]:
        return {field.metadata["link"]: getattr(self, field.name) for field in dataclasses.fields(self)}

    def step(self, moe: bool) -> Any:
        if self.sequence == NO_SEQUENCE:
            return None
        from dcsim.memory.activations import Step

        return Step(
            sequence=int(self.sequence),
            micro_batch=int(self.micro_batch),
            remat=self.remat,
            attention=self.attention,
            compute_dtype=self.compute_dtype,
            sequence_parallel=is_on(TRAINING["sp"], self.sequence_parallel),
            capacity_factor=None if self.capacity == DEFAULT_CAPACITY or not moe else float(self.capacity),
        )


@st.cache_data(max_entries=MAX_CACHED_ACTIVATIONS, show_spinner="Tracing the step's residuals…")
def _cached_activations(
    config_json: str, step_json: str, param_dtype: str, mesh_text: str, with_recompute: bool = False
) -> Any:
    from dcsim.memory import activations

    config = ModelConfig.from_json(config_json)
    step = activations.Step(**json.loads(step_json))
    try:
        return activations.cached_trace(config, step, param_dtype, meshes.parse_mesh(mesh_text), with_recompute)
    except (TypeError, ValueError) as err:
        return str(err)


def cached_activations(
    config: ModelConfig, step: Any, param_dtype: str, mesh: meshes.MeshSpec, with_recompute: bool = False
) -> Any:
    """The step's ``ActivationReport`` on ``mesh`` (or the engine's refusal as text), cached;
    ``with_recompute`` adds what the policy recomputes (two more traces, asked for after the
    figures are on screen)."""
    return _cached_activations(
        config.architecture().to_json(),
        json.dumps(dataclasses.asdict(step), sort_keys=True),
        param_dtype,
        mesh.text,
        with_recompute,
    )


def sequence_frame(config: ModelConfig, step: Any, param_dtype: str, mesh: meshes.MeshSpec) -> pd.DataFrame:
    """Activations per device at a quarter, half, one and two times the step's sequence (within the
    model's positions), under every remat policy: sequence, policy, gib, bytes_text. Sequences the
    engine refuses are left out."""
    sequences = sorted({max(1, step.sequence * k // 4) for k in (1, 2, 4, 8)})
    records = []
    for policy in REMATS:
        for sequence in sequences:
            traced = cached_activations(
                config, dataclasses.replace(step, remat=policy, sequence=sequence), param_dtype, mesh
            )
            if isinstance(traced, str):
                continue
            records.append(
                {
                    "sequence": sequence,
                    "policy": policy,
                    "bytes": traced.bytes_per_device,
                    "gib": traced.bytes_per_device / memory_charts.GIB,
                    "bytes_text": units.bytes_exact(traced.bytes_per_device),
                }
            )
    return pd.DataFrame(records, columns=["sequence", "policy", "bytes", "gib", "bytes_text"])


RECIPE = trainings.RECIPE  # the usual mixed precision: bf16 params, fp32 master and moments


def use_recipe() -> None:
    """The named recipe's dtypes into the pickers (a button's callback, before they are drawn)."""
    for name, value in RECIPE.items():
        st.session_state[f"{state.WIDGET_PREFIX}{PAGE}.{name}"] = value


def master_note(training: Training) -> str | None:
    """What the setup says when no master copy is kept beside low-precision parameters."""
    if training.master_dtype is not None or training.param_dtype in ("float32", "float64"):
        return None
    return (
        f"No master copy is kept: the optimizer updates the {training.param_dtype} parameters in place and keeps "
        f"its state in {training.param_dtype}. The usual mixed-precision recipe keeps a float32 master copy and "
        "float32 moments."
    )


def _step_json(setup: Setup) -> str:
    return "" if setup.step is None else json.dumps(dataclasses.asdict(setup.step), sort_keys=True)


# --- the setup a run computes ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Setup:
    """Everything the page's figures depend on besides the model: the mesh, strategy and rules,
    the training setup and the budget (exact bytes, and the text it was typed as)."""

    mesh: meshes.MeshSpec
    strategy: str
    rules: tuple[meshes.Rule, ...]
    training: Training
    budget: int
    budget_text: str
    step_settings: StepSettings = StepSettings()
    step: Any = None  # the activations' ``Step``, or None for the state alone

    def params(self) -> dict[str, str]:
        """The page's settings as its link writes them."""
        training = self.training
        params = {"mesh": self.mesh.text, "strategy": self.strategy}
        if self.strategy == "custom":
            params["rules"] = layout.rules_text(self.rules)
        split = (
            {"zero": str(training.zero)}
            if training.zero is not None
            else {"parts": trainings.parts_text(training.shard)}
        )
        own = split | {
            "optim": training.optimizer,
            "param": training.param_dtype,
            "grad": training.grad_dtype or SAME_AS_PARAMS,
            "master": training.master_dtype or NO_MASTER,
            "devmem": self.budget_text,
        }
        return params | TRAINING.encode(own | self.step_settings.params())  # each as the declaration writes it

    def with_training(self, training: Training) -> Setup:
        return dataclasses.replace(self, training=training)


def make_training(stage: str, parts: list[str], optimizer_name: str, param: str, grad: str, master: str) -> Training:
    """The ``Training`` the pickers describe (each value already one of the picker's choices)."""
    fields: dict[str, Any] = {
        "optimizer": optimizer_name,
        "param_dtype": param,
        "grad_dtype": None if grad == SAME_AS_PARAMS else grad,
        "master_dtype": None if master == NO_MASTER else master,
    }
    if stage == FREE_PARTS:
        return Training.sharding(frozenset(parts), **fields)
    return Training.stage(int(stage), **fields)


def training_json(training: Training) -> str:
    """The setup as cache-key text (``training_from_json`` reads it back)."""
    fields = dataclasses.asdict(training) | {"shard": sorted(training.shard)}
    return json.dumps(fields, sort_keys=True)


def training_from_json(text: str) -> Training:
    fields = json.loads(text)
    return Training(**{**fields, "shard": frozenset(fields["shard"])})


# --- cached engine answers -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Outcome:
    """The memory report, or the engine's one-line refusal (a layout it cannot make)."""

    memory: MemoryReport | None = None
    error: str | None = None


def _key(config: ModelConfig, setup: Setup) -> tuple[str, str, str, str, str]:
    rules = layout.rules_text(setup.rules) if setup.strategy == "custom" else ""
    return config.architecture().to_json(), setup.mesh.text, setup.strategy, rules, training_json(setup.training)


def _parts(config_json: str, mesh_text: str, strategy: str, rules: str, training: str) -> tuple[Any, ...]:
    report = cache.count(ModelConfig.from_json(config_json))
    return (
        report,
        meshes.parse_mesh(mesh_text),
        strategy,
        layout.parse_rules_text(rules) if rules else (),
        training_from_json(training),
    )


# st.cache_resource, not st.cache_data, as for the count (``cache._count``): a report is frozen, and
# cache_data unpickled a copy of Llama 2 70B's 2,900 state arrays five times a run (one a ZeRO
# stage), some 150,000 objects that set off a 180 ms full garbage collection every other run.
@st.cache_resource(max_entries=MAX_CACHED_MEMORY, show_spinner=False)
def _cached_memory(
    config_json: str, mesh_text: str, strategy: str, rules: str, training: str, step_json: str = ""
) -> Outcome:
    parts = _parts(config_json, mesh_text, strategy, rules, training)
    try:
        staged = _stage_activations(config_json, step_json, parts[4].param_dtype, parts[1])
        return Outcome(memory=compute_memory(*parts, stage_activations=staged))
    except (TypeError, ValueError) as err:
        return Outcome(error=str(err))


def _stage_activations(
    config_json: str, step_json: str, param_dtype: str, mesh: meshes.MeshSpec
) -> Callable[[tuple[range, ...]], tuple[int, ...]] | None:
    """Each stage's activations on a mesh with a ``stage`` axis (``dcsim.memory.stages``, 1F1B with at
    least as many micro-batches as stages), so that the device shown is the stage's that holds the
    most; None without a step, or where the step does not trace (the page says why)."""
    if not step_json or stages.num_stages(mesh.axes) == 1:
        return None
    traced = _cached_activations(config_json, step_json, param_dtype, mesh.text)
    if isinstance(traced, str):
        return None
    return lambda blocks: stages.activation_bytes(traced, blocks)


def activation_bytes_of(held: Any, traced: Any) -> int | None:
    """The step's activations on the device ``held`` shows: with a ``stage`` axis, its stage's
    micro-batches in flight (``dcsim.memory.stages``); else the traced step's."""
    if traced is None:
        return None
    split = None if held is None else held.pipeline
    if split is not None and split.activation_bytes is not None:
        return int(split.activation_bytes[split.stage])
    return int(traced.bytes_per_device)


def cached_memory(config: ModelConfig, setup: Setup) -> Outcome:
    """``compute_memory`` of the configuration and setup, cached per their text (and the step's,
    which on a mesh with a ``stage`` axis picks the stage shown)."""
    return _cached_memory(*_key(config, setup), _step_json(setup))


def lays_out(
    config: ModelConfig, strategy: str, rules: tuple[meshes.Rule, ...], training: Training
) -> Callable[[meshes.MeshSpec], bool]:
    """Whether the training state of ``training`` can be laid out on a mesh (``cached_memory``): a
    part the stage does not split is whole over the data axes, and split over `model` only as the
    strategy splits it, so ZeRO-0 takes any mesh the strategy lays out."""

    def accepts(mesh: meshes.MeshSpec) -> bool:
        setup = Setup(mesh=mesh, strategy=strategy, rules=rules, training=training, budget=0, budget_text="")
        return cached_memory(config, setup).error is None

    return accepts


def trains_on(config: ModelConfig, setup: Setup) -> Callable[[meshes.MeshSpec], bool]:
    """Whether ``setup`` trains on a mesh: its state lays out (``lays_out``) and its step, if any,
    traces there (Megatron's split needs the `model` axis to divide the heads), a sequence past the
    model's positions taken at them: the mesh is offered apart from the sequence."""
    state_on = lays_out(config, setup.strategy, setup.rules, setup.training)
    step = setup.step
    limit = sequence_limit(config) if step is not None and registry.family_of(config).trains else None
    if limit is not None and step.sequence > limit:
        step = dataclasses.replace(step, sequence=limit)

    def accepts(mesh: meshes.MeshSpec) -> bool:
        if not state_on(mesh):
            return False
        return step is None or not isinstance(cached_activations(config, step, setup.training.param_dtype, mesh), str)

    return accepts


@st.cache_data(max_entries=MAX_CACHED_FITS, show_spinner="Laying the state out on every mesh of the sweep…")
def _cached_sweep(config_json: str, mesh_text: str, strategy: str, rules: str, training: str) -> search.Sweep | str:
    """The state on every candidate mesh: what a new budget or a new sequence leaves as it is."""
    report, mesh, strategy, parsed_rules, setup = _parts(config_json, mesh_text, strategy, rules, training)
    try:
        return search.sweep(report, mesh, strategy, parsed_rules, setup)
    except (TypeError, ValueError) as err:
        return str(err)


@st.cache_data(max_entries=MAX_CACHED_FITS, show_spinner=False)
def _cached_fit(
    config_json: str, mesh_text: str, strategy: str, rules: str, training: str, amount: int, step_json: str = ""
) -> search.Fit | str:
    swept = _cached_sweep(config_json, mesh_text, strategy, rules, training)
    if isinstance(swept, str):
        return swept
    per_mesh = None
    if step_json:
        from dcsim.memory import activations

        config = ModelConfig.from_json(config_json)
        step = activations.Step(**json.loads(step_json))
        param_dtype = training_from_json(training).param_dtype

        def per_mesh(candidate: meshes.MeshSpec) -> int:
            return activations.cached_trace(config, step, param_dtype, candidate).bytes_per_device

        def per_stage(candidate: meshes.MeshSpec, _: tuple[int, ...]) -> tuple[int, ...]:
            held = activations.cached_trace(config, step, param_dtype, candidate)
            count = stages.num_stages(candidate.axes)
            return stages.activation_bytes(held, stages.stage_blocks(len(held.blocks), count))

    try:
        return search.answer(
            swept, amount, activations=per_mesh, stage_activations=None if per_mesh is None else per_stage
        )
    except (TypeError, ValueError) as err:
        return str(err)


def cached_fit(config: ModelConfig, setup: Setup) -> search.Fit | str:
    """``search.fit`` over the current mesh's candidates and the budget (or the refusal), cached;
    with a step, each candidate's activations count too."""
    return _cached_fit(*_key(config, setup), setup.budget, _step_json(setup))


@st.cache_data(max_entries=MAX_CACHED_FITS, show_spinner="Trying what would make it fit…")
def _cached_verdict(
    config_json: str, mesh_text: str, strategy: str, rules: str, training: str, amount: int, step_json: str = ""
) -> Any:
    from dcsim.memory import remedies

    report, mesh, strategy, parsed_rules, setup = _parts(config_json, mesh_text, strategy, rules, training)
    config = ModelConfig.from_json(config_json)
    step = None
    if step_json:
        from dcsim.memory import activations

        step = activations.Step(**json.loads(step_json))
    measure = remedies.engine_measure(config, report, strategy, parsed_rules)
    try:
        staged = _stage_activations(config_json, step_json, setup.param_dtype, mesh)
        held = compute_memory(report, mesh, strategy, parsed_rules, setup, stage_activations=staged)
        footprint = TrainingReport.of(held, measure(mesh, setup, step)[1], amount)
        fit = _cached_fit(config_json, mesh_text, strategy, rules, training, amount, step_json)
        return remedies.verdict(footprint, mesh, setup, step, measure, None if isinstance(fit, str) else fit)
    except (TypeError, ValueError) as err:
        return str(err)


def cached_verdict(config: ModelConfig, setup: Setup) -> Any:
    """The verdict for the page's mesh and the remedies tried (``dcsim.memory.remedies``), cached; or
    the refusal's text."""
    return _cached_verdict(*_key(config, setup), setup.budget, _step_json(setup))


def verify_key(config: ModelConfig, setup: Setup) -> str:
    return json.dumps(_key(config, setup))


def verified(key: str) -> Any:
    """This session's XLA answer for ``key`` (a ``Verified`` or the refusal's text), if any."""
    return st.session_state.get(VERIFIED, {}).get(key)


def remember_verified(key: str, answer: Any) -> None:
    """Keep ``answer`` for ``key``, dropping the oldest past ``MAX_VERIFIED``."""
    kept = st.session_state.setdefault(VERIFIED, {})
    kept.pop(key, None)
    kept[key] = answer
    while len(kept) > MAX_VERIFIED:
        kept.pop(next(iter(kept)))


def offer_sequence_limit(config: ModelConfig, step: Any) -> None:
    """A sequence the model refuses (past its positions, after a switch of model) offered back at the
    model's limit in one click. The click reruns the whole page (``st.rerun``), as the mesh's offer
    does: a fragment-keyed rerun from the click's callback left the box showing the refused sequence
    while every figure and the link had taken the limit (Streamlit 1.67, seen in Chromium)."""
    limit = sequence_limit(config) if registry.family_of(config).trains else None
    if limit is None or step.sequence <= limit:
        return
    frame.offer(
        st,
        f"Use {units.many(limit, 'token')}, this model's positions",
        {seeded("seq", NO_SEQUENCE, parse_sequence): str(limit)},
        help=f"{units.many(step.sequence, 'token')} is past the model's {units.count(limit)} positions.",
        rerun=st.rerun,
    )

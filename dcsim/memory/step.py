"""A training step's request, checked without JAX: what a link, a flag, a comparison's JSON or a
page asks for (sequence, micro-batch, remat policy, attention, compute dtype, expert capacity,
sequence parallelism), and whether a model can run it (a family with a training forward, a sequence
within its positions, heads and widths a tensor-parallel axis divides).

Apart from ``dcsim.memory.activations``, which traces the step with JAX: a comparison's link and
file check their steps with this alone. The names of the remat policies and attention kinds are
those of ``dcsim.model.layers`` (which builds them with JAX); ``tests/test_activations.py`` holds
them equal.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dcsim.inputs import as_int, check_choice, number_from_text, show
from dcsim.model import presets, registry
from dcsim.model.config import ModelConfig
from dcsim.model.hparams import MAX_POSITIONS

if TYPE_CHECKING:
    from dcsim.model.forward import Forward

POLICY_HELP = {
    "none": "no remat: every residual the backward pass reads is kept; no forward is recomputed",
    "full": "nothing_saveable: each block keeps only its input and recomputes its whole forward in the backward",
    "dots": "dots_saveable: the outputs of every matmul are kept (attention's score and value products too), "
    "the elementwise work between them recomputed",
    "dots-no-batch": "dots_with_no_batch_dims_saveable: the outputs of matmuls without batch dimensions (the "
    "projections) are kept; attention's batched products and the elementwise work are recomputed",
    "minimal": "MaxText's minimal: the named projections (query, key, value, out, the MLP's in and out) are kept; "
    "attention and the elementwise work are recomputed",
}
ATTENTION_HELP = {
    "flash": "a blockwise kernel (FlashAttention, cuDNN, Pallas splash): q, k, v, the output and the "
    "log-sum-exp are saved, never the s x s probabilities",
    "naive": "softmax attention as written: the s x s probabilities are saved, the term quadratic in the sequence",
}
POLICY_NAMES = tuple(POLICY_HELP)  # ``dcsim.model.forward.REMAT_POLICIES``' keys, in its order
ATTENTION_KINDS = ("naive", "flash")  # ``dcsim.model.forward.ATTENTION_KINDS``
COMPUTE_DTYPES = ("bfloat16", "float16", "float32")
MAX_MICRO_BATCH = 1 << 16  # sequences a replica a step; past any real run, small enough to trace


def check_sequence(value: Any, label: str = "the sequence", shown: Any = None) -> int:
    return as_int(value, label, minimum=1, maximum=MAX_POSITIONS, why="tokens a sequence", shown=shown)


def check_micro_batch(value: Any, label: str = "the micro-batch", shown: Any = None) -> int:
    return as_int(
        value, label, minimum=1, maximum=MAX_MICRO_BATCH, why="sequences a data-parallel replica a step", shown=shown
    )


def sequence_from_text(text: str, label: str) -> int:
    """A sequence as typed (a flag, a link field), checked under ``label``: ``'4096'``, ``'4e3'``."""
    return check_sequence(number_from_text(text.strip()), label, shown=text)


def micro_batch_from_text(text: str, label: str) -> int:
    """A micro-batch as typed (a flag, a link field), checked under ``label``."""
    return check_micro_batch(number_from_text(text.strip()), label, shown=text)


def check_capacity_factor(value: Any, label: str = "the capacity factor") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{label} must be a number from 0.01 to 64 (or none: dropless), got {show(value)}")
    if not 0.01 <= value <= 64:
        raise ValueError(f"{label} must be a number from 0.01 to 64 (or none: dropless), got {show(value)}")
    return float(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One training step's shape and how it is computed.

    Attributes:
      sequence: tokens a sequence.
      micro_batch: sequences a data-parallel replica a step (not the global batch).
      remat: a key of ``POLICIES``, applied to every block.
      attention: ``flash`` or ``naive`` (``ATTENTION_HELP``).
      compute_dtype: the dtype the forward runs in, and so the residual stream's.
      capacity_factor: routed experts: None for dropless dispatch, else GShard's capacity factor.
      sequence_parallel: Megatron's sequence parallelism beside the ``model`` axis.
    """

    sequence: int
    micro_batch: int = 1
    remat: str = "none"
    attention: str = "flash"
    compute_dtype: str = "bfloat16"
    capacity_factor: float | None = None
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        check_sequence(self.sequence, "sequence")
        check_micro_batch(self.micro_batch, "micro_batch")
        check_choice(self.remat, POLICY_NAMES, "the remat policy")
        check_choice(self.attention, ATTENTION_KINDS, "the attention kind")
        check_choice(self.compute_dtype, COMPUTE_DTYPES, "the compute dtype")
        check_capacity_factor(self.capacity_factor)
        if not isinstance(self.sequence_parallel, bool):
            raise TypeError(f"`sequence_parallel` must be true or false, got {show(self.sequence_parallel)}")

    @property
    def forward(self) -> Forward:
        from dcsim.model.forward import Forward  # JAX: only once the step is traced

        dispatch = "dropless" if self.capacity_factor is None else "capacity"
        return Forward(attention=self.attention, dispatch=dispatch, capacity_factor=self.capacity_factor or 1.0)

    @property
    def dispatch_text(self) -> str:
        if self.capacity_factor is None:
            return "dropless (each token's chosen experts only, jax.lax.ragged_dot, as MaxText)"
        return f"GShard capacity, factor {self.capacity_factor:g} (tokens past an expert's capacity dropped)"


# --- the step against a model -----------------------------------------------------------------------


def _split_over(value: int, axis: str, t: int, what: str) -> int:
    if value % t:
        raise ValueError(f"the mesh's {axis} axis ({t}) must divide {what} ({value:,}) to split it as Megatron does")
    return value // t


def split_hparams(family: registry.Family, hparams: Mapping[str, Any], axis: str, t: int) -> dict[str, Any]:
    """The block one device of a tensor-parallel axis ``axis`` of ``t`` runs: heads, KV heads, the feed-forward
    widths and the vocabulary divided by t (KV heads fewer than t are repeated, one a device, as
    Megatron and vLLM do; the vocabulary is padded up to a multiple of t, as Megatron pads it)."""
    h = dict(hparams)
    if t == 1:
        return h
    heads = h["num_heads"]
    if not family.latent(h):
        h["head_dim"] = h.get("head_dim") or h["d_model"] // heads
        kv = h["num_kv_heads"]
        if kv % t == 0:
            h["num_kv_heads"] = kv // t
        elif t % kv == 0:
            h["num_kv_heads"] = 1
        else:
            raise ValueError(
                f"the mesh's {axis} axis ({t}) must divide the KV heads ({kv:,}) or be a multiple of them "
                "to split attention as Megatron does"
            )
    h["num_heads"] = _split_over(heads, axis, t, "the attention heads")
    for name, what in family.tensor_widths(h):
        h[name] = _split_over(h[name], axis, t, what)
    h["vocab_size"] = -(-h["vocab_size"] // t)
    return h


def sequence_limit(config: ModelConfig) -> int | None:
    """The longest sequence the model takes: its positions, or None when any length is taken (no
    position table, or rotary positions scaled past it)."""
    hparams = presets.resolved_hparams(config)
    positions = hparams.get("max_positions")
    return positions if positions and not hparams.get("rope_scaling") else None


def check_for_model(config: ModelConfig, step: Step, tensor_parallel: tuple[str, int] | None = None) -> dict[str, Any]:
    """The model's hyperparameters, once the step is checked against them: a family with a
    training forward, a sequence within the positions; with ``tensor_parallel`` (a mesh axis's name
    and size), a sequence the sequence-parallel axis divides and heads and widths it splits.
    Raises ValueError naming the rule and the value."""
    family = registry.family_of(config)
    if not family.trains:
        what = "the Dense stack" if config.family is None else f"the {config.family} family"
        raise ValueError(
            f"activations are traced for decoder-only language models (families "
            f"{', '.join(registry.names(lambda family: family.trains))}); {what} has no training forward here"
        )
    hparams = presets.resolved_hparams(config)
    positions = sequence_limit(config)
    if positions is not None and step.sequence > positions:
        raise ValueError(
            f"the sequence ({step.sequence:,} tokens) must be at most the model's positions "
            f"(max_positions {positions:,})"
        )
    axis, t = tensor_parallel or ("", 1)
    if step.sequence_parallel and step.sequence % t:
        raise ValueError(
            f"sequence parallelism splits the sequence over the mesh's {axis} axis ({t}), which must divide "
            f"it; got a sequence of {step.sequence:,} tokens"
        )
    split_hparams(family, hparams, axis, t)  # refuses what the model axis cannot split
    return hparams


# --- a step from its fields ------------------------------------------------------------------------


def _choice_of(choices: Sequence[str]) -> Any:
    return lambda value, label: check_choice(value, tuple(choices), f"`{label}`")


# The fields a step is given by in a comparison's JSON and link (``dcsim.compare.STEP_FIELDS``), and how
# each is checked: as JSON gives it (numbers as numbers), and as text (a link's field, a box). The
# others keep the step's defaults.
FIELDS = {
    "sequence": check_sequence,
    "micro_batch": check_micro_batch,
    "remat": _choice_of(POLICY_NAMES),
    "attention": _choice_of(ATTENTION_KINDS),
}
FIELDS_AS_TEXT = {
    **FIELDS,
    "sequence": sequence_from_text,
    "micro_batch": micro_batch_from_text,
}


def check_field(key: str, value: Any, label: str, as_text: bool = False) -> Any:
    """One of a step's ``FIELDS``, checked as the memory command checks it, named ``label``
    (a JSON key or a link field, without quotes) in a refusal."""
    return (FIELDS_AS_TEXT if as_text else FIELDS)[key](value, label)


def from_fields(values: dict[str, Any], label: Any = None, as_text: bool = False) -> Step | None:
    """A step from its fields (``FIELDS``' keys; absent ones take the memory
    command's defaults), or None without a ``sequence``. Each value is checked first, under
    ``label(key)`` (the JSON key unless told), so a bad one is named whatever else is given; the
    step's other settings without a sequence are refused, as ``memory`` refuses them."""
    label = label or (lambda key: key)
    checked = {key: check_field(key, value, label(key), as_text) for key, value in values.items()}
    if "sequence" not in checked:
        if checked:
            raise ValueError(
                f"{', '.join(f'`{label(key)}`' for key in checked)}: for a training step's activations; "
                f"give `{label('sequence')}` too"
            )
        return None
    return Step(**checked)

"""The Memory page's request (and ``memory``'s): which parts are split, the optimizer, the dtypes,
the budget, and a training step's settings (the activations)."""

from __future__ import annotations

from dcsim.inputs import number_from_text, show
from dcsim.memory import training
from dcsim.model.optimizer import OPTIMIZER_NAMES, check_optimizer
from dcsim.requests import MESH_KEYS, Parser, budget, declared, one_of, switch, ticked

REMATS = ("none", "full", "dots", "dots-no-batch", "minimal")  # dcsim.memory.activations.POLICIES' names
ATTENTIONS = ("flash", "naive")
COMPUTE_DTYPES = ("bfloat16", "float16", "float32")
# The policies' one-line help, for --help without importing JAX (dcsim.memory.activations has the same).
REMAT_HELP = (
    ("none", "no remat (default)"),
    ("full", "each block keeps only its input"),
    ("dots", "the matmuls' outputs kept"),
    ("dots-no-batch", "the projections' outputs kept"),
    ("minimal", "MaxText's named projections kept"),
)


def _dtype(what: str) -> Parser:
    def parse(text: str, name: str) -> str:
        return training.check_dtype(text, what)

    return parse


def _dtype_or(word: str, what: str, meaning: str) -> Parser:
    """One of the training dtypes, or ``word`` (``meaning``), named in the message."""

    def parse(text: str, name: str) -> str:
        if text == word:
            return text
        try:
            return training.check_dtype(text, what)
        except ValueError as err:
            raise ValueError(f"{err}, or {word} ({meaning})") from None

    return parse


def _optimizer(text: str, name: str) -> str:
    return check_optimizer(text)


def _stage(text: str, name: str) -> str:
    return str(training.check_stage(text))


def _parts(text: str, name: str) -> str:
    return training.parts_text(training.parse_parts(text))


def _sequence(text: str, name: str) -> str:
    from dcsim.memory.activations import sequence_from_text  # the tracer's module: JAX, when asked

    return str(sequence_from_text(text.strip(), name))


def _micro_batch(text: str, name: str) -> str:
    from dcsim.memory.activations import micro_batch_from_text

    return str(micro_batch_from_text(text.strip(), name))


def _capacity(text: str, name: str) -> str:
    from dcsim.memory.activations import check_capacity_factor

    value = number_from_text(text.strip())
    if not isinstance(value, (int, float)):
        raise ValueError(f"`{name}` must be a number from 0.01 to 64 (or none: dropless), got {show(text)}")
    factor = check_capacity_factor(value, f"`{name}`")
    short = f"{factor:g}"
    return short if float(short) == factor else repr(factor)  # 1.25 as typed, and no digit lost


TRAINING = declared(
    "training",
    {
        "zero": _stage,
        "parts": _parts,
        "optim": _optimizer,
        "param": _dtype("param"),
        "grad": _dtype_or("same", "grad", "the params' dtype"),
        "master": _dtype_or(training.NO_MASTER, "master", "no master copy"),
        "devmem": budget,
        "seq": _sequence,
        "mb": _micro_batch,
        "remat": one_of(REMATS),
        "attn": one_of(ATTENTIONS),
        "cdtype": one_of(COMPUTE_DTYPES),
        "sp": switch("off", "on"),
        "cf": _capacity,
    },
    title="The Memory page's keys",
    faces="the Memory page (`/memory`) and `memory`",
    shared=MESH_KEYS + ", remembered across the two pages for the session",
    words={
        "stages": "; ".join(f"{stage}: {training.STAGE_HELP[stage].split(': ', 1)[1]}" for stage in training.STAGES),
        "parts": ", ".join(training.PARTS),
        "part_words": ticked(training.PARTS),
        "no_master": training.NO_MASTER,
        "optimizer_words": ticked(OPTIMIZER_NAMES),
        "dtypes": ", ".join(training.DTYPES),
        "dtype_words": ticked(training.DTYPES),
        "remats": "; ".join(f"{name}: {text}" for name, text in REMAT_HELP),
    },
    choices={"optim": OPTIMIZER_NAMES},
    notes="A link gives `zero` or `parts`; with both, `parts` is ignored and said so.",
)

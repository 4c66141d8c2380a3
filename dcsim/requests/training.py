"""The Memory page's request (and ``memory``'s): which parts are split, the optimizer, the dtypes,
the budget, and a training step's settings (the activations)."""

from __future__ import annotations

from dcsim.inputs import number_from_text, show
from dcsim.memory import training
from dcsim.model.optimizer import OPTIMIZER_NAMES, check_optimizer
from dcsim.requests import MESH_KEYS, Field, Parser, Request, budget, one_of, switch

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
    return f"{check_capacity_factor(value, f'`{name}`'):g}"


_DTYPE_WORDS = ", ".join(f"`{name}`" for name in training.DTYPES)

TRAINING = Request(
    name="training",
    title="The Memory page's keys",
    faces="the Memory page (`/memory`) and `memory`",
    shared=MESH_KEYS + ", remembered across the two pages for the session",
    fields=(
        Field(
            link="zero",
            flag="--zero",
            json="zero",
            parse=_stage,
            default="3",
            metavar="K",
            help="ZeRO stage (default 3, what fsdp means): "
            + "; ".join(f"{stage}: {training.STAGE_HELP[stage].split(': ', 1)[1]}" for stage in training.STAGES),
            meaning="the ZeRO stage, which parts are split over the mesh: `0` none, `1` the optimizer state and "
            "master copy, `2` the gradients too, `3` every part",
        ),
        Field(
            link="parts",
            flag="--shard",
            json="shard",
            parse=_parts,
            default="master,optimizer",
            metavar="PARTS",
            help=f"the parts to split, a comma list of {', '.join(training.PARTS)} (or {training.NO_MASTER}); "
            "the others are whole on every device",
            meaning="instead of `zero`: the parts split, named freely, as a comma list of "
            + ", ".join(f"`{part}`" for part in training.PARTS)
            + ", or `none`",
            limit=training.MAX_PARTS_CHARS,
        ),
        Field(
            link="optim",
            flag="--optimizer",
            json="optimizer",
            parse=_optimizer,
            default="adam",
            flag_default="adam",
            choices=OPTIMIZER_NAMES,
            help="the optax optimizer whose state is held (default adam: two moments per parameter and a step count)",
            meaning="the optax optimizer: " + ", ".join(f"`{name}`" for name in OPTIMIZER_NAMES),
        ),
        Field(
            link="param",
            flag="--param-dtype",
            json="param_dtype",
            parse=_dtype("param"),
            default="bfloat16",
            flag_default="bfloat16",
            metavar="D",
            help=f"the parameters' dtype: {', '.join(training.DTYPES)} (default bfloat16, as mixed-precision training "
            "keeps them)",
            meaning=f"the parameters' dtype: {_DTYPE_WORDS}",
        ),
        Field(
            link="grad",
            flag="--grad-dtype",
            json="grad_dtype",
            parse=_dtype_or("same", "grad", "the params' dtype"),
            default="same",
            metavar="D",
            help="the gradients' dtype (default: the parameters')",
            meaning="the gradients' dtype, as `param`, or `same` (the parameters')",
        ),
        Field(
            link="master",
            flag="--master-dtype",
            json="master_dtype",
            parse=_dtype_or(training.NO_MASTER, "master", "no master copy"),
            default=training.NO_MASTER,
            flag_default=training.NO_MASTER,
            metavar="D",
            help=f"the master copy's dtype, or {training.NO_MASTER} for no master copy (default {training.NO_MASTER}); "
            "the optimizer state takes the master copy's dtype when there is one, else the parameters'",
            meaning="the master copy's dtype, as `param`, or `none` (no master copy; the optimizer state is then in "
            "the parameters' dtype)",
        ),
        Field(
            link="devmem",
            flag="--budget",
            json="budget.bytes",
            parse=budget,
            default="80GiB",
            metavar="SIZE",
            help="bytes a device may hold, with a unit (80GiB, 96GB): the smallest mesh that fits, by the ideal share "
            "and by the real layout, growing the mesh's first axis",
            meaning="one device's memory budget, with its unit: `80GiB`, `96 GB`, `1.5TiB` (GiB = 2^30 bytes, GB = "
            "10^9). A bare number is refused: 80 could be GiB or bytes",
        ),
        Field(
            link="seq",
            flag="--sequence",
            json="activations.sequence",
            parse=_sequence,
            default="none",
            unset=("none",),
            metavar="S",
            help="tokens a sequence: count the activations the step keeps for the backward pass beside the state",
            meaning="a training step's tokens a sequence: its activations are counted beside the state; `none`: the "
            "state alone",
        ),
        Field(
            link="mb",
            flag="--micro-batch",
            json="activations.micro_batch",
            parse=_micro_batch,
            default="1",
            metavar="B",
            help="sequences a data-parallel replica a step (default 1); data and fsdp axes do not change it",
            meaning="the step's sequences a data-parallel replica",
        ),
        Field(
            link="remat",
            flag="--remat",
            json="activations.policy",
            parse=one_of(REMATS),
            default="none",
            metavar="POLICY",
            help="the remat policy applied to every block: "
            + "; ".join(f"{name}: {text}" for name, text in REMAT_HELP),
            meaning="the remat policy of every block: `none`, `full`, `dots`, `dots-no-batch`, `minimal`",
        ),
        Field(
            link="attn",
            flag="--attention",
            json="activations.attention",
            parse=one_of(ATTENTIONS),
            default="flash",
            metavar="KIND",
            help="flash (default) or naive attention",
            meaning="the attention kind: `flash` or `naive`",
        ),
        Field(
            link="cdtype",
            flag="--compute-dtype",
            json="activations.compute_dtype",
            parse=one_of(COMPUTE_DTYPES),
            default="bfloat16",
            metavar="D",
            help="the dtype the forward runs in (default bfloat16): bfloat16, float16, float32",
            meaning="the dtype the forward runs in: `bfloat16`, `float16`, `float32`",
        ),
        Field(
            link="sp",
            flag="--sequence-parallel",
            json="activations.sequence_parallel",
            parse=switch("off", "on"),
            default="off",
            switch=True,
            help="Megatron's sequence parallelism over the mesh's model axis: the residual stream and the norms split "
            "over the sequence too",
            meaning="`on`: Megatron's sequence parallelism over the mesh's `model` axis",
        ),
        Field(
            link="cf",
            flag="--capacity-factor",
            json="activations.capacity_factor",
            parse=_capacity,
            default="none",
            unset=("none",),
            metavar="F",
            help="Mixture-of-Experts: GShard's capacity factor (tokens past an expert's capacity dropped); default "
            "none: dropless dispatch, each token through its chosen experts only",
            meaning="a Mixture-of-Experts model's capacity factor, 0.01 to 64; `none`: dropless dispatch",
        ),
    ),
    notes="A link gives `zero` or `parts`; with both, `parts` is ignored and said so.",
)

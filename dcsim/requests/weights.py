"""The weight format's request: the format and its options, on the Model and Serving pages and in
``count`` and ``serve``. Pure Python (``dcsim.quant.formats`` checks each value), so ``count`` can
build its flags from it without loading JAX."""

from __future__ import annotations

from dcsim.inputs import number_from_text
from dcsim.quant.formats import BNB, FORMATS, FP8, GGUF, GROUPED, PLAIN, QWIX, check_format
from dcsim.requests import Parser, declared, switch, ticked


def _format_name(text: str, name: str) -> str:
    return check_format(text).name


def _format_option(option: str, example: str) -> Parser:
    def parse(text: str, name: str) -> str:
        return str(getattr(check_format(example, **{option: number_from_text(text.strip())}), option))

    return parse


WEIGHTS = declared(
    "weights",
    {
        "weights": _format_name,
        "group": _format_option("group", "gptq-int4"),
        "bits": _format_option("bits", "gptq-int4"),
        "tile": _format_option("tile", "int4"),
        "qhead": switch("false", "true"),
    },
    title="The weight format's keys (Model and Serving pages)",
    faces="the Model page (`/`, default `none`: the storage dtype alone) and the Serving page (`/serving`, default "
    "`bfloat16`); `count` and `serve`",
    words={
        "plain": ", ".join(PLAIN),
        "qwix": ", ".join(QWIX),
        "grouped": ", ".join(GROUPED),
        "bnb": ", ".join(BNB),
        "fp8": ", ".join(FP8),
        "gguf": ", ".join(GGUF),
        "formats": ticked(FORMATS),
    },
    notes="An option is in the link only when the format has it (`group` for GPTQ and AWQ, `bits` for GPTQ, `tile` "
    "for qwix's tiled formats, `qhead` for qwix, GPTQ and AWQ).",
)

"""The weight format's request: the format and its options, on the Model and Serving pages and in
``count`` and ``serve``. Pure Python (``dcsim.quant.formats`` checks each value), so ``count`` can
build its flags from it without loading JAX."""

from __future__ import annotations

from dcsim.inputs import number_from_text
from dcsim.quant.formats import BNB, FORMATS, FP8, GGUF, GROUPED, PLAIN, QWIX, check_format
from dcsim.requests import Field, Parser, Request, switch

DEFAULT_WEIGHTS = "bfloat16"  # dcsim.serving.request.DEFAULT_WEIGHTS: the Serving page's and serve's


def _format_name(text: str, name: str) -> str:
    return check_format(text).name


def _format_option(option: str, example: str) -> Parser:
    def parse(text: str, name: str) -> str:
        return str(getattr(check_format(example, **{option: number_from_text(text.strip())}), option))

    return parse


WEIGHTS = Request(
    name="weights",
    title="The weight format's keys (Model and Serving pages)",
    faces="the Model page (`/`, default `none`: the storage dtype alone) and the Serving page (`/serving`, default "
    "`bfloat16`); `count` and `serve`",
    fields=(
        Field(
            link="weights",
            flag="--weights",
            json="weights_format",
            parse=_format_name,
            default=DEFAULT_WEIGHTS,
            metavar="F",
            help=f"the weights' format: {', '.join(PLAIN)} (plain); {', '.join(QWIX)} (qwix); {', '.join(GROUPED)}; "
            f"{', '.join(BNB)}; {', '.join(FP8)}; {', '.join(GGUF)}",
            meaning="the weights' format (docs/quantized.md): " + ", ".join(f"`{name}`" for name in FORMATS),
            limit=32,
        ),
        Field(
            link="group",
            flag="--group",
            json="weights_options.group",
            parse=_format_option("group", "gptq-int4"),
            default="128",
            metavar="G",
            help="gptq-int4 and awq-int4's group (default 128)",
            meaning="GPTQ's and AWQ's group: input features a scale",
            limit=8,
        ),
        Field(
            link="bits",
            flag="--bits",
            json="weights_options.bits",
            parse=_format_option("bits", "gptq-int4"),
            default="4",
            metavar="B",
            help="gptq-int4's bits a weight: 4 (default) or 8",
            meaning="GPTQ's bits a weight: `4` or `8`",
            limit=4,
        ),
        Field(
            link="tile",
            flag="--tile",
            json="weights_options.tile",
            parse=_format_option("tile", "int4"),
            default="128",
            metavar="N",
            help="qwix int4, fp8 and nf4's tile along the contraction (default 128)",
            meaning="qwix's tiled formats' tile: values along the contraction",
            limit=8,
        ),
        Field(
            link="qhead",
            flag="--quantize-head",
            json="weights_options.quantize_head",
            parse=switch("false", "true"),
            default="false",
            help="quantize the output head too (qwix, GPTQ, AWQ keep it)",
            meaning="`true`: the output head quantized too (qwix, GPTQ, AWQ); `false` keeps it, as the tools do",
            switch=True,
            limit=8,
        ),
    ),
    notes="An option is in the link only when the format has it (`group` for GPTQ and AWQ, `bits` for GPTQ, `tile` "
    "for qwix's tiled formats, `qhead` for qwix, GPTQ and AWQ).",
)

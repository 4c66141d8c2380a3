"""The Serving page's request (and ``serve``'s): the cache's dtype, the context and the concurrency,
the budget (a catalog device or bytes), the reserve and whether sliding windows are allocated in
full; the weight format's keys are ``dcsim.requests.weights``'."""

from __future__ import annotations

from dcsim.requests import MESH_KEYS, Field, Request, budget, count, switch
from dcsim.requests.weights import WEIGHTS
from dcsim.serving import catalog
from dcsim.serving import request as serving_request


def _kv_dtype(text: str, name: str) -> str:
    return serving_request.check_kv_dtype(text, name)


def _reserve(text: str, name: str) -> str:
    return serving_request.reserve_text(serving_request.parse_reserve(text, name))


def _device(text: str, name: str) -> str:
    return catalog.get_accelerator(text).name


SERVING = Request(
    name="serving",
    title="The Serving page's keys",
    faces="the Serving page (`/serving`) and `serve`",
    shared=MESH_KEYS + " (default mesh `data=1`, strategy `megatron`)",
    includes=(WEIGHTS,),
    fields=(
        Field(
            link="kv",
            flag="--kv-dtype",
            json="kv_dtype",
            parse=_kv_dtype,
            default=serving_request.DEFAULT_KV_DTYPE,
            meaning="the KV cache's dtype: " + ", ".join(f"`{name}`" for name in serving_request.KV_DTYPE_NAMES),
            flag_default=serving_request.DEFAULT_KV_DTYPE,
            metavar="D",
            help=f"the cache's dtype: {', '.join(serving_request.KV_DTYPE_NAMES)}",
        ),
        Field(
            link="context",
            flag="--context",
            json="context",
            parse=count(serving_request.MAX_CONTEXT),
            default=str(serving_request.DEFAULT_CONTEXT),
            meaning=f"tokens a sequence, 1 to {serving_request.MAX_CONTEXT:,} (default 4,096, or the model's "
            "positions when fewer)",
            metavar="T",
            help=f"tokens a sequence (default {serving_request.DEFAULT_CONTEXT:,}, or the model's positions when "
            "fewer: GPT-2's 1,024)",
        ),
        Field(
            link="concurrency",
            flag="--concurrency",
            json="concurrency",
            parse=count(serving_request.MAX_CONCURRENCY),
            default=str(serving_request.DEFAULT_CONCURRENCY),
            meaning=f"sequences at once over the whole mesh, 1 to {serving_request.MAX_CONCURRENCY:,}",
            flag_default=str(serving_request.DEFAULT_CONCURRENCY),
            metavar="N",
            help="sequences at once over the whole mesh (default 1)",
        ),
        Field(
            link="source",
            flag="--source-length",
            json="source_length",
            parse=count(serving_request.MAX_CONTEXT),
            default="auto",
            unset=("auto", ""),
            meaning="an encoder-decoder's encoder tokens a sequence, or `auto`: the context (Whisper: every encoder "
            "position); in the link only for an encoder-decoder",
            metavar="S",
            help="an encoder-decoder's encoder tokens a sequence (default: the context; Whisper: every encoder "
            "position)",
        ),
        Field(
            link="device",
            flag="--device",
            json="device",
            parse=_device,
            default="h100-sxm",
            unset=("none",),
            meaning="an accelerator whose memory is the budget: "
            + ", ".join(f"`{name}`" for name in catalog.DEVICE_NAMES)
            + ", or `none` (then `devmem`); the command line has no default device",
            metavar="NAME",
            help=f"an accelerator: {', '.join(catalog.DEVICE_NAMES)}",
        ),
        Field(
            link="devmem",
            flag="--budget",
            json="budget_bytes",
            parse=budget,
            default="",
            unset=("",),
            meaning="one device's budget with its unit (`80GiB`, `96 GB`), used when `device` is `none`; empty: no "
            "budget, figures only",
            metavar="SIZE",
            help="bytes a device has, with a unit: 80GiB, 96GB",
        ),
        Field(
            link="reserve",
            flag="--reserve",
            json="reserve",
            parse=_reserve,
            default="0.1",
            meaning="the fraction of each device kept free, 0 to below 1: `0.1`, `.25`, `10%` (vLLM's "
            "gpu_memory_utilization 0.9 is 0.1)",
            flag_default="0.1",
            metavar="FRACTION",
            help="kept free of each device, 0 to below 1 (default 0.1)",
        ),
        Field(
            link="fullwin",
            flag="--full-windows",
            json="full_windows",
            parse=switch("false", "true"),
            default="false",
            meaning="`true`: sliding-window layers' caches allocated in full, as engines without window-aware "
            "allocation do",
            switch=True,
            help="allocate every layer's cache in full, as engines without window-aware allocation do",
        ),
    ),
    notes="`device` and `devmem` both give the budget: the page uses `devmem` only when `device` is `none`, and the "
    "command line refuses both.",
)

"""The Serving page's request (and ``serve``'s): the cache's dtype, the context and the concurrency,
the budget (a catalog device or bytes), the reserve and whether sliding windows are allocated in
full; the weight format's keys are ``dcsim.requests.weights``'."""

from __future__ import annotations

from dcsim.model.cache import kv_dtype_label
from dcsim.requests import MESH_KEYS, budget, count, declared, switch, ticked
from dcsim.requests.weights import WEIGHTS
from dcsim.serving import catalog
from dcsim.serving import request as serving_request


def _kv_dtype(text: str, name: str) -> str:
    return serving_request.check_kv_dtype(text, name)


def _reserve(text: str, name: str) -> str:
    return serving_request.reserve_text(serving_request.parse_reserve(text, name))


def _device(text: str, name: str) -> str:
    return catalog.get_accelerator(text).name


SERVING = declared(
    "serving",
    {
        "kv": _kv_dtype,
        "context": count(serving_request.MAX_CONTEXT),
        "concurrency": count(serving_request.MAX_CONCURRENCY),
        "source": count(serving_request.MAX_CONTEXT),
        "device": _device,
        "devmem": budget,
        "reserve": _reserve,
        "fullwin": switch("false", "true"),
    },
    title="The Serving page's keys",
    faces="the Serving page (`/serving`) and `serve`",
    shared=MESH_KEYS + " (default mesh `data=1`, strategy `megatron`)",
    includes=(WEIGHTS,),
    words={
        "kv_default": serving_request.DEFAULT_KV_DTYPE,
        "kv_dtypes": ", ".join(kv_dtype_label(name) for name in serving_request.KV_DTYPE_NAMES[:-1]),
        "kv_words": ticked(serving_request.KV_DTYPE_NAMES),
        "default_context": serving_request.DEFAULT_CONTEXT,
        "max_context": serving_request.MAX_CONTEXT,
        "default_concurrency": serving_request.DEFAULT_CONCURRENCY,
        "max_concurrency": serving_request.MAX_CONCURRENCY,
        "devices": ", ".join(catalog.DEVICE_NAMES),
        "device_words": ticked(catalog.DEVICE_NAMES),
    },
    notes="`device` and `devmem` both give the budget: the page uses `devmem` only when `device` is `none`, and the "
    "command line refuses both.",
)

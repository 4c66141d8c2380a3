"""The step time's request (``memory`` and ``serve``): which mesh axes run inside a host, a training
run's tokens and price, a training step's micro-batches and pipeline schedule (with a ``stage``
axis in the mesh: ``dcsim.speed.pipeline``), a serving request's prompt. The accelerator is ``serve``'s ``--device``
(the Serving page's ``device`` key), which ``memory`` and the Memory page take too: its speeds and its
memory (``dcsim.ui.speed`` draws the pages' time)."""

from __future__ import annotations

from dcsim.inputs import number_from_text
from dcsim.requests import count, declared, one_of, ticked
from dcsim.speed import pipeline, system

DEFAULT_PROMPT = 128


def default_prompt(context: int) -> int:
    """The prompt a request has when none is given: 128 tokens, or the context less one where that
    is shorter (the first token comes after the prompt, in the context), so a default is never
    refused; at least 1 (a context of one token takes no prompt, and the engine says so)."""
    return max(1, min(DEFAULT_PROMPT, context - 1))


def _tokens(text: str, name: str) -> str:
    return str(system.check_tokens(number_from_text(text.strip()), name))


def _price(text: str, name: str) -> str:
    return f"{system.check_price(number_from_text(text.strip()), name):g}"


TIMING = declared(
    "timing",
    {
        "dph": count(system.MAX_DEVICES_PER_HOST),
        "tokens": _tokens,
        "price": _price,
        "mbs": count(pipeline.MAX_MICRO_BATCHES),
        "sched": one_of(pipeline.SCHEDULES),
        "vstages": count(pipeline.MAX_VIRTUAL_STAGES),
        "prompt": count(system.MAX_PROMPT),
    },
    title="The step time's keys",
    faces="`memory` and the Memory page (`dph`, `tokens`, `price`, `mbs`, `sched`, `vstages`), `serve` and the "
    "Serving page (`dph`, `prompt`)",
    words={
        "default_dph": system.DEFAULT_DEVICES_PER_HOST,
        "max_dph": system.MAX_DEVICES_PER_HOST,
        "default_prompt": DEFAULT_PROMPT,
        "max_prompt": system.MAX_PROMPT,
        "max_micro_batches": pipeline.MAX_MICRO_BATCHES,
        "default_schedule": pipeline.DEFAULT_SCHEDULE,
        "schedules": ticked(pipeline.SCHEDULES),
        "schedule_list": ", ".join(pipeline.SCHEDULES),
        "max_virtual_stages": pipeline.MAX_VIRTUAL_STAGES,
    },
    choices={"sched": pipeline.SCHEDULES},
    notes="`memory` takes `--device` as `serve` does: a catalog accelerator, its speeds and its memory as the budget. "
    "The Memory page reads the Serving page's `device` key too, with `none` as its default (the typed `devmem`, as "
    "an old link meant): with a device its memory is the budget and the step is timed; the page writes `device`, "
    "`dph`, `tokens` and `price` only with a device.",
)

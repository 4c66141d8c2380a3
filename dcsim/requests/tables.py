"""Every request (``REQUESTS``) and docs/links.md's key
tables written from them, which tests/test_requests.py compares with the file."""

from __future__ import annotations

from dcsim.requests import Request
from dcsim.requests.checkpoint_plan import CHECKPOINT_PLAN
from dcsim.requests.serving import SERVING
from dcsim.requests.timing import TIMING
from dcsim.requests.training import TRAINING
from dcsim.requests.weights import WEIGHTS

REQUESTS: tuple[Request, ...] = (TRAINING, SERVING, WEIGHTS, CHECKPOINT_PLAN, TIMING)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def link_table(request: Request) -> str:
    """A request's key table in markdown: key, meaning, default, flag, JSON key."""
    lines = [
        f"### {request.title}",
        "",
        f"Read by {request.faces}." + (f" It shares {request.shared}." if request.shared else ""),
    ]
    if request.includes:
        lines[-1] += " It reads " + ", ".join(f"the {included.name} keys below" for included in request.includes) + "."
    lines += [
        "",
        "| key | meaning | default | flag | JSON |",
        "|---|---|---|---|---|",
    ]
    for field in request.fields:
        default = f"`{field.default}`" if field.default else "(empty)"
        flag = f"`{field.flag}`" if field.flag else ""
        json_key = f"`{field.json}`" if field.json else ""
        lines.append(f"| `{field.link}` | {_cell(field.meaning)} | {default} | {flag} | {json_key} |")
    if request.notes:
        lines += ["", request.notes]
    return "\n".join(lines)


def link_tables() -> str:
    """Every request's key table, as docs/links.md holds them between its generated markers."""
    return "\n\n".join(link_table(request) for request in REQUESTS) + "\n"

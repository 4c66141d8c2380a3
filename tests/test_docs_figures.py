"""Counts the docs state in prose are read from the docs and compared with the code's own count
(issue 43): the README said "Thirty presets" while the table held 41, and docs/limits.md said
`model_type` was "one of the 37" while dcsim read 54. A figure written once and never checked drifts
as soon as a row is added; these tests fail on the commit that adds it.

Every figure of docs/*.md (a count or byte figure of a million or more, or "N sequences") is checked:
shown under a command the slow tests/test_docs.py runs and compares, inside a text a test regenerates,
or computed here by the dcsim expression ``FIGURES`` names for it. No child process; the figures that
count a whole model, lay out a state or trace a step are marked slow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import test_limits
from test_docs import unique_commands

from dcsim import hf
from dcsim.hf import markdown
from dcsim.model.config import DenseLayer, ModelConfig
from dcsim.model.count import count_params
from dcsim.model.presets import PRESETS, SOURCE_KINDS
from dcsim.requests.tables import link_tables

ROOT = Path(__file__).resolve().parent.parent

# Counts in words as the docs write them: one to nine, and tens with an optional unit (forty-one).
_ONES = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}


def number(text: str) -> int:
    """A count as prose writes it: ``41``, ``1,024``, ``Forty-one``, ``thirty``, ``seven``."""
    word = text.lower().replace(",", "")
    if word.isdigit():
        return int(word)
    tens, _, unit = word.partition("-")
    if tens in _TENS and (not unit or unit in _ONES):
        return _TENS[tens] + _ONES.get(unit, 0)
    if word in _ONES:
        return _ONES[word]
    raise ValueError(f"not a count in words or digits: {text!r}")


@pytest.mark.parametrize(
    "text, expected",
    [("41", 41), ("1,024", 1024), ("Forty-one", 41), ("thirty", 30), ("seven", 7), ("ninety-nine", 99)],
)
def test_number_reads_words_and_digits(text, expected):
    assert number(text) == expected


@pytest.mark.parametrize("text", ["thirty-ten", "one-two", "hundred", "4.5", ""])
def test_number_refuses_what_is_not_a_count(text):
    with pytest.raises(ValueError, match="not a count"):
        number(text)


def figures(path: str, pattern: str) -> list[int]:
    """Every count ``pattern``'s group ``count`` finds in ``path``; at least one, or the sentence moved."""
    found = [number(match["count"]) for match in re.finditer(pattern, (ROOT / path).read_text(encoding="utf-8"))]
    assert found, f"{path} no longer says {pattern!r}: update this test with the sentence"
    return found


_COUNT = r"(?P<count>\d[\d,]*|[A-Za-z]+(?:-[a-z]+)?)"


def test_the_readme_counts_the_presets():
    assert figures("README.md", rf"\b{_COUNT} presets:") == [len(PRESETS)]


def test_the_limits_count_the_model_types_dcsim_reads():
    assert figures("docs/limits.md", rf"`model_type` one of the {_COUNT} in") == [len(hf.MODEL_TYPES)]


def test_the_presets_page_counts_each_kind_of_reference_count():
    text = (ROOT / "docs" / "presets.md").read_text(encoding="utf-8")
    said = {
        kind: number(count)
        for count, kind in re.findall(rf"for\s+{_COUNT}(?:\s+of\s+the\s+\d+\s+presets)?,\s+(?:the\s+)?`([^`]+)`", text)
    }
    kinds = [row.source_kind for row in PRESETS.values()]
    assert said == {kind: kinds.count(kind) for kind in SOURCE_KINDS}
    assert f"of the {len(PRESETS)} presets" in text


# --- every figure the docs state is checked (issue 43) ---------------------------------------------
#
# The README's figures are checked by tests/test_docs.py (each is in a console block's output, which
# its slow test compares with what the command prints). A figure of docs/*.md, by the same pattern
# (a count or byte figure of a million or more written with thousands separators, or "N sequences"),
# is checked when it is:
# (a) in the shown output of a console block that test_command_runs_as_printed runs and compares;
# (b) inside a text a test regenerates and compares byte for byte (GENERATED), or in a limits.md
#     message that tests/test_limits.py provokes and compares (its PROBES);
# (c) in FIGURES below: the dcsim expression that computes it, which a test evaluates and compares
#     with the figure as the doc writes it, or a published figure the doc cites beside it.
# A figure in none of these fails.

DOCS = sorted((ROOT / "docs").glob("*.md"))
# _README_FIGURE's figures, with two of its misses read: a figure a prose comma follows ("OLMo-2-7B
# 7,298,617,344, OLMo-7B ..."), which its lookahead skips, and "65,536 sequences", which it reads as
# "536 sequences".
DOC_FIGURE = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3}){2,}(?!\d|,\d)|(?<![\d,.])\d{1,3}(?:,\d{3})* sequences\b")


def doc_figures(text: str) -> list[str]:
    return sorted(set(DOC_FIGURE.findall(text)))


def formatted(value: int, figure: str) -> str:
    """``value`` as the doc writes ``figure``: thousands separators, and the word if it has one."""
    return f"{value:,} sequences" if figure.endswith(" sequences") else f"{value:,}"


def in_text(figure: str, text: str) -> bool:
    return re.search(rf"(?<![\d,.]){re.escape(figure)}(?!\d|,\d)", text) is not None


@functools.cache
def checked_output() -> str:
    """Every line a console block shows under a command that test_command_runs_as_printed runs."""
    return "\n".join(line for command in unique_commands() if command.shown for line in command.shown)


def doc_text(name: str) -> str:
    return (ROOT / "docs" / name).read_text(encoding="utf-8")


# (b) Texts a test regenerates and compares byte for byte: the doc, its markers, the generator, the test.
GENERATED = {
    "links.md": (
        "<!-- the tables below are dcsim.requests.tables.link_tables()",
        "<!-- end of the generated tables -->",
        link_tables,
        "tests/test_requests.py::test_the_docs_key_tables_are_the_declarations",
    ),
    "presets.md": (
        "<!-- model types: generated from dcsim.hf.table, do not edit by hand -->",
        "<!-- end of model types -->",
        markdown.markdown_table,
        "tests/test_hf.py::test_the_docs_list_every_model_type_from_the_readers_table",
    ),
}


def generated_figures(name: str) -> set[str]:
    """The figures inside ``name``'s generated text that its generator writes too."""
    if name not in GENERATED:
        return set()
    start, end, generate, _ = GENERATED[name]
    text = doc_text(name)
    region = text[text.index(start) : text.index(end)]
    made = generate()
    return {figure for figure in doc_figures(region) if in_text(figure, made)}


def limits_message_figures() -> set[str]:
    """The figures of docs/limits.md's messages that tests/test_limits.py provokes and compares."""
    rows = test_limits.readme_limits()
    messages = [test_limits.promised(rows[what]["message"]) or "" for what in test_limits.PROBES]
    return {figure for message in messages for figure in doc_figures(message)}


# --- (c) what dcsim computes, figure by figure ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Computed:
    """A figure dcsim computes: what it is, in words, and the expression (one value, or several
    the same figure stands for); ``slow`` when it counts a whole model or traces a step."""

    what: str
    value: Callable[[], int | tuple[int, ...]]
    slow: bool = False
    shares: str | None = None  # figures of one costly cached command: one xdist worker runs them all


@dataclasses.dataclass(frozen=True)
class Published:
    """A figure quoted from outside dcsim: its source, and the words that name that source in
    every section of the doc that states the figure."""

    source: str
    cited: str


@functools.cache
def counted(preset: str):
    return count_params(ModelConfig(preset=preset))


def serve(preset: str, mesh: str = "data=1", **settings):
    from dcsim.serving.engine import compute_serving
    from dcsim.serving.request import Serving
    from dcsim.sharding.meshes import parse_mesh

    return compute_serving(ModelConfig(preset=preset), Serving(mesh=parse_mesh(mesh), **settings))


@functools.cache
def worked_serving():
    """docs/serving.md's worked example: Llama 2 70B on 4 x H100 SXM at 4,096 tokens, 64 sequences."""
    return serve("llama2-70b", "model=4", device="h100-sxm", concurrency=64)


def mamba_130m_sequence_bytes() -> int:
    from dcsim.serving.engine import compute_serving
    from dcsim.serving.request import Serving
    from dcsim.sharding.meshes import parse_mesh

    config, _ = hf.read_config_file((ROOT / "tests" / "data" / "hf" / "mamba-130m.json").read_bytes())
    return compute_serving(config, Serving(mesh=parse_mesh("data=1"))).kv_bytes_per_sequence


@functools.cache
def cli_json(*argv: str) -> dict:
    """What ``python -m dcsim ARGV --format json`` prints, run in this process."""
    from dcsim.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--format", "json"]) == 0
    return json.loads(out.getvalue())


@functools.cache
def memory_json(*argv: str) -> dict:
    return cli_json("memory", *argv)


def per_device_total(record: dict) -> int:
    return record["per_device"]["total_bytes"]


def memory_figure(what: str, flags: str, read: Callable[[dict], int] = per_device_total) -> Computed:
    """A figure of ``memory FLAGS --format json`` (its per-device total unless ``read`` says which),
    slow: it counts a whole model."""
    # A --verify run compiles and runs the step in a child (15 s): its figures share one worker, so
    # memory_json's cache answers all but the first.
    shares = f"memory {flags}" if "--verify" in flags.split() else None
    return Computed(what, lambda: read(memory_json(*flags.split())), slow=True, shares=shares)


@functools.cache
def hf_counts() -> dict[str, int]:
    """transformers' num_parameters() of each file in tests/data/hf/, which bench/hf_import.py wrote
    and tests/test_hf.py and tests/test_hf_modern.py hold dcsim's count to."""
    return json.loads((ROOT / "tests" / "data" / "hf" / "counts.json").read_text(encoding="utf-8"))


def hf_file(name: str) -> dict:
    return json.loads((ROOT / "tests" / "data" / "hf" / f"{name}.json").read_text(encoding="utf-8"))


def hparams(preset: str) -> dict:
    return dict(PRESETS[preset].hparams)


@functools.cache
def weight_table(preset: str, weights: str):
    from dcsim.quant import layouts
    from dcsim.quant.formats import check_format

    return layouts.weight_table(ModelConfig(preset=preset), counted(preset), check_format(weights))


def payload_bytes(preset: str, weights: str) -> int:
    return weight_table(preset, weights).payload_bytes


def file_bytes(preset: str, weights: str) -> int:
    """dcsim's prediction of the whole file, header included (GGUF's or safetensors')."""
    from dcsim.quant import write

    return write.predicted_file_bytes(weight_table(preset, weights))


def active(preset: str) -> int:
    from dcsim.model import breakdown

    value = breakdown.active_params(ModelConfig(preset=preset), counted(preset))
    assert value is not None
    return value


def _seed_function_total() -> int:
    import jax.numpy as jnp

    from dcsim import distributed_checkpoint_simulate

    return int(distributed_checkpoint_simulate(0, jnp.ones((1, 4096)), 1, 16385)[0])


@functools.cache
def _tensor_checkpoint_plan():
    """docs/checkpoint.md's tensor example: --features 2048,2048 --dtype bfloat16 --mesh
    data=2,model=2 --strategy tensor, planned (abstract: nothing allocated)."""
    from dcsim.checkpoint.measurement import MeasurementOptions, plan_checkpoint

    config = ModelConfig(layers=(DenseLayer(features=2048), DenseLayer(features=2048)))
    return plan_checkpoint(config, MeasurementOptions(dtype="bfloat16", mesh="data=2,model=2", strategy="tensor"))


def _constants(*names: str) -> Callable[[], tuple[int, ...]]:
    """``module.NAME`` each: one figure the doc gives for several limits that are equal."""

    def values() -> tuple[int, ...]:
        return tuple(getattr(importlib.import_module(m), n) for m, _, n in (name.rpartition(".") for name in names))

    return values


def _raw_bytes(num_values: int, dtype: str) -> int:
    from dcsim.quantities import payload

    return payload.raw_bytes(num_values, dtype)


def _gb_as_typed(text: str) -> int:
    from dcsim.quantities.amounts import parse_amount

    return parse_amount(text, "bytes")


def _deepseek_v3_fp8_headers() -> int:
    """What deepseek-ai/DeepSeek-V3's 163 files hold beyond dcsim's 61 layers and the MTP module,
    worked out from the config as tests/test_bnb_fp8.py does."""
    import test_bnb_fp8

    d, vocab = 7168, 129280
    mtp = test_bnb_fp8.deepseek_moe_layer() + 2 * vocab * d * 2 + 3 * d * 2 + d * 2 * d * 2
    return 688_586_727_753 - (payload_bytes("deepseek-v3", "fp8-block") + mtp)


def _hub_cache_count() -> int:
    """What `count --hf meta-llama/Llama-2-7b-hf --hf-cache examples/hub-cache` counts: the cache's file."""
    (path,) = (ROOT / "examples" / "hub-cache").glob("models--meta-llama--Llama-2-7b-hf/snapshots/*/config.json")
    config, _ = hf.read_config_file(path.read_bytes())
    return count_params(config).total_params


def _latent_in_full() -> int:
    h = hparams("deepseek-v3")
    return h["num_layers"] * h["num_heads"] * (h["qk_nope_head_dim"] + h["qk_rope_head_dim"] + h["v_head_dim"]) * 2


def _norm_values(preset: str) -> int:
    """The values of ``preset``'s norm scales (every array with ``norm`` in its path)."""
    report = count_params(ModelConfig(preset=preset))
    return sum(math.prod(row.shape) for row in report.arrays if "norm" in row.path)


def _room(report) -> int:
    return report.usable_bytes - report.weights_bytes_per_device - report.other_bytes_per_device


_MAX_CONTEXT = "dcsim.serving.request.MAX_CONTEXT"
_MAX_SEED = "dcsim.model.config.MAX_SEED"
_LIMIT_1M = (
    "dcsim.model.config.MAX_FEATURES",
    "dcsim.model.config.MAX_INPUT_DIM",
    "dcsim.model.config.MAX_BATCH_SIZE",
    "dcsim.quantities.payload.MAX_SHARDS",
    "dcsim.sharding.meshes.MAX_MESH_DEVICES",
    "dcsim.serving.request.MAX_CONCURRENCY",
    "dcsim.model.hparams.MAX_POSITIONS",  # a training step's sequence (memory.step)
)

_GPT2_ZERO3_FLASH = "--preset gpt2-small --mesh data=2 --zero 3"  # no master copy
_GPT2_ZERO3_FLASH += " --sequence 1024 --micro-batch 2 --remat none --attention flash"
_COMPARE_STEP = "--preset llama2-13b --optimizer adamw --zero 3 --mesh data=4 --sequence 4096"


FIGURES: dict[tuple[str, str], Computed | Published] = {
    # architecture.md: the seed function's float32 rounding, against the exact count.
    ("architecture.md", "67,129,345"): Computed(
        "a Dense(16,385) on D = 4,096, counted exactly",
        lambda: count_params(ModelConfig(input_dim=4096, layers=(DenseLayer(features=16385),))).total_params,
    ),
    ("architecture.md", "67,129,344"): Computed("the seed function's float32 total of the same", _seed_function_total),
    # checkpoint.md: the default ceiling, and the tensor example's parameters and values held.
    ("checkpoint.md", "30,000,000"): Computed(
        "the default ceiling", _constants("dcsim.checkpoint.measurement.DEFAULT_MAX_PARAMS")
    ),
    ("checkpoint.md", "4,206,592"): Computed(
        "the tensor example's parameters", lambda: _tensor_checkpoint_plan().report.total_params
    ),
    ("checkpoint.md", "8,413,184"): Computed(
        "the values its devices hold together", lambda: _tensor_checkpoint_plan().stored_values
    ),
    # cli.md: limits in the flag tables, and a comment's figure.
    ("cli.md", "16,777,216"): Computed("--context's most", _constants(_MAX_CONTEXT)),
    ("cli.md", "4,294,967,295"): Computed("--seed's most", _constants(_MAX_SEED)),
    ("cli.md", "7,255,009,280"): Computed(
        "Llama 2 13B's gptq-int4 payload", lambda: payload_bytes("llama2-13b", "gptq-int4"), slow=True
    ),
    ("cli.md", "1,048,576"): Computed("--shards' most", _constants("dcsim.quantities.payload.MAX_SHARDS")),
    ("cli.md", "6,738,415,616"): Computed("the count of examples/hub-cache's Llama 2 7B", _hub_cache_count, slow=True),
    # compare.md: Llama 2 13B with AdamW, the state alone and with a step; Llama 2 70B's budget answer.
    ("compare.md", "52,063,457,284"): memory_figure(
        "Llama 2 13B's state on data=2", "--preset llama2-13b --optimizer adamw --zero 3 --mesh data=2"
    ),
    ("compare.md", "84,256,618,500"): memory_figure("the same with a step of 4,096 tokens on data=4", _COMPARE_STEP),
    ("compare.md", "58,224,889,856"): memory_figure(
        "of which the step's activations", _COMPARE_STEP, read=lambda record: record["per_device"]["activations_bytes"]
    ),
    ("compare.md", "68,976,648,196"): memory_figure(
        "Llama 2 70B, Adam in bfloat16, on data=8", "--preset llama2-70b --mesh data=8"
    ),
    # layout.md: the mesh's most devices.
    ("layout.md", "1,048,576"): Computed("a mesh's most devices", _constants("dcsim.sharding.meshes.MAX_MESH_DEVICES")),
    # limits.md: the limit column (the message column is tests/test_limits.py's).
    ("limits.md", "1,048,576"): Computed("the limits of 1,048,576", _constants(*_LIMIT_1M)),
    ("limits.md", "16,777,216"): Computed("the serving context's most", _constants(_MAX_CONTEXT)),
    ("limits.md", "2,147,483,648"): Computed("--write's most bytes", _constants("dcsim.quant.write.MAX_WRITE_BYTES")),
    ("limits.md", "30,000,000"): Computed(
        "the checkpoint ceiling", _constants("dcsim.checkpoint.measurement.DEFAULT_MAX_PARAMS")
    ),
    ("limits.md", "4,294,967,295"): Computed("the seed's most", _constants(_MAX_SEED)),
    ("limits.md", "400,000,000"): Computed(
        "the XLA step check's most parameters", _constants("dcsim.memory.verify_step.MAX_STEP_PARAMS")
    ),
    ("limits.md", "65,536 sequences"): Computed(
        "the micro-batch's most", _constants("dcsim.memory.step.MAX_MICRO_BATCH")
    ),
    # memory.md: GPT-2 small's float32 logits, and Llama 2 70B at ZeRO-3 on data=16.
    # memory.md: Llama 2 70B under megatron at ZeRO-1 on data=8,model=8 (issue 45), and its norms.
    ("memory.md", "17,246,470,144"): memory_figure(
        "its params a device",
        "--preset llama2-70b --mesh data=8,model=8 --strategy megatron --zero 1 --master-dtype float32",
        read=lambda record: record["per_device"]["params_bytes"],
    ),
    ("memory.md", "1,318,912"): Computed("Llama 2 70B's RMSNorm values", lambda: _norm_values("llama2-70b")),
    ("memory.md", "2,637,824"): Computed("their bfloat16 bytes", lambda: 2 * _norm_values("llama2-70b")),
    ("memory.md", "411,705,344"): Computed(
        "GPT-2 small's float32 logits, (2, 1,024, vocab)",
        lambda: _raw_bytes(2 * 1024 * hparams("gpt2-small")["vocab_size"], "float32"),
    ),
    ("memory.md", "823,410,688"): Computed(
        "the whole global batch's, (4, 1,024, vocab)",
        lambda: _raw_bytes(4 * 1024 * hparams("gpt2-small")["vocab_size"], "float32"),
    ),
    ("memory.md", "68,976,648,196"): memory_figure(
        "Llama 2 70B, ZeRO-3 with a float32 master copy, on data=16",
        "--preset llama2-70b --mesh data=16 --zero 3 --master-dtype float32",
    ),
    # One --verify run (18 s) gives both: dcsim's state and step, and XLA's CPU peak beside it.
    ("memory.md", "2,518,957,060"): memory_figure(
        "GPT-2 small's state and step, ZeRO-3 without a master copy, micro-batch 2, flash, on data=2",
        _GPT2_ZERO3_FLASH + " --verify",
    ),
    ("memory.md", "4,156,168,040"): memory_figure(
        "XLA's CPU peak of the same step a device",
        _GPT2_ZERO3_FLASH + " --verify",
        read=lambda record: record["xla"]["step_peak_bytes_per_device"],
    ),
    # serving.md: Mamba's state, the calculators' formula, the worked example's room, windows, GB.
    ("serving.md", "1,474,560"): Computed("Mamba-130M's state a sequence", mamba_130m_sequence_bytes, slow=True),
    ("serving.md", "2,621,440"): Computed(
        "Llama 2 70B by the formula from hidden_size, 2 x L x hidden x 2",
        lambda: 2 * hparams("llama2-70b")["num_layers"] * hparams("llama2-70b")["d_model"] * 2,
    ),
    ("serving.md", "4,997,120"): Computed(
        "DeepSeek-V3's latent counted as full keys and values, L x heads x (192 + 128) x 2",
        _latent_in_full,
    ),
    ("serving.md", "335,544,320"): Computed(
        "one sequence's KV a device in the worked example",
        lambda: worked_serving().kv_bytes_per_device // worked_serving().serving.concurrency,
        slow=True,
    ),
    ("serving.md", "42,819,108,544"): Computed(
        "the room for KV a device: usable less weights less the rest",
        lambda: _room(worked_serving()),
        slow=True,
    ),
    ("serving.md", "536,870,912"): Computed(
        "Mistral 7B's KV a sequence at 32,768 tokens",
        lambda: serve("mistral-7b", context=32768).kv_bytes_per_sequence,
        slow=True,
    ),
    ("serving.md", "4,294,967,296"): Computed(
        "the same with every window in full",
        lambda: serve("mistral-7b", context=32768, full_windows=True).kv_bytes_per_sequence,
        slow=True,
    ),
    ("serving.md", "654,311,424"): Computed(
        "Gemma 2 2B's at 8,192", lambda: serve("gemma2-2b", context=8192).kv_bytes_per_sequence, slow=True
    ),
    ("serving.md", "872,415,232"): Computed(
        "the same in full", lambda: serve("gemma2-2b", context=8192, full_windows=True).kv_bytes_per_sequence, slow=True
    ),
    ("serving.md", "80,000,000,000"): Computed("80GB read as 10^9 bytes a GB", lambda: _gb_as_typed("80GB")),
    # quantized.md, beside its tables (their cells: QUANT_TABLES below): published files, DeepSeek-V3.
    ("quantized.md", "4,081,004,224"): Published(
        "TheBloke/Llama-2-7B-GGUF's llama-2-7b.Q4_K_M.gguf, as the Hub lists it", "TheBloke"
    ),
    ("quantized.md", "688,586,727,753"): Published(
        "deepseek-ai/DeepSeek-V3's 163 safetensors files, as the Hub lists them", "deepseek-ai/DeepSeek-V3"
    ),
    ("quantized.md", "673,150,611,808"): Computed(
        "DeepSeek-V3's fp8-block payload", lambda: payload_bytes("deepseek-v3", "fp8-block"), slow=True
    ),
    ("quantized.md", "11,745,248"): Computed(
        "its predicted header",
        lambda: file_bytes("deepseek-v3", "fp8-block") - payload_bytes("deepseek-v3", "fp8-block"),
        slow=True,
    ),
    ("quantized.md", "11,888,393"): Computed(
        "the published bytes less dcsim's payload and the MTP module", _deepseek_v3_fp8_headers, slow=True
    ),
}

# presets.md: the preset table's reference counts (presets.json; tests/test_presets.py holds each
# preset's abstract count to it). The key is the count as the doc must write it: a row that drifts
# leaves its figure unchecked and this key missing from the doc, and both fail.
_PRESET_ROWS = (
    *("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl", "bert-base", "bert-large", "vit-b16", "vit-l16"),
    *("resnet18", "resnet50", "resnet152", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "gemma-7b"),
    *("gemma2-2b", "gemma3-1b", "qwen2.5-72b", "qwen3-8b", "phi3-mini", "mistral-7b", "llama3.1-8b"),
    *("llama3.1-70b", "llama3.1-405b", "qwen2.5-7b", "qwen2.5-32b", "gemma2-9b", "gemma2-27b", "phi3.5-moe"),
    *("mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "deepseek-v2-lite", "deepseek-v3", "llama4-scout"),
    *("llama4-maverick", "t5-small", "t5-large", "flan-t5-base"),
)
for _name in _PRESET_ROWS:
    FIGURES[("presets.md", f"{PRESETS[_name].reference_params:,}")] = Computed(
        f"{_name}'s reference count", lambda name=_name: PRESETS[name].reference_params
    )
# presets.md: transformers' counts of the files in tests/data/hf/ the prose names (the same kind of key).
_HF_FILES = (
    *("olmoe-1b-7b-0924", "granite-3.0-1b-a400m", "granite-3.0-3b-a800m", "glm-4.5-air", "glm-4.5"),
    *("gpt-oss-20b", "gpt-oss-120b", "dbrx-base", "bart-base", "bart-large", "whisper-base", "whisper-large-v3"),
    *("jamba-v0.1", "mistral-small-3.1-24b-base-2503", "mistral-7b"),
    # the types of issue 30, listed in the prose
    *("olmo-2-7b", "olmo-7b", "falcon-7b", "falcon-40b", "phi-2", "gpt-j-6b", "mpt-7b", "bloom-560m", "opt-125m"),
    *("starcoder2-3b", "starcoderbase-1b", "command-r-v01", "command-r7b", "stablelm-2-1.6b", "nemotron-mini-4b"),
    *("glm-4-9b", "glm-4-9b-0414", "granite-3.0-2b", "roberta-base", "xlm-roberta-base", "whisper-tiny"),
)
for _name in _HF_FILES:
    FIGURES.setdefault(
        ("presets.md", f"{hf_counts()[_name]:,}"),
        Computed(f"transformers' count of tests/data/hf/{_name}.json", lambda name=_name: hf_counts()[name]),
    )
FIGURES |= {
    # presets.md: active parameters a token of the MoE rows, counted.
    ("presets.md", "12,879,925,248"): Computed("Mixtral 8x7B's active", lambda: active("mixtral-8x7b"), slow=True),
    ("presets.md", "2,689,173,504"): Computed("Qwen1.5-MoE's active", lambda: active("qwen1.5-moe-a2.7b"), slow=True),
    ("presets.md", "3,353,032,704"): Computed("Qwen3-30B-A3B's active", lambda: active("qwen3-30b-a3b"), slow=True),
    ("presets.md", "6,640,999,744"): Computed("Phi-3.5-MoE's active", lambda: active("phi3.5-moe"), slow=True),
    ("presets.md", "18,044,827,136"): Computed("Llama 4 Scout's active", lambda: active("llama4-scout"), slow=True),
    ("presets.md", "18,056,623,616"): Computed("Llama 4 Maverick's", lambda: active("llama4-maverick"), slow=True),
    # presets.md: pythia-70m by overriding gpt2-small (tests/test_presets.py's overrides).
    ("presets.md", "70,426,624"): Computed("pythia-70m's count", lambda: _pythia()[0]),
    ("presets.md", "18,915,328"): Computed("its non-embedding count", lambda: _pythia()[1]),
    # presets.md: the head Flan-T5's checkpoint stores apart, and gpt-oss's token table.
    ("presets.md", "24,674,304"): Computed(
        "Flan-T5 base's head, vocab x d_model",
        lambda: hparams("flan-t5-base")["vocab_size"] * hparams("flan-t5-base")["d_model"],
    ),
    ("presets.md", "579,133,440"): Computed(
        "gpt-oss's token table, vocab_size x hidden_size of both files",
        lambda: tuple(hf_file(n)["vocab_size"] * hf_file(n)["hidden_size"] for n in ("gpt-oss-20b", "gpt-oss-120b")),
    ),
}


@functools.cache
def _pythia() -> tuple[int, int]:
    import test_presets

    from dcsim.model import breakdown

    config = ModelConfig(preset="gpt2-small", overrides=test_presets.PYTHIA_70M)
    report = count_params(config)
    return report.total_params, breakdown.non_embedding_params(config, report)


# quantized.md's tables, cell by cell: (a row's first cells) -> (preset, format) and which figure
# each other cell is. Models and recipes as the tables write them.
_QUANT_MODELS = {"Llama 2 7B": "llama2-7b", "Llama 2 13B": "llama2-13b", "Mixtral 8x7B": "mixtral-8x7b"}


def quant_cells() -> dict[str, list[Computed]]:
    """Each figure of quantized.md's three tables, with the dcsim expression of its cell."""
    from dcsim.quant.formats import FORMATS

    cells: dict[str, list[Computed]] = {}

    def add(cell: str, what: str, value: Callable[[], int]) -> None:
        for figure in doc_figures(cell):
            cells.setdefault(figure, []).append(Computed(what, value, slow=True))

    for line in doc_text("quantized.md").splitlines():
        row = [cell.strip() for cell in line.strip().strip("|").split("|")]
        name = re.sub(r" \(.*\)$", "", row[0])
        if len(row) == 6 and name in FORMATS:  # | format | 7B payload | 7B file | 13B payload | 13B file | bits |
            for preset, payload_cell, file_cell in (("llama2-7b", row[1], row[2]), ("llama2-13b", row[3], row[4])):
                add(payload_cell, f"{preset} {name} payload", lambda p=preset, f=name: payload_bytes(p, f))
                add(file_cell, f"{preset} {name} file", lambda p=preset, f=name: file_bytes(p, f))
        elif len(row) >= 5 and row[0] in _QUANT_MODELS:  # | model | format or recipe | payload | bits | file |...
            preset = _QUANT_MODELS[row[0]]
            weights = row[1] if row[1] in FORMATS else f"gguf-{row[1].lower()}"
            add(row[2], f"{preset} {weights} payload", lambda p=preset, f=weights: payload_bytes(p, f))
            add(row[4], f"{preset} {weights} file", lambda p=preset, f=weights: file_bytes(p, f))
    return cells


# Figures no test checks yet, each with why. Unchecked: a figure here fails nothing, so the list
# is kept to what no test can recompute quickly; test_the_unchecked_list_holds_only_unchecked_figures
# fails when one of them becomes checked, so it only shrinks.


def how_checked(doc: str, figure: str) -> str | None:
    """How ``figure`` of docs/``doc`` is checked, in words; None when it is not."""
    if in_text(figure, checked_output()):
        return "a console block's output"
    if figure in generated_figures(doc):
        return GENERATED[doc][3]
    if doc == "limits.md" and figure in limits_message_figures():
        return "tests/test_limits.py's messages"
    if (doc, figure) in FIGURES:
        return "FIGURES"
    if doc == "quantized.md" and figure in quant_cells():
        return "quantized.md's tables, cell by cell"
    return None


@pytest.mark.parametrize("doc", [path.name for path in DOCS])
def test_every_figure_a_doc_states_is_checked(doc):
    figures = doc_figures(doc_text(doc))
    unchecked = [f for f in figures if how_checked(doc, f) is None]
    assert not unchecked, (
        f"docs/{doc} states {unchecked}, which no test checks: show the command that prints it in a console "
        "block, or add the dcsim expression that computes it to FIGURES"
    )


def test_the_figures_table_names_only_figures_the_docs_state():
    stale = [key for key in FIGURES if key[1] not in doc_figures(doc_text(key[0]))]
    assert not stale, f"these docs no longer state these figures (or state them otherwise): {stale}"


def test_the_pattern_reads_the_docs_figures():
    text = "up to 65,536 sequences, 127 sequences, 1,048,576 and 4,096; OLMo 7,298,617,344, Falcon 1,234,567,8"
    assert doc_figures(text) == ["1,048,576", "127 sequences", "65,536 sequences", "7,298,617,344"]


def _computed() -> list:
    cases = [((doc, figure), entry) for (doc, figure), entry in FIGURES.items() if isinstance(entry, Computed)]
    cases += [(("quantized.md", figure), entry) for figure, entries in quant_cells().items() for entry in entries]
    return [pytest.param(key, entry, id=f"{key[0]}:{key[1]}:{entry.what}", marks=_marks(entry)) for key, entry in cases]


def _marks(entry: Computed) -> list:
    marks = [pytest.mark.slow] if entry.slow else []
    return marks + ([pytest.mark.xdist_group(entry.shares)] if entry.shares is not None else [])


@pytest.mark.parametrize("key, entry", _computed())
def test_each_figure_is_what_dcsim_computes(key, entry):
    doc, figure = key
    value = entry.value()
    values = value if isinstance(value, tuple) else (value,)
    assert values and all(isinstance(v, int) and not isinstance(v, bool) for v in values), values
    assert [formatted(v, figure) for v in values] == [figure] * len(values), (
        f"docs/{doc} writes {figure} for {entry.what}; dcsim computes {values}: correct the doc"
    )


@pytest.mark.parametrize("key", [key for key, entry in FIGURES.items() if isinstance(entry, Published)])
def test_each_published_figure_is_cited_beside_it(key):
    doc, figure = key
    entry = FIGURES[key]
    text = doc_text(doc)
    sections = re.split(r"^#+ .*$", text, flags=re.M)  # the text under each heading
    stating = [section for section in sections if in_text(figure, section)]
    assert stating and all(entry.cited in section for section in stating), (
        f"docs/{doc} states {figure} ({entry.source}) in a section that does not name {entry.cited!r}"
    )

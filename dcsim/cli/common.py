"""What every command shares: the parser with one-line errors, a command's registration, the model
and output flags, reading a configuration file, and turning frames into text. See ``dcsim.cli``
for the commands."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from dcsim import hf, shipped
from dcsim.model import presets, schemas
from dcsim.model.config import DTYPES, ModelConfig, parse_int, parse_widths
from dcsim.quantities import units

if TYPE_CHECKING:
    import pandas as pd

T = TypeVar("T")

PROG = "python -m dcsim"


@dataclasses.dataclass(frozen=True)
class CommandText:
    """One command: the module that parses and runs it, its line in `--help` and the description
    its own `--help` opens with."""

    name: str
    module: str
    help: str
    description: str


@dataclasses.dataclass(frozen=True)
class MeshHelp:
    """The help of ``--mesh``, ``--strategy`` and ``--rule`` for one command that lays a model out;
    ``{placeholders}`` are filled with the command's own defaults."""

    command: str
    mesh: str
    strategy: str
    rule: str


# Every command's texts are data (commands.json), one file to read and review them in. The command
# line imports only the module of the command given, so `--help`, `presets` and a mistyped flag are
# answered before JAX (or pandas, optax, Orbax) is imported.
_TEXTS = shipped.load(__file__, "commands.json")
COMMAND_TEXTS: Mapping[str, CommandText] = {
    row.name: row for row in shipped.as_rows(CommandText, _TEXTS["commands"], "commands.json commands")
}
MESH_HELP: Mapping[str, MeshHelp] = {
    row.command: row for row in shipped.as_rows(MeshHelp, _TEXTS["mesh_flags"], "commands.json mesh_flags")
}
COMMANDS: Mapping[str, tuple[str, str]] = {name: (row.module, row.help) for name, row in COMMAND_TEXTS.items()}
# dcsim.model.optimizer's names (a test keeps them equal), here so parsing needs no optax.
OPTIMIZER_CHOICES = ("sgd", "momentum", "adam", "adamw", "adafactor", "lion")


class UsageError(Exception):
    """A mistake in what the person typed; its message is shown as it is."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (its default prints the whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def add_command(
    commands: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], str],
    *,
    model: bool = True,
) -> argparse.ArgumentParser:
    """The parser of command ``name``, run by ``run``, with its texts (commands.json) and, unless
    ``model`` is False, the model flags."""
    text = COMMAND_TEXTS[name]
    command = commands.add_parser(
        name, parents=[model_flags()] if model else [], help=text.help, description=text.description
    )
    command.set_defaults(run=run)
    return command


def refuse_unused(args: argparse.Namespace, command: str, flags: Sequence[str], why: str) -> None:
    """A UsageError for the first of ``flags`` (their ``args`` names: ``shards``) that was given to
    ``command``, which has no use for it: ``--shards does not apply to memory: WHY``."""
    for flag in flags:
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag} does not apply to {command}: {why}")


def format_flag(command: argparse.ArgumentParser, choices: Sequence[str] = ("table", "json")) -> None:
    """``--format``, one of ``choices``; the table for people by default."""
    command.add_argument("--format", choices=choices, default="table", help="output format (default table)")


def model_flags() -> Parser:
    flags = Parser(add_help=False)
    group = flags.add_argument_group("model (flags given override the --config file's fields)")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="configuration JSON as the dashboard downloads it, or a Hugging Face config.json ('-' reads stdin)",
    )
    group.add_argument(
        "--hf",
        metavar="OWNER/NAME",
        help="a model's Hugging Face Hub id: its config.json is fetched (HF_ENDPOINT; a gated model's token from "
        "HF_TOKEN; HF_HUB_OFFLINE reads the local cache only) and opened as --config opens one",
    )
    group.add_argument("--revision", metavar="REV", help="with --hf: a branch, tag or commit (default: main)")
    group.add_argument(
        "--hf-cache",
        metavar="DIR",
        help="with --hf: read config.json from this Hugging Face cache folder, offline (never the network)",
    )
    group.add_argument("--input-dim", metavar="D", help="input dimension D (default 4)")
    group.add_argument("--features", metavar="F1,F2,...", help="widths of the Dense layers in order (default 4)")
    group.add_argument("--no-bias", action="store_true", help="no bias in any layer (per-layer bias: use --config)")
    group.add_argument("--batch", metavar="B", help="batch size B; it never changes a count (default 1)")
    group.add_argument(
        "--seed", metavar="S", help="PRNG seed, 0 to 4,294,967,295; changes values, not counts (default 0)"
    )
    group.add_argument("--shards", metavar="N", help="number of checkpoint shards for the ideal share (default 2)")
    group.add_argument(
        "--dtype",
        choices=DTYPES,
        help="storage dtype of the byte figures: bytes per shard, raw payload, a checkpoint's arrays (default float32)",
    )
    # Presets: an architecture from `python -m dcsim presets`, its hyperparameters changed with --set.
    group.add_argument("--preset", metavar="NAME", help="an architecture preset instead of the Dense stack")
    group.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="change one of the preset's hyperparameters, e.g. --set num_layers=6 (repeatable)",
    )
    return flags


def weight_flags(command: argparse.ArgumentParser, default: str | None, *, write: bool = True) -> None:
    """``--weights F`` and its options, for the commands that show bytes in a format."""
    from dcsim.requests.weights import WEIGHTS  # pure Python: --help and count stay without JAX

    group = command.add_argument_group("weight format (dcsim.quant; docs/quantized.md)")
    shown = f"; default {default}" if default else "; refused with --dtype, which keeps its raw meaning"
    WEIGHTS.add_arguments(group, WEIGHTS.keys, defaults={"weights": default}, more_help={"weights": shown})
    if not write:
        return
    group.add_argument(
        "--write",
        metavar="DIR",
        help="write the format's real file into DIR (zeros of the right shapes, at most 2 GiB), read it back and "
        "weigh it against dcsim's prediction",
    )


def format_from_args(args: argparse.Namespace) -> Any:
    """The ``WeightFormat`` the flags name (``dcsim.quant.formats.check_format``), each checked;
    None when no ``--weights`` is given (and no option of one)."""
    from dcsim.quant.formats import check_format

    given = {flag: getattr(args, flag) for flag in ("group", "bits", "tile") if getattr(args, flag) is not None}
    if args.weights is None:
        if given or args.quantize_head or getattr(args, "write", None):
            first = next(iter(given), "quantize_head" if args.quantize_head else "write")
            raise UsageError(f"--{first.replace('_', '-')} needs --weights: the format it applies to")
        return None
    from dcsim.inputs import number_from_text

    numbers = {flag: number_from_text(text.strip()) for flag, text in given.items()}
    return check_format(
        args.weights,
        quantize_head=bool(args.quantize_head),
        names=("--weights", "--group", "--bits", "--tile", "--quantize-head"),
        **numbers,
    )


def read_file(path: str, what: str, max_bytes: int, parse: Callable[[bytes], T]) -> T:
    """``parse`` of the ``what`` file at ``path`` ('-' reads stdin), read one byte past ``max_bytes``
    at most: enough for ``parse`` to refuse a file that is too large without reading all of it.
    A refusal (TypeError, ValueError) names the file."""
    data = _read_bytes(path, what, max_bytes)
    try:
        return parse(data)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{what} file {path!r}: {err}") from None


def _read_bytes(path: str, what: str, max_bytes: int) -> bytes:
    try:
        if path == "-":
            return sys.stdin.buffer.read(max_bytes + 1)
        with open(path, "rb") as file:
            return file.read(max_bytes + 1)
    except OSError as err:
        raise UsageError(f"cannot read the {what} file {path!r}: {err.strerror or err}") from None


def _read_hub(args: argparse.Namespace) -> tuple[ModelConfig, str]:
    """The model of --hf: its config.json from the Hub, or from the --hf-cache folder offline. The
    token is HF_TOKEN's (huggingface_hub's convention), sent to the Hub only, never printed."""
    from dcsim.hf import hub  # here, not above: huggingface_hub's HTTP stack loads only for --hf

    if args.config:
        raise UsageError("--hf and --config both name the model; give one")
    settings = hub.HubSettings.from_env()
    if args.hf_cache is not None:
        if not os.path.isdir(args.hf_cache):
            raise UsageError(
                f"--hf-cache: {args.hf_cache!r} is not a folder (a Hugging Face cache: ~/.cache/huggingface/hub)"
            )
        settings = dataclasses.replace(
            settings,
            offline=True,
            cache_dir=args.hf_cache,
            offline_because="--hf-cache reads only its folder",
            offline_remedy="or leave out --hf-cache to fetch it from the Hub",
        )
    repo_id = hub.check_repo_id(args.hf.strip(), "--hf")
    revision = None if args.revision is None else hub.check_revision(args.revision.strip(), "--revision")
    try:
        opened = hub.open_model(repo_id, revision, token=os.environ.get("HF_TOKEN") or None, settings=settings)
    except (TypeError, ValueError) as err:
        raise UsageError(f"--hf: {err}") from None
    return opened.config, opened.message


def config_from_args(args: argparse.Namespace) -> ModelConfig:
    """The configuration the model flags describe: the --config file's (or --hf's), then each given flag."""
    for flag in ("revision", "hf_cache"):
        if getattr(args, flag) is not None and args.hf is None:
            raise UsageError(f"--{flag.replace('_', '-')} is for --hf OWNER/NAME; give the model's Hub id too")
    config, note = ModelConfig(), None
    if args.hf is not None:
        config, note = _read_hub(args)
    elif args.config:
        config, note = read_file(args.config, "configuration", hf.MAX_HF_CONFIG_BYTES, hf.read_config_file)
    changes: dict[str, Any] = {}
    for flag, field in (
        ("input_dim", "input_dim"),
        ("batch", "batch_size"),
        ("seed", "seed"),
        ("shards", "num_shards"),
    ):
        text = getattr(args, flag)
        if text is not None:
            changes[field] = parse_int(text, field, "--" + flag.replace("_", "-"))
    layers = config.layers
    if args.features is not None:
        layers = parse_widths(args.features, "--features")
    if args.no_bias:
        layers = tuple(dataclasses.replace(layer, use_bias=False) for layer in layers)
    if args.dtype is not None:
        changes["dtype"] = args.dtype
    config = dataclasses.replace(config, layers=layers, **changes, **_preset_changes(args, config))
    if note is not None:  # said once the whole command line is accepted, so a refusal stays one line
        print(f"dcsim: {note}", file=sys.stderr)
    return config


def _preset_changes(args: argparse.Namespace, config: ModelConfig) -> dict[str, Any]:
    """``preset``, ``origin`` and ``overrides`` from --preset and --set, over the --config file's
    (a preset, or a Hugging Face file's model, which --set edits under its own name)."""
    preset, origin, overrides = config.preset, config.origin, dict(config.overrides)
    if args.preset is not None:
        presets.get_preset(args.preset)
        if args.preset != preset:  # another model's overrides may not even name its hyperparameters
            overrides = {}
        preset, origin = args.preset, None
    family = presets.get_preset(preset).family if preset is not None else origin.family if origin else None
    edits: dict[str, Any] = {}
    for item in args.set:
        if family is None:
            raise UsageError("`--set` changes a preset's hyperparameters; choose a preset with --preset NAME")
        name, equals, text = item.partition("=")
        if not equals:
            raise UsageError(f"`--set` takes KEY=VALUE, e.g. num_layers=6, got {item!r}")
        spec = schemas.hparam(family, name.strip(), preset or family)
        edits[spec.name] = spec.parse(text)
    if edits and family is not None:  # derived values follow their sources, as on the Model page
        base = presets.get_preset(preset).hparams if preset is not None else schemas.family_defaults(family)
        overrides = schemas.edit(family, base, overrides, edits)
    if origin is not None and args.set:
        origin = dataclasses.replace(origin, edited=True)
    if family is not None:
        dense = [flag for flag in ("input_dim", "features", "no_bias") if getattr(args, flag) not in (None, False)]
        if dense:
            flags = ", ".join("--" + flag.replace("_", "-") for flag in dense)
            whose = f"preset {preset!r}" if preset else presets.model_title(config)
            raise UsageError(f"{flags}: only for the Dense stack; {whose} sets its own shapes (change them with --set)")
    return {"preset": preset, "origin": origin, "overrides": overrides}


def frame_text(frame: pd.DataFrame) -> str:
    """A frame as aligned text: counts with separators, right-aligned; text left-aligned."""
    counts = {name for name in frame.columns if frame[name].dtype == "int64"}
    return rows_text({name: list(frame[name]) for name in frame.columns}, counts)


def rows_text(columns: Mapping[str, Sequence[Any]], counts: set[str] | frozenset[str] = frozenset()) -> str:
    """Columns (name -> values) as aligned text, no pandas needed: the ``counts`` columns with
    separators, right-aligned, as are ``percent`` ones; text left-aligned."""
    aligned = []
    for name, values in columns.items():
        is_count = name in counts
        cells = [units.count(value) if is_count else str(value) for value in values]
        width = max(len(name), *(len(cell) for cell in cells))
        align = str.rjust if is_count or name.startswith("percent") else str.ljust
        aligned.append([align(cell, width) for cell in [name, *cells]])
    return "\n".join("  ".join(row).rstrip() for row in zip(*aligned, strict=True))


def one_line(text: str) -> str:
    """``text`` with every unprintable character escaped as Python writes it (``\\n``, ``\\x1b``):
    an error is one line, and a typed value can neither break it nor send a terminal escape."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)

"""Configurations in URLs: the shareable link that reopens exactly what someone sees.

A link is a query string such as
``?v=2&input_dim=784&layers=512x2_10&batch=1&seed=0&shards=8&dtype=float32``. Scalars are plain
integers; ``dtype`` is the storage dtype of the byte figures. The layer table is one compact token:
layers separated by ``_``, each ``<features>[n][x<repeat>]`` (``n``: no bias; ``x3``: the same
layer three times), so a 256-layer stack of equal widths is ``4096x256`` and every character is
URL-safe. An architecture preset replaces ``input_dim`` and ``layers`` with ``preset=gpt2-small``
and one ``h.<name>=<value>`` per hyperparameter changed from the preset's (``h.num_layers=6``,
``h.tied_embeddings=false``, ``h.stage_blocks=3,4,6,3``). A model opened from a Hugging Face
config.json carries its ``family``, ``model_type`` and ``name`` (and ``edited=true`` once changed)
instead of a preset, its ``h.`` values against the family's defaults, so it reopens under its own
name; one fetched from the Hugging Face Hub adds ``hf=OWNER/NAME`` (and ``rev=REV`` when a revision
was given; ``name`` is left out when it is the Hub id), and still reopens without asking the Hub.
A link with ``hf`` but no ``family`` (written by hand, or pasted from a chat) names a model to fetch:
``Decoded.hub`` says which, checked against the Hub's id rules here, and the dashboard fetches it.

Versions: 1 had the Dense stack only; 2 added presets. A version-1 link opens as it always did.

Links arrive from strangers in chats, so decoding never raises. Each field is checked on its own;
a bad one falls back to its default and adds one problem sentence a page can show; the good
fields are kept. ``v`` is the encoding's version: links written by older versions keep opening,
and a link from a newer dcsim is explained instead of guessed at.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from dcsim.inputs import show
from dcsim.model import presets, schemas
from dcsim.model.config import (
    MAX_HUB_ID_CHARS,
    MAX_LAYERS,
    MAX_MODEL_TYPE_CHARS,
    MAX_NAME_CHARS,
    MAX_REVISION_CHARS,
    DenseLayer,
    ModelConfig,
    Origin,
    check_dtype,
    check_field,
    check_hub_id,
    check_hub_revision,
    parse_int,
)

LINK_VERSION = 2
MAX_SCALAR_CHARS = 32
# 256 layers of the widest kind, each a distinct token ("1048576n_"), fit with room to spare.
MAX_LAYERS_CHARS = 4096

# Query key -> ModelConfig field, in the order links are written.
SCALAR_KEYS = {"input_dim": "input_dim", "batch": "batch_size", "seed": "seed", "shards": "num_shards"}
LAYERS_KEY = "layers"
VERSION_KEY = "v"
DTYPE_KEY = "dtype"
PRESET_KEY = "preset"
FAMILY_KEY = "family"
MODEL_TYPE_KEY = "model_type"
NAME_KEY = "name"
EDITED_KEY = "edited"
ORIGIN_KEYS = (FAMILY_KEY, MODEL_TYPE_KEY, NAME_KEY, EDITED_KEY)
HUB_KEY = "hf"
REVISION_KEY = "rev"
HUB_KEYS = (HUB_KEY, REVISION_KEY)
HPARAM_PREFIX = "h."
KEYS = (
    VERSION_KEY,
    "input_dim",
    LAYERS_KEY,
    "batch",
    "seed",
    "shards",
    DTYPE_KEY,
    PRESET_KEY,
    *ORIGIN_KEYS,
    *HUB_KEYS,
)
_MAX_NAMED = 5  # unknown hyperparameters named in one message; the rest are counted

# Fixed-width pieces and no nested quantifiers: this cannot backtrack, whatever arrives.
_LAYER_TOKEN = re.compile(r"([0-9]{1,8})(n?)(?:x([0-9]{1,4}))?")


@dataclasses.dataclass(frozen=True, kw_only=True)
class HubRef:
    """A model a link names only by its Hub id, to be fetched: both checked by the Hub's rules."""

    repo_id: str
    revision: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decoded:
    """What a link described.

    Attributes:
      config: the configuration, with every field the link got wrong at its default.
      problems: one sentence per rejected field, saying what was wrong and what was used instead.
      hub: the Hub model to fetch when the link names one by ``hf`` alone (no ``family``); ``config``
        is then the Dense stack with the link's shards, dtype, seed and batch, to be replaced by it.
    """

    config: ModelConfig
    problems: tuple[str, ...] = ()
    hub: HubRef | None = None


def encode_layers(layers: Sequence[DenseLayer]) -> str:
    """The compact layer token, runs of equal layers folded: ``512x2_10``."""
    tokens: list[str] = []
    index = 0
    while index < len(layers):
        run = 1
        while index + run < len(layers) and layers[index + run] == layers[index]:
            run += 1
        layer = layers[index]
        token = f"{layer.features}{'' if layer.use_bias else 'n'}"
        tokens.append(token if run == 1 else f"{token}x{run}")
        index += run
    return "_".join(tokens)


def decode_layers(text: str) -> tuple[DenseLayer, ...]:
    """Parse a layer token; raises ``ValueError`` naming the piece that is wrong."""
    if len(text) > MAX_LAYERS_CHARS:
        raise ValueError(f"`layers` may be at most {MAX_LAYERS_CHARS:,} characters, got {len(text):,}")
    layers: list[DenseLayer] = []
    for position, token in enumerate(text.split("_"), start=1):
        match = _LAYER_TOKEN.fullmatch(token)
        if match is None:
            raise ValueError(
                f"`layers` item {position} is {show(token)}; each item is a width with an optional "
                "`n` (no bias) and `x<count>` (repeat), e.g. 512x2_10n"
            )
        features, no_bias, repeat = match.groups()
        count = 1 if repeat is None else int(repeat)
        if count < 1 or len(layers) + count > MAX_LAYERS:
            raise ValueError(f"`layers` may hold 1 to {MAX_LAYERS} layers in all, got {show(text)}")
        try:
            width = check_field(int(features), "features")
        except ValueError as err:
            raise ValueError(f"`layers` item {position}: {err}") from None
        layer = DenseLayer(features=width, use_bias=not no_bias)
        layers.extend([layer] * count)
    return tuple(layers)


def encode(config: ModelConfig) -> dict[str, str]:
    """The query parameters that reopen ``config``, version first; the Dense stack's fields only
    for the Dense stack."""
    params = {VERSION_KEY: str(LINK_VERSION)}
    if config.is_dense:
        params |= {"input_dim": str(config.input_dim), LAYERS_KEY: encode_layers(config.layers)}
    params |= {
        "batch": str(config.batch_size),
        "seed": str(config.seed),
        "shards": str(config.num_shards),
        DTYPE_KEY: config.dtype,
    }
    if config.preset is not None:
        params[PRESET_KEY] = config.preset
    if config.origin is not None:
        origin = config.origin
        params |= {FAMILY_KEY: origin.family, MODEL_TYPE_KEY: origin.model_type}
        if origin.name != origin.hub_id:
            params[NAME_KEY] = origin.name
        if origin.edited:
            params[EDITED_KEY] = "true"
        if origin.hub_id is not None:
            params[HUB_KEY] = origin.hub_id
        if origin.revision is not None:
            params[REVISION_KEY] = origin.revision
    params.update({HPARAM_PREFIX + name: presets.value_text(value) for name, value in config.overrides})
    return params


def _decode_origin(params: Mapping[str, Sequence[str]], problems: list[str]) -> Origin | None:
    """The link's model opened from a file, if it names one: its family is required; a bad
    model_type or name is replaced (``unknown``, the model_type), each with a sentence."""
    try:
        family = single(params, FAMILY_KEY, MAX_SCALAR_CHARS)
        schemas.schema(family)
    except (TypeError, ValueError) as err:
        problems.append(f"Link: `{FAMILY_KEY}`: {err}.")
        return None
    fields: dict[str, Any] = {"family": family, "model_type": "unknown", "name": ""}
    for key, limit in ((MODEL_TYPE_KEY, MAX_MODEL_TYPE_CHARS), (NAME_KEY, MAX_NAME_CHARS)):
        if key not in params:
            continue
        try:
            fields[key] = single(params, key, limit)
            Origin(**{**fields, "name": fields["name"] or "model"})
        except (TypeError, ValueError) as err:
            fields[key] = "unknown" if key == MODEL_TYPE_KEY else ""
            problems.append(f"Link: {err}; using {'unknown' if key == MODEL_TYPE_KEY else 'its model_type'}.")
    edited = False
    if EDITED_KEY in params:
        try:
            text = single(params, EDITED_KEY, MAX_SCALAR_CHARS)
        except ValueError as err:
            text = str(err)
        if text not in ("true", "false"):
            problems.append(f"Link: `{EDITED_KEY}` must be true or false, got {show(text)}; using false.")
        edited = text == "true"
    hub_id, revision = None, None
    if HUB_KEY in params:
        try:
            hub_id = check_hub_id(single(params, HUB_KEY, MAX_HUB_ID_CHARS), HUB_KEY)
        except (TypeError, ValueError) as err:
            problems.append(f"Link: {err}; showing the model without a Hub id.")
    if REVISION_KEY in params:
        revision = _revision(params, problems, hub_id, "ignoring it")
    return Origin(
        family=family,
        model_type=str(fields["model_type"]),
        name=str(fields["name"] or hub_id or fields["model_type"]),
        edited=edited,
        hub_id=hub_id,
        revision=revision,
    )


def _revision(params: Mapping[str, Sequence[str]], problems: list[str], hub_id: str | None, instead: str) -> str | None:
    """The link's ``rev``, checked, for the Hub model ``hub_id``; None with a sentence ending in
    ``instead`` when it is bad or names no model."""
    if hub_id is None:
        names = f"the link names no valid one (`{HUB_KEY}`)"
        problems.append(f"Link: `{REVISION_KEY}` is a revision of a Hub model, and {names}; {instead}.")
        return None
    try:
        return check_hub_revision(single(params, REVISION_KEY, MAX_REVISION_CHARS), REVISION_KEY)
    except (TypeError, ValueError) as err:
        problems.append(f"Link: {err}; {instead}.")
        return None


def _decode_hub(params: Mapping[str, Sequence[str]], names: list[str], problems: list[str]) -> HubRef | None:
    """The Hub model a link names by ``hf`` alone, to fetch; None (with a sentence) when its id or
    revision breaks the Hub's rules, so nothing is asked of the Hub for it."""
    dense = "showing the Dense stack instead" + (" and ignoring its hyperparameters (`h.…`)" if names else "")
    try:
        repo_id = check_hub_id(single(params, HUB_KEY, MAX_HUB_ID_CHARS), HUB_KEY)
    except (TypeError, ValueError) as err:
        problems.append(f"Link: {err}; {dense}.")
        return None
    revision = None
    if REVISION_KEY in params:
        before = len(problems)
        revision = _revision(params, problems, repo_id, f"{repo_id} is not opened at another revision instead; {dense}")
        if len(problems) > before:
            return None
    if names:
        problems.append(
            f"Link: hyperparameters (`h.…`) were given without the model's `{FAMILY_KEY}`; ignoring them: "
            f"{repo_id} opens as its config.json on the Hub has it."
        )
    return HubRef(repo_id=repo_id, revision=revision)


def _decode_model(
    params: Mapping[str, Sequence[str]], config: ModelConfig, problems: list[str]
) -> tuple[ModelConfig, HubRef | None]:
    """Add the link's preset (or model opened from a file) and each of its hyperparameters that
    is valid, so a bad one (alone, or together with the others) is reported and the rest kept; or
    the Hub model it names by ``hf`` alone, to fetch."""
    names = [key[len(HPARAM_PREFIX) :] for key in params if key.startswith(HPARAM_PREFIX)]
    origin_named = [key for key in (*ORIGIN_KEYS, *HUB_KEYS) if key in params]
    if PRESET_KEY in params:
        if origin_named:
            problems.append(
                f"Link: a preset and a file's model ({', '.join(f'`{key}`' for key in origin_named)}) were both "
                "given; showing the preset."
            )
        try:
            row = presets.get_preset(single(params, PRESET_KEY, MAX_SCALAR_CHARS))
        except (TypeError, ValueError) as err:
            problems.append(f"Link: {err}; showing the Dense stack instead.")
            return config, None
        config = dataclasses.replace(config, preset=row.name, overrides=())
        family, base, whose = row.family, dict(row.hparams), row.name
    elif FAMILY_KEY not in params and HUB_KEY in params:
        return config, _decode_hub(params, names, problems)
    elif origin_named == [REVISION_KEY]:
        _revision(params, problems, None, "ignoring it")
        if names:
            problems.append("Link: hyperparameters (`h.…`) were given without a `preset`; ignoring them.")
        return config, None
    elif FAMILY_KEY in params or origin_named:
        origin = _decode_origin(params, problems) if FAMILY_KEY in params else None
        if origin is None:
            ignored = " and ignoring its hyperparameters (`h.…`)" if names else ""
            why = "" if FAMILY_KEY in params else f"`{FAMILY_KEY}` is missing, so "
            problems.append(
                f"Link: {why}the model opened from a file cannot be built; showing the Dense stack{ignored}."
            )
            return config, None
        config = dataclasses.replace(config, origin=origin, overrides=())
        family, base, whose = origin.family, schemas.family_defaults(origin.family), origin.title
    else:
        if names:
            problems.append("Link: hyperparameters (`h.…`) were given without a `preset`; ignoring them.")
        return config, None
    valid = {spec.name for spec in schemas.schema(family)}
    unknown = [name for name in names if name not in valid]
    if unknown:
        named = ", ".join(show(name) for name in unknown[:_MAX_NAMED])
        more = f" and {len(unknown) - _MAX_NAMED:,} more" if len(unknown) > _MAX_NAMED else ""
        problems.append(
            f"Link: {whose} has no hyperparameter {named}{more}; ignoring "
            f"{'it' if len(unknown) == 1 else 'them'}. Valid: {', '.join(sorted(valid))}."
        )
    refused: dict[str, Exception] = {}

    def report() -> None:  # in the link's order
        problems.extend(
            f"Link: `{HPARAM_PREFIX}{name}`: {refused[name]}; using {whose}'s value {presets.value_text(base[name])}."
            for name in names
            if name in refused
        )

    parsed: dict[str, Any] = {}
    for name in (name for name in names if name in valid):
        key = HPARAM_PREFIX + name
        try:
            parsed[name] = schemas.hparam(family, name, whose).parse(single(params, key, MAX_SCALAR_CHARS * 4))
        except (TypeError, ValueError) as err:
            refused[name] = err
    # The values are checked together (heads must divide d_model...), so a link that changes two
    # tied values at once (d_model=1 with num_heads=1) must be tried whole first: one at a time,
    # in the link's order, would refuse a configuration the link was written from.
    try:
        config = dataclasses.replace(config, overrides=tuple(parsed.items()))
    except (TypeError, ValueError):
        pass
    else:
        report()
        return config, None
    # Else keep as many as fit, in passes until none more does; report the rest.
    overrides: dict[str, Any] = {}
    pending = dict(parsed)
    while pending:
        added = False
        for name, value in list(pending.items()):
            try:
                config = dataclasses.replace(config, overrides=tuple({**overrides, name: value}.items()))
            except (TypeError, ValueError) as err:
                refused[name] = err
                continue
            overrides[name] = value
            del pending[name]
            refused.pop(name, None)
            added = True
        if not added:
            break
    report()
    return config, None


def query_string(config: ModelConfig) -> str:
    return urlencode(encode(config))


def link(base_url: str, config: ModelConfig) -> str:
    """A full link: ``base_url`` (scheme, host, base path and page) with the configuration."""
    return f"{base_url.split('?', 1)[0]}?{query_string(config)}"


def single(params: Mapping[str, Sequence[str]], key: str, limit: int = MAX_SCALAR_CHARS) -> str:
    """The one value of ``key`` in query parameters (each key with all its values), at most
    ``limit`` characters; raises ``ValueError`` for a repeated key or a longer value. Shared by
    every link codec (the configuration's here, the comparison's in ``dcsim.compare``)."""
    values = params[key]
    if len(values) != 1:
        raise ValueError(f"`{key}` appears {len(values)} times in the link, where it may appear once")
    value = values[0]
    if len(value) > limit:
        raise ValueError(f"`{key}` may be at most {limit:,} characters, got {len(value):,}")
    return value


def read_version(params: Mapping[str, Sequence[str]], key: str, current: int, what: str) -> tuple[int, str | None]:
    """A link format's version under ``key`` and the problem to say about it, if any: ``current``
    when the link has none or a bad one (not plain digits: "a {what} version such as {current}")."""
    if key not in params:
        return current, None
    try:
        text = single(params, key)
        if not (text.isascii() and text.isdigit()):
            raise ValueError(f"`{key}` must be a {what} version such as {current}, got {show(text)}")
    except (TypeError, ValueError) as err:
        return current, f"Link: {err}; reading it as version {current}."
    return int(text), None


def decode(params: Mapping[str, Sequence[str]]) -> Decoded:
    """Read a configuration from query parameters (each key with all its values, in order).

    Never raises for any input: unknown keys are ignored (other pages keep their own settings in
    the same query string), and each bad field is reported and left at its default.
    """
    defaults = ModelConfig()
    problems: list[str] = []

    def reject(key: str, err: Exception, default: object) -> None:
        problems.append(f"Link: {err}; using the default {default}.")

    version, problem = read_version(params, VERSION_KEY, LINK_VERSION, "link")
    if problem:
        problems.append(problem)
    if version > LINK_VERSION:
        return Decoded(
            config=defaults,
            problems=(
                f"This link was made by a newer dcsim (link version {version:,}; this one reads up "
                f"to version {LINK_VERSION}). Showing the defaults instead: ask for the configuration "
                "JSON, or open the link where it was made.",
            ),
        )

    fields: dict[str, Any] = {}
    for key, field in SCALAR_KEYS.items():
        if key not in params:
            continue
        try:
            fields[field] = parse_int(single(params, key, MAX_SCALAR_CHARS), field, key)
        except (TypeError, ValueError) as err:
            reject(key, err, f"{getattr(defaults, field):,}")
    if LAYERS_KEY in params:
        try:
            fields["layers"] = decode_layers(single(params, LAYERS_KEY, MAX_LAYERS_CHARS))
        except (TypeError, ValueError) as err:
            reject(LAYERS_KEY, err, encode_layers(defaults.layers))
    if DTYPE_KEY in params:
        try:
            fields["dtype"] = check_dtype(single(params, DTYPE_KEY, MAX_SCALAR_CHARS))
        except (TypeError, ValueError) as err:
            reject(DTYPE_KEY, err, defaults.dtype)
    config, hub = _decode_model(params, dataclasses.replace(defaults, **fields), problems)
    return Decoded(config=config, problems=tuple(problems), hub=hub)

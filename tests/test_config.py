"""The validated configuration: conversions, limits, JSON round trips and hostile files."""

import json
from fractions import Fraction

import hypothesis.strategies as hs
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

from dcsim.inputs import as_int
from dcsim.model.config import (
    MAX_CONFIG_BYTES,
    MAX_LAYERS,
    MAX_SEED,
    DenseLayer,
    ModelConfig,
    parse_int,
    parse_widths,
)


@pytest.mark.parametrize(
    "value, expected",
    [
        (4, 4),
        (4.0, 4),
        (np.float32(4.0), 4),
        (np.int64(4), 4),
        (np.array(4.0), 4),
        (jnp.asarray(4.0), 4),
        (jnp.asarray(4, dtype=jnp.int32), 4),
        (Fraction(8, 2), 4),
    ],
    ids=["int", "float", "np-float32", "np-int64", "0d-numpy", "0d-jax-float", "0d-jax-int", "fraction"],
)
def test_as_int_accepts_integer_valued_numbers(value, expected):
    result = as_int(value, "num_shards")
    assert result == expected and type(result) is int


NOT_INTS = {
    "fraction-float": (2.5, ValueError, r"`num_shards` must be a positive integer, got 2\.5"),
    "zero": (0, ValueError, r"positive integer, got 0"),
    "negative": (-3, ValueError, r"positive integer, got -3"),
    "nan": (float("nan"), ValueError, r"got nan"),
    "inf": (float("inf"), ValueError, r"got inf"),
    "bool": (True, TypeError, r"got the bool True"),
    "np-bool": (np.bool_(True), TypeError, r"got the bool True"),
    "str": ("4", TypeError, r"got '4'"),
    "none": (None, TypeError, r"got NoneType None"),
    "complex": (1 + 2j, TypeError, r"got complex"),
    "vector": (np.ones(2), TypeError, r"must be a scalar, got an array of shape \(2,\)"),
    "fraction": (Fraction(1, 3), ValueError, r"got 1/3"),
}


@pytest.mark.parametrize("value, error, message", list(NOT_INTS.values()), ids=list(NOT_INTS))
def test_as_int_rejects_with_rule_and_value(value, error, message):
    with pytest.raises(error, match=message):
        as_int(value, "num_shards")


def test_as_int_states_the_range_when_capped():
    with pytest.raises(ValueError, match=r"`seed` must be an integer from 0 to 4,294,967,295 \(why\), got 4294967296"):
        as_int(2**32, "seed", minimum=0, maximum=MAX_SEED, why="why")


def test_huge_float_is_out_of_range_not_an_overflow():
    with pytest.raises(ValueError, match=r"got 1e\+300"):
        as_int(1e300, "input_dim", maximum=10)


def test_long_values_are_cut_in_messages():
    with pytest.raises(TypeError) as info:
        as_int("9" * 50_000, "seed")
    assert len(str(info.value)) < 200 and "50,002 characters" in str(info.value)


@pytest.mark.parametrize(
    "text, expected",
    [("2", 2), (" 2 ", 2), ("2.0", 2), ("1e3", 1000), ("0x10", None), ("", None), ("1e400", None), ("nan", None)],
)
def test_parse_int(text, expected):
    if expected is None:
        with pytest.raises((TypeError, ValueError), match=r"`--shards` must be an integer from 1 to 1,048,576"):
            parse_int(text, "num_shards", "--shards")
    else:
        assert parse_int(text, "num_shards", "--shards") == expected


def test_parse_widths():
    assert parse_widths("4, 8,2", use_bias=False) == tuple(DenseLayer(features=f, use_bias=False) for f in (4, 8, 2))
    with pytest.raises(ValueError, match=f"at most {MAX_LAYERS} layers"):
        parse_widths(",".join(["4"] * (MAX_LAYERS + 1)))


def test_defaults_are_the_seed_example():
    config = ModelConfig()
    assert (config.input_dim, config.layers, config.batch_size, config.seed, config.num_shards) == (
        4,
        (DenseLayer(features=4, use_bias=True),),
        1,
        0,
        2,
    )


def test_config_is_frozen_and_hashable():
    config = ModelConfig()
    with pytest.raises(AttributeError):
        config.num_shards = 3  # type: ignore[misc]
    assert hash(config) == hash(ModelConfig())


@pytest.mark.parametrize(
    "fields, error, message",
    [
        ({"layers": ()}, ValueError, "at least one Dense layer"),
        ({"layers": [DenseLayer(features=1)] * (MAX_LAYERS + 1)}, ValueError, f"at most {MAX_LAYERS} layers"),
        ({"layers": "4"}, TypeError, "list of Dense layers"),
        ({"layers": [4]}, TypeError, r"`layers\[0\]` must be a DenseLayer"),
        ({"input_dim": 0}, ValueError, "`input_dim` must be an integer from 1 to 1,048,576, got 0"),
        ({"batch_size": 2**21}, ValueError, "`batch_size` must be an integer from 1"),
        ({"seed": -1}, ValueError, "`seed` must be an integer from 0 to 4,294,967,295"),
        ({"num_shards": 1.5}, ValueError, r"`num_shards` must be an integer from 1 to 1,048,576, got 1\.5"),
    ],
    ids=["no-layers", "too-many-layers", "layers-str", "layer-int", "input-dim", "batch", "seed", "shards"],
)
def test_model_config_rejects(fields, error, message):
    with pytest.raises(error, match=message):
        ModelConfig(**fields)


def test_dense_layer_rejects_non_bool_bias():
    with pytest.raises(TypeError, match="`use_bias` must be true or false, got int 1"):
        DenseLayer(features=4, use_bias=1)


configs = hs.builds(
    ModelConfig,
    input_dim=hs.integers(1, 1 << 20),
    layers=hs.lists(
        hs.builds(DenseLayer, features=hs.integers(1, 1 << 20), use_bias=hs.booleans()), min_size=1, max_size=8
    ).map(tuple),
    batch_size=hs.integers(1, 1 << 20),
    seed=hs.integers(0, MAX_SEED),
    num_shards=hs.integers(1, 1 << 20),
)


@given(configs)
def test_json_round_trip(config):
    assert ModelConfig.from_json(config.to_json()) == config


@given(configs)
def test_integer_valued_floats_in_json_are_accepted(config):
    data = config.to_dict()
    data["num_shards"] = float(data["num_shards"])
    data["layers"][0]["features"] = float(data["layers"][0]["features"])
    assert ModelConfig.from_json(json.dumps(data)) == config


def test_missing_fields_take_defaults():
    assert ModelConfig.from_json("{}") == ModelConfig()
    assert ModelConfig.from_json('{"num_shards": 3}').num_shards == 3


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "must be a JSON object, got an array"),
        ('{"shards": 2}', r"unknown configuration field 'shards'; valid fields: format, version, input_dim"),
        ('{"num_shards": 2, "num_shards": 3}', "repeats the field 'num_shards'"),
        ('{"num_shards": 1e400}', "`num_shards` must be an integer from 1 to 1,048,576, got inf"),
        ('{"num_shards": "2"}', "got '2'"),
        ('{"num_shards": ' + "9" * 5000 + "}", "not valid JSON"),
        (
            '{"layers": [{"features": 4, "bias": true}]}',
            r"unknown `layers\[0\]` field 'bias'; valid fields: features, use_bias",
        ),
        ('{"layers": [{"use_bias": true}]}', r"`layers\[0\]` needs `features`"),
        ('{"layers": [{"features": 0}]}', r"`layers\[0\]`: `features` must be an integer from 1"),
        ('{"layers": [4]}', r"`layers\[0\]` must be an object"),
        ('{"layers": {}}', "`layers` must be a JSON array"),
        ('{"layers": [{"features": 4, "use_bias": 1}]}', "`use_bias` must be true or false"),
        ('{"version": 2}', "version 2, newer than this dcsim reads"),
        ('{"format": "other"}', "`format` must be 'dcsim.config'"),
        ("{", "not valid JSON: Expecting property name"),
        ("[" * 100_000, "at most 65,536 bytes"),
        ("[" * 60_000, "nested too deeply"),
        (b"\xff\xfe{}", "must be UTF-8 text"),
        ("", "not valid JSON"),
    ],
    ids=[
        "array",
        "unknown",
        "duplicate",
        "1e400",
        "string-number",
        "huge-int",
        "layer-unknown",
        "layer-missing",
        "layer-zero",
        "layer-int",
        "layers-object",
        "bias-int",
        "newer-version",
        "format",
        "truncated",
        "oversized",
        "deep",
        "not-utf8",
        "empty",
    ],
)
def test_hostile_json_is_rejected_with_a_reason(text, message):
    with pytest.raises((TypeError, ValueError), match=message):
        ModelConfig.from_json(text)


def test_size_cap_is_exact():
    padding = " " * (MAX_CONFIG_BYTES - 2)
    assert ModelConfig.from_json("{" + padding + "}") == ModelConfig()
    with pytest.raises(ValueError, match="at most 65,536 bytes, got 65,537"):
        ModelConfig.from_json("{" + padding + " }")


def parse_or_reason(text):
    """A configuration, or the reason it was refused; any other exception escapes the test."""
    try:
        return ModelConfig.from_json(text), ""
    except (TypeError, ValueError) as err:
        return None, str(err)


@given(hs.one_of(hs.text(max_size=200), hs.binary(max_size=200)))
def test_any_text_is_a_configuration_or_a_clear_refusal(text):
    config, reason = parse_or_reason(text)
    assert (config is None) == bool(reason)


json_values = hs.recursive(
    hs.none() | hs.booleans() | hs.integers(-(2**70), 2**70) | hs.floats() | hs.text(max_size=10),
    lambda children: hs.lists(children, max_size=4) | hs.dictionaries(hs.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
config_like = hs.fixed_dictionaries(
    {},
    optional={
        "input_dim": json_values,
        "num_shards": json_values,
        "seed": json_values,
        "batch_size": json_values,
        "version": json_values,
        "layers": hs.lists(
            hs.fixed_dictionaries({}, optional={"features": json_values, "use_bias": json_values}), max_size=3
        )
        | json_values,
    },
)


@given(config_like)
def test_any_json_shaped_like_a_configuration_is_accepted_or_refused_clearly(data):
    config, reason = parse_or_reason(json.dumps(data))
    assert (config is None) == bool(reason)
    if config is not None:
        assert ModelConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    "text",
    ["٣", "１２", "1_000", "0x10", "1,000", "", "4 4", "--4"],
    ids=["arabic-indic", "fullwidth", "underscore", "hex", "comma", "empty", "space", "double-sign"],
)
def test_typed_numbers_are_ascii_digits_only(text):
    # Python's int() reads "٣" as 3 and "1_000" as 1000: a link must not carry numbers that way.
    with pytest.raises(TypeError, match=r"`num_shards` must be an integer from 1 to 1,048,576, got"):
        parse_int(text, "num_shards")


@pytest.mark.parametrize(
    "text, expected", [("+5", 5), (" 7 ", 7), ("1e3", 1000), ("2.0", 2), (".5e1", 5), ("9" * 5000 + "e-4990", None)]
)
def test_typed_numbers_in_every_usual_spelling(text, expected):
    if expected is None:
        with pytest.raises(ValueError, match="must be an integer from 1 to 1,048,576"):
            parse_int(text, "num_shards")
    else:
        assert parse_int(text, "num_shards") == expected

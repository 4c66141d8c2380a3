"""The link codec: every valid configuration survives a round trip, and no query string raises."""

from urllib.parse import parse_qs, urlencode

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from conftest import examples
from dcsim import links
from dcsim.model import presets, schemas
from dcsim.model.config import MAX_LAYERS, DenseLayer, ModelConfig, parse_int

layers = st.lists(
    st.builds(DenseLayer, features=st.integers(1, 2**20), use_bias=st.booleans()), min_size=1, max_size=MAX_LAYERS
)
configs = st.builds(
    ModelConfig,
    input_dim=st.integers(1, 2**20),
    layers=layers.map(tuple),
    batch_size=st.integers(1, 2**20),
    seed=st.integers(0, 2**32 - 1),
    num_shards=st.integers(1, 2**20),
)


def query(text: str) -> dict[str, list[str]]:
    """A query string as Streamlit hands it over: every key with all its values."""
    return parse_qs(text, keep_blank_values=True)


@given(configs)
def test_every_configuration_survives_a_round_trip(config):
    decoded = links.decode(query(links.query_string(config)))
    assert decoded.problems == ()
    assert decoded.config == config


@given(configs)
def test_links_stay_short_and_url_safe(config):
    text = links.query_string(config)
    assert len(text) < 4096
    assert all(char.isalnum() or char in "=&_" for char in text)


@pytest.mark.parametrize(
    ("layers_token", "widths"),
    [
        ("4", [(4, True)]),
        ("512x2_10", [(512, True), (512, True), (10, True)]),
        ("8nx3_2", [(8, False)] * 3 + [(2, True)]),
        ("4096x256", [(4096, True)] * 256),
    ],
    ids=["seed-example", "mnist-mlp", "no-bias-run", "deepest"],
)
def test_layer_tokens_read_as_written(layers_token, widths):
    decoded = links.decode({"layers": [layers_token]})
    assert [(layer.features, layer.use_bias) for layer in decoded.config.layers] == widths
    assert links.encode_layers(decoded.config.layers) == layers_token


def test_an_empty_link_is_the_seed_example():
    assert links.decode({}) == links.Decoded(config=ModelConfig())


def test_a_hand_typed_link_without_a_version_opens():
    decoded = links.decode(query("shards=3&input_dim=8"))
    assert (decoded.config.num_shards, decoded.config.input_dim, decoded.problems) == (3, 8, ())


def test_bad_fields_fall_back_one_by_one_and_keep_the_good_ones():
    decoded = links.decode(query("v=1&input_dim=784&layers=512x2_10&shards=1e400&seed=-1&batch=abc"))
    config = decoded.config
    assert (config.input_dim, len(config.layers), config.num_shards, config.seed, config.batch_size) == (
        784,
        3,
        2,
        0,
        1,
    )
    assert len(decoded.problems) == 3
    assert (
        "Link: `shards` must be an integer from 1 to 1,048,576, got '1e400'; using the default 2." in decoded.problems
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("shards=1e400", "`shards` must be an integer from 1 to 1,048,576, got '1e400'"),
        ("shards=-3", "got '-3'"),
        ("shards=nan", "got 'nan'"),
        ("shards=inf", "got 'inf'"),
        ("shards=2.5", "got '2.5'"),
        ("shards=" + "9" * 40, "at most 32 characters, got 40"),
        ("seed=4294967296", "the range jax.random.PRNGKey takes without wrapping"),
        ("input_dim=%00", "got '\\x00'"),
        ("input_dim=%E2%85%A8", "got 'Ⅸ'"),
        ("shards=2&shards=3", "`shards` appears 2 times in the link"),
        ("layers=", "`layers` item 1 is ''"),
        ("layers=4__4", "`layers` item 2 is ''"),
        ("layers=4x0", "1 to 256 layers"),
        ("layers=4x257", "1 to 256 layers"),
        ("layers=2x200_2x57", "1 to 256 layers"),
        ("layers=0", "`layers` item 1: `features` must be an integer from 1 to 1,048,576, got 0"),
        ("layers=99999999", "got 99999999"),
        ("layers=4,8", "`layers` item 1 is '4,8'"),
        ("layers=-4", "`layers` item 1 is '-4'"),
        ("layers=" + "4_" * 3000, "at most 4,096 characters"),
        ("layers=%F0%9F%92%A5", "`layers` item 1 is '💥'"),
        ("v=banana", "`v` must be a link version such as 2, got 'banana'"),
    ],
    ids=lambda value: value[:30],
)
def test_hostile_fields_are_explained_never_raised(text, message):
    decoded = links.decode(query(text))
    assert decoded.config == ModelConfig()
    assert len(decoded.problems) == 1
    assert message in decoded.problems[0]


def test_a_link_from_a_newer_dcsim_is_explained_not_guessed():
    decoded = links.decode(query(f"v={links.LINK_VERSION + 1}&shards=8"))
    assert decoded.config == ModelConfig()
    assert "newer dcsim" in decoded.problems[0]


def test_unknown_keys_are_left_for_other_pages():
    assert links.decode(query("mesh=data%3D4&shards=4")).config.num_shards == 4


@given(st.dictionaries(st.sampled_from([*links.KEYS, "x"]), st.lists(st.text(max_size=60), min_size=1, max_size=3)))
def test_no_query_raises(params):
    decoded = links.decode(params)
    assert isinstance(decoded.config, ModelConfig)


@given(st.binary(max_size=300))
def test_no_byte_string_raises(raw):
    decoded = links.decode(query(raw.decode("latin-1")))
    assert isinstance(decoded.config, ModelConfig)
    assert all(isinstance(problem, str) for problem in decoded.problems)


def test_link_keeps_the_base_path_and_page():
    url = links.link("https://team.example/dcsim/shards?old=1", ModelConfig(num_shards=8))
    assert url.startswith("https://team.example/dcsim/shards?v=2&")
    assert query(url.split("?", 1)[1])["shards"] == ["8"]
    assert urlencode(links.encode(ModelConfig())) == "v=2&input_dim=4&layers=4&batch=1&seed=0&shards=2&dtype=float32"
    # A preset's link carries no Dense stack: its input dimension and layers are not used.
    assert urlencode(links.encode(ModelConfig(preset="llama2-70b", num_shards=64, dtype="bfloat16"))) == (
        "v=2&batch=1&seed=0&shards=64&dtype=bfloat16&preset=llama2-70b"
    )


preset_configs = st.sampled_from(
    [
        ModelConfig(preset="gpt2-small"),
        ModelConfig(preset="gpt2-small", overrides={"num_layers": 6, "tied_embeddings": False}),
        ModelConfig(preset="llama2-70b", overrides={"num_kv_heads": 64}, num_shards=4096),
        ModelConfig(preset="resnet50", overrides={"stage_blocks": (2, 2, 2, 2), "bottleneck": False}),
        ModelConfig(preset="bert-base", overrides={"pooler": False, "type_vocab_size": 1}),
        ModelConfig(preset="vit-b16", overrides={"image_size": 384}),
    ]
)


@given(preset_configs)
def test_preset_configurations_survive_a_round_trip(config):
    decoded = links.decode(query(links.query_string(config)))
    assert (decoded.config, decoded.problems) == (config, ())


def test_a_version_1_link_opens_as_it_always_did():
    decoded = links.decode(query("v=1&input_dim=784&layers=512x2_10&batch=1&seed=0&shards=8"))
    assert decoded.problems == ()
    assert (decoded.config.input_dim, len(decoded.config.layers), decoded.config.num_shards) == (784, 3, 8)


def test_a_bad_hyperparameter_is_dropped_and_the_good_ones_kept():
    decoded = links.decode(query("preset=gpt2-small&h.num_heads=5&h.num_layers=6&h.norm=batchnorm"))
    assert decoded.config.overrides == (("num_layers", 6),)
    assert len(decoded.problems) == 2
    assert "using gpt2-small's value 12" in decoded.problems[0]


def test_thousands_of_unknown_hyperparameters_make_one_message():
    decoded = links.decode(query("preset=gpt2-small&" + "&".join(f"h.k{index}=1" for index in range(900))))
    assert decoded.config == ModelConfig(preset="gpt2-small")
    assert len(decoded.problems) == 1
    assert "and 895 more" in decoded.problems[0]


# --- fuzzing (issue 8): every valid configuration, every hostile mapping -------------------------


def _hparam_values(spec):
    if spec.kind == "int":
        nice = [value for value in (1, 2, 3, 4, 8, 12, 64, 768, 1024) if spec.minimum <= value <= spec.maximum]
        return st.one_of(st.sampled_from([*nice, spec.minimum, spec.maximum]), st.integers(spec.minimum, spec.maximum))
    if spec.kind == "bool":
        return st.booleans()
    if spec.kind == "choice":
        return st.sampled_from(spec.choices)
    return st.lists(st.integers(spec.minimum, spec.maximum), min_size=1, max_size=spec.max_length).map(tuple)


@st.composite
def any_preset_config(draw):
    """A preset with any valid set of overrides its schema allows (combinations the family's own
    rules refuse, such as heads not dividing d_model, are redrawn)."""
    name = draw(st.sampled_from(sorted(presets.PRESETS)))
    specs = schemas.schema(presets.PRESETS[name].family)
    chosen = draw(st.lists(st.sampled_from(specs), unique_by=lambda spec: spec.name, max_size=len(specs)))
    overrides = {spec.name: draw(_hparam_values(spec)) for spec in chosen}
    try:
        presets.normalize_overrides(name, overrides)
    except ValueError:
        reject()
    return ModelConfig(
        preset=name,
        overrides=overrides,
        input_dim=draw(st.integers(1, 2**20)),
        batch_size=draw(st.integers(1, 2**20)),
        seed=draw(st.integers(0, 2**32 - 1)),
        num_shards=draw(st.integers(1, 2**20)),
    )


@settings(max_examples=examples(300))
@given(any_preset_config())
def test_every_preset_configuration_survives_a_round_trip(config):
    decoded = links.decode(query(links.query_string(config)))
    assert (decoded.config, decoded.problems) == (config, ())


FIELD_OF = {**links.SCALAR_KEYS, links.LAYERS_KEY: "layers"}
hostile_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["1e400", "nan", "-inf", "2.5", "-1", "0", "4294967296", "9" * 33, "٣", " 8 ", "4x257", "true"]),
    st.lists(  # layer tokens, near the limits: widths to 99,999,999, repeats to 9,999
        st.builds(
            lambda width, no_bias, repeat: f"{width}{'n' * no_bias}{f'x{repeat}' if repeat else ''}",
            st.integers(0, 99_999_999),
            st.booleans(),
            st.one_of(st.none(), st.integers(0, 9_999)),
        ),
        min_size=1,
        max_size=6,
    ).map("_".join),
)
hostile_mapping = st.dictionaries(
    st.sampled_from([*links.KEYS, "h.num_layers", "h.num_heads", "h.norm", "h.stage_blocks", "h.nope", "mesh", "x"]),
    st.lists(hostile_text, min_size=1, max_size=3),
)


def _accepted(key, values):
    """What ``decode`` must do with one field alone: its value, or None when it must refuse it."""
    if len(values) != 1:
        return None
    try:
        if key == links.LAYERS_KEY:
            return links.decode_layers(values[0])
        if len(values[0]) > links.MAX_SCALAR_CHARS:
            return None
        return parse_int(values[0], FIELD_OF[key], key)
    except (TypeError, ValueError):
        return None


@settings(max_examples=examples(150))
@given(hostile_mapping)
def test_every_rejected_field_gets_a_sentence_and_every_good_one_is_kept(params):
    decoded = links.decode(params)
    if any("newer dcsim" in problem for problem in decoded.problems):
        assert decoded == links.Decoded(config=ModelConfig(), problems=decoded.problems)
        assert len(decoded.problems) == 1
        return
    for key, field in FIELD_OF.items():
        if key not in params:
            continue
        value = _accepted(key, params[key])
        if value is None:
            assert any(f"`{key}`" in problem for problem in decoded.problems), (key, decoded.problems)
            assert getattr(decoded.config, field) == getattr(ModelConfig(), field)
        else:
            assert getattr(decoded.config, field) == value
    hparams = [key for key in params if key.startswith(links.HPARAM_PREFIX)]
    overridden = {name for name, _ in decoded.config.overrides}
    for key in hparams:
        name = key[len(links.HPARAM_PREFIX) :]
        if name not in overridden:
            assert any(name in problem or "`h.…`" in problem or "preset" in problem for problem in decoded.problems)
    # every sentence is one line a page can show, and names what it is about
    assert all("\n" not in problem and problem.startswith(("Link:", "This link")) for problem in decoded.problems)


@given(st.binary(max_size=600))
def test_raw_bytes_in_a_link_decode_as_the_server_reads_them(raw):
    """Any bytes after ``?``, percent-encoded or not, as Streamlit parses them (UTF-8, bad bytes
    replaced): decoded without raising, every problem a sentence."""
    text = "".join(chr(byte) if 0x21 <= byte < 0x7F else f"%{byte:02X}" for byte in raw)
    decoded = links.decode(query(text))
    assert isinstance(decoded.config, ModelConfig)
    assert all(isinstance(problem, str) and "\n" not in problem for problem in decoded.problems)


@pytest.mark.parametrize(
    "text",
    [
        "preset=vit-b16&h.d_model=1&h.num_heads=1",  # found by the round trip: one at a time refused d_model
        "preset=gpt2-small&h.d_model=10&h.num_heads=5&h.num_kv_heads=5",  # only valid all together
    ],
)
def test_tied_hyperparameters_changed_together_open_whole(text):
    decoded = links.decode(query(text))
    assert decoded.problems == ()
    assert len(decoded.config.overrides) == text.count("h.")


def test_of_two_tied_hyperparameters_the_one_that_fits_is_kept_whatever_the_order():
    decoded = links.decode(query("preset=gpt2-small&h.d_model=1&h.num_heads=5&h.num_kv_heads=1"))
    # d_model=1 needs num_heads=1: num_heads=5 cannot go with anything; d_model=1 never fits 12 heads
    assert decoded.config.overrides == (("num_kv_heads", 1),)
    assert [problem.split(":")[1].strip() for problem in decoded.problems] == ["`h.d_model`", "`h.num_heads`"]

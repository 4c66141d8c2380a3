"""``--hf OWNER/NAME`` (with ``--revision`` and ``--hf-cache``): a model opened by its Hub id from
the command line, from the shipped cache folder offline or from a loopback Hub (tests/fake_hub.py);
bad input is one line and exit 2, and the token (``HF_TOKEN``) is never printed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_hub import GATED_TOKEN, LLAMA, LLAMA_COMMIT

from conftest import refused_in_one_line
from conftest import run_cli as run

ROOT = Path(__file__).resolve().parent.parent
CACHE = str(ROOT / "examples" / "hub-cache")
LLAMA_TOTAL = "total parameters       6,738,415,616\n"


def test_the_shipped_cache_opens_llama_2_7b_offline(capsys, gated_hub):
    code, out, err = run(capsys, "count", "--hf", LLAMA, "--hf-cache", CACHE, "--shards", "8")
    assert code == 0 and out.startswith(LLAMA_TOTAL)
    assert f"model: {LLAMA} (llama, from the Hub) (decoder:" in out
    assert err == (
        f"dcsim: Opened {LLAMA} (llama, from the Hub) at commit {LLAMA_COMMIT[:12]} from the local Hugging Face "
        "cache. Counted as LlamaForCausalLM: embeddings, blocks, final norm, language-model head untied; rotary "
        "positions hold no parameters.\n"
    )
    assert gated_hub.requests == []  # --hf-cache never asks the network


def test_a_fetched_model_keeps_its_id_and_revision_in_the_json(capsys, gated_hub):
    code, out, _ = run(capsys, "count", "--hf", LLAMA, "--revision", LLAMA_COMMIT, "--format", "json")
    origin = json.loads(out)["config"]["origin"]
    assert code == 0 and origin["hub_id"] == LLAMA and origin["revision"] == LLAMA_COMMIT
    assert json.loads(out)["total_params"] == 6_738_415_616
    assert gated_hub.requests[-1][1] == f"/{LLAMA}/resolve/{LLAMA_COMMIT}/config.json"


def test_set_edits_a_hub_model_under_its_own_name(capsys, gated_hub):
    code, out, _ = run(capsys, "count", "--hf", LLAMA, "--set", "num_layers=2")
    assert code == 0 and f"model: {LLAMA} (llama, from the Hub), edited" in out


def test_a_gated_model_opens_with_hf_token_which_is_never_printed(capsys, gated_hub, monkeypatch):
    err = refused_in_one_line(capsys, "count", "--hf", "gated/model")
    assert "gated/model is a gated model: accept its licence" in err
    monkeypatch.setenv("HF_TOKEN", GATED_TOKEN)
    code, out, err = run(capsys, "count", "--hf", "gated/model", "--format", "json")
    assert code == 0 and json.loads(out)["total_params"] == 6_738_415_616
    assert GATED_TOKEN not in out + err
    assert gated_hub.requests[-1][2] == f"Bearer {GATED_TOKEN}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hf", "../x"], "`--hf` may not hold '..' or '--', got '../x'"),
        (["--hf", "https://huggingface.co/a/b"], "`--hf` is a URL; give the model's Hub id, owner/name"),
        (["--hf", "a/b/c"], "`--hf` is owner/name or a single name, with one '/' at most"),
        (["--hf", "a\x1b[31m"], "`--hf` must be owner/name (mistralai/Mixtral-8x7B-v0.1) or a single name"),
        (["--hf", LLAMA, "--revision", "../main"], "`--revision` must be a branch, tag or commit"),
        (["--revision", "main"], "--revision is for --hf OWNER/NAME"),
        (["--hf-cache", CACHE], "--hf-cache is for --hf OWNER/NAME"),
        (["--hf", LLAMA, "--config", "examples/config.json"], "--hf and --config both name the model; give one"),
        (["--hf", LLAMA, "--hf-cache", "/no/such/folder"], "--hf-cache: '/no/such/folder' is not a folder"),
        (["--hf", "nobody/missing"], "--hf: nobody/missing was not found on the Hub"),
        (["--hf", LLAMA, "--revision", "v9"], f"--hf: {LLAMA} has no revision 'v9'"),
        (
            ["--hf", "nobody/missing", "--hf-cache", CACHE],
            "--hf: --hf-cache reads only its folder, and config.json of nobody/missing is not in the Hugging Face",
        ),
        (["--hf", LLAMA, "--input-dim", "8"], "--input-dim: only for the Dense stack"),
    ],
    ids=lambda value: " ".join(value)[:40] if isinstance(value, list) else None,
)
def test_bad_input_is_one_line_and_exit_2(capsys, gated_hub, argv, message):
    err = refused_in_one_line(capsys, "count", *argv)
    assert message in err
    asked = "--hf-cache" not in argv and (argv[1] == "nobody/missing" or "v9" in argv or "--input-dim" in argv)
    assert bool(gated_hub.requests) == asked  # else refused before anything was asked


def test_hf_hub_offline_reads_only_the_default_cache(capsys, gated_hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    err = refused_in_one_line(capsys, "count", "--hf", LLAMA)
    assert f"HF_HUB_OFFLINE is set, and config.json of {LLAMA} is not in the Hugging Face cache ({tmp_path})" in err
    assert "unset HF_HUB_OFFLINE to fetch it from the Hub" in err
    monkeypatch.setenv("HF_HUB_CACHE", CACHE)
    code, out, _ = run(capsys, "count", "--hf", LLAMA)
    assert code == 0 and out.startswith(LLAMA_TOTAL)
    assert gated_hub.requests == []


def test_every_subcommand_takes_hf(capsys, gated_hub):
    code, out, _ = run(capsys, "layout", "--hf", LLAMA, "--hf-cache", CACHE, "--mesh", "data=8", "--strategy", "fsdp")
    assert code == 0 and "6,738,415,616" in out


@pytest.mark.slow
def test_the_documented_command_runs_offline_in_a_fresh_process():
    closed = "http://127.0.0.1:9"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DCSIM_", "HF_"))}
    env |= {"HF_HUB_OFFLINE": "1", "HTTP_PROXY": closed, "HTTPS_PROXY": closed, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-m", "dcsim", "count", "--hf", LLAMA, "--hf-cache", "examples/hub-cache"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(LLAMA_TOTAL)
    assert result.stderr.startswith(f"dcsim: Opened {LLAMA} (llama, from the Hub) at commit")

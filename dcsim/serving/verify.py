"""XLA's own figure for what a device holds to serve, to check ``dcsim.serving.engine`` against.

A child process (``dcsim.serving.verify_child``) compiles one decoding step of the model in decode
mode, with the weights and the cache carrying their shardings on virtual CPU devices, as
``memory --verify`` compiles the training state. XLA's argument bytes per device are the weights,
the cache, the fixed state and the step's tokens (an int32 a sequence for each token input): they
must equal dcsim's weights + KV + other a device plus those tokens. Its temporary bytes are the
decode workspace of a CPU compile (buffer assignment differs on GPU and TPU), shown, not checked.

Bounds, each checked before a child starts: a mesh without pipeline stages (one program cannot
hold a stage's), at most ``MAX_VERIFY_DEVICES`` devices and ``MAX_VERIFY_ARRAYS`` arrays, and a
layout whose padded or repeated shapes the model can be rebuilt with. The child runs under the
memory check's time limit and shares its two slots a server (``dcsim.runtime.checks.run_check``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dcsim.memory.verify import MAX_VERIFY_ARRAYS
from dcsim.runtime.checks import MAX_VERIFY_DEVICES, VerifyFailed, XlaCheck, run_check
from dcsim.serving.engine import ServingReport
from dcsim.serving.request import REPLICA_AXES
from dcsim.sharding.wire import mesh_json, spec_json

CHILD_MODULE = "dcsim.serving.verify_child"
JOB_NAME = "XLA decode-step check"
TOKEN_BYTES = 4  # an int32 token id a sequence


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepVerified(XlaCheck):
    """XLA's figures for one decoding step beside dcsim's.

    Attributes:
      argument_bytes_per_device: XLA's arguments a device: weights, cache, fixed state, tokens.
      expected_bytes_per_device: dcsim's weights + KV + other a device, plus the tokens.
      token_bytes_per_device: the step's token ids a device (in both figures).
      temp_bytes_per_device: XLA's temporaries: the decode workspace of a CPU compile.
      num_arrays: the arrays compiled (parameters, buffers and cache).
      seconds: the child's wall time.
    """

    argument_bytes_per_device: int
    token_bytes_per_device: int
    temp_bytes_per_device: int

    @property
    def xla_bytes_per_device(self) -> int:
        return self.argument_bytes_per_device


def _rebuilt_hparams(report: ServingReport) -> dict[str, Any]:
    """The hyperparameters the child builds with so its arrays have the layout's stored shapes:
    the vocabulary as padded, the KV heads as repeated to the tensor size."""
    changes: dict[str, Any] = {}
    for row in report.weights.arrays:
        if row.stored_shape == row.shape:
            continue
        name = row.path.rpartition("/")[2]
        module = row.path.rsplit("/", 2)[-2] if row.path.count("/") >= 1 else ""
        if row.path in ("embed/token/embedding",):
            changes["vocab_size"] = row.stored_shape[0]
        elif row.path == "lm_head/kernel":
            changes["vocab_size"] = row.stored_shape[1]
        elif module in ("key", "value") and name in ("kernel", "bias"):
            changes["num_kv_heads"] = row.stored_shape[1 if name == "kernel" else 0]
        else:
            raise ValueError(
                f"XLA's decode-step check rebuilds the model with the layout's shapes, and `{row.path}` is laid out "
                f"as {row.stored_shape} for {row.shape}, which it cannot rebuild; check another strategy"
            )
    return changes


def check_verifiable(report: ServingReport) -> None:
    """Refuse, before any child starts, a step XLA's check cannot compile within its bounds."""
    if not isinstance(report, ServingReport):
        raise TypeError(f"report must be a dcsim.serving.engine.ServingReport, got {type(report).__name__}")
    serving = report.serving
    if serving.weight_format.quantized:
        raise ValueError(
            f"XLA's decode-step check compiles the weights in a plain dtype (bfloat16, float16, float32); "
            f"{serving.weights} is quantized, and a quantized decoding step is not compiled yet: check the same mesh "
            "in bfloat16"
        )
    if serving.num_stages > 1:
        raise ValueError(
            "XLA's decode-step check compiles one program for the whole mesh, and each pipeline stage runs its own; "
            f"check the mesh without the `stage` axis ({serving.mesh.text} has stage={serving.num_stages:,})"
        )
    if serving.mesh.num_devices > MAX_VERIFY_DEVICES:
        raise ValueError(
            f"XLA's decode-step check runs on at most {MAX_VERIFY_DEVICES:,} virtual CPU devices, got a mesh of "
            f"{serving.mesh.num_devices:,} ({serving.mesh.text})"
        )
    arrays = len(report.weights.arrays) + len(report.cache)
    if arrays > MAX_VERIFY_ARRAYS:
        raise ValueError(
            f"XLA's decode-step check compiles at most {MAX_VERIFY_ARRAYS:,} arrays, and serving this model holds "
            f"{arrays:,} (weights and cache); check a smaller model"
        )
    _rebuilt_hparams(report)


def token_bytes_per_device(report: ServingReport) -> int:
    """The step's token ids a device: an int32 a sequence of a replica, for each token input (an
    encoder-decoder takes a source token too)."""
    inputs = 1 if report.source_length is None else 2
    return inputs * TOKEN_BYTES * report.serving.sequences_per_replica


def verify_request(report: ServingReport) -> dict[str, Any]:
    serving = report.serving
    if report.family is None:
        raise ValueError("XLA's decode-step check compiles a model that decodes; a Dense stack has no decoder")
    specs = {row.path: spec_json(row.spec) for row in report.weights.arrays}
    specs |= {item.array.path: spec_json(item.spec) for item in report.cache}
    return {
        "config": report.config_dict,
        "hparams": _rebuilt_hparams(report),
        "decode": {
            "context": serving.context,
            "kv_dtype": serving.kv_dtype,
            "source_length": serving.source_tokens() if report.source_length is None else report.source_length,
            "full_windows": serving.full_windows,
        },
        "sequences": serving.sequences_per_replica * serving.num_replicas,
        "mesh": mesh_json(serving.layout_mesh),
        "replicas": [name for name in REPLICA_AXES if name in serving.mesh.names],
        "weights": serving.weights,
        "specs": specs,
    }


def verify(report: ServingReport, timeout_seconds: float | None = None) -> StepVerified:
    """Compile one decoding step of ``report``'s model and compare XLA's argument bytes per device
    with dcsim's. Raises ValueError (a bound; no child started) and ``VerifyFailed``."""
    check_verifiable(report)
    if not report.has_cache:
        raise ValueError("XLA's decode-step check compiles a decoding step, and this model has no decoder cache")
    result, seconds = run_check(
        CHILD_MODULE, JOB_NAME, verify_request(report), report.serving.layout_mesh.num_devices, timeout_seconds
    )
    arguments, temp = result.get("argument_bytes"), result.get("temp_bytes")
    if not isinstance(arguments, int) or not isinstance(temp, int):
        raise VerifyFailed(f"the {JOB_NAME} answered {arguments!r} and {temp!r} bytes: it did not compile the step")
    tokens = token_bytes_per_device(report)
    return StepVerified(
        argument_bytes_per_device=arguments,
        expected_bytes_per_device=report.total_bytes_per_device + tokens,
        token_bytes_per_device=tokens,
        temp_bytes_per_device=temp,
        num_arrays=int(result.get("num_arrays", 0)),
        seconds=seconds,
    )


def verify_record(verified: StepVerified) -> dict[str, Any]:
    return {
        "argument_bytes_per_device": verified.argument_bytes_per_device,
        "expected_bytes_per_device": verified.expected_bytes_per_device,
        "token_bytes_per_device": verified.token_bytes_per_device,
        "temp_bytes_per_device": verified.temp_bytes_per_device,
        "temp_is": "the decode workspace of a CPU compile (buffer assignment differs on GPU and TPU)",
        "num_arrays": verified.num_arrays,
        "matches": verified.matches,
        "seconds": round(verified.seconds, 3),
    }

"""The checkpoint measurement's JSON record, on a report written by hand: no child process, so the
quick loop checks every key, its order and its value (``tests/test_checkpoint.py`` checks the same
record on real measurements, in the whole suite)."""

import dataclasses
import json

from conftest import hand_checkpoint_report
from dcsim.checkpoint import records

# Dense(1024) on 1024 in bfloat16: 1,049,600 values, 2 bytes each on disk, 4 in float32.
REPORT = dataclasses.replace(
    hand_checkpoint_report("bfloat16", 1_650_000),
    peak_rss_before_stage=(("init", 12), ("saving", 25)),
    compilation_cache="miss",
)


def test_the_record_holds_the_reports_figures_in_the_documented_order():
    record = records.checkpoint_record(REPORT)
    head = {
        "total_params": 1_049_600,
        "dtype": "bfloat16",
        "strategy": "replicated",
        "mesh": "data=1",
        "num_devices": 1,
        "partition_specs": {"Dense_0/bias": "", "Dense_0/kernel": ""},
        "raw_payload_bytes": 2_099_200,
        "raw_float32_bytes": 4_198_400,
        "device_bytes": 4_198_400,
        "disk_bytes": 1_650_000,
        "num_files": 2,
        "largest_file_bytes": 1_649_700,
        "init_seconds": 0.5,
        "save_seconds": 0.1,
        "restore_seconds": 0.1,
        "restore_verified": True,
        "compilation_cache": "miss",
        "baseline_rss_bytes": 1,
        "peak_rss_bytes": 2,
        "peak_rss_before_stage": {"init": 12, "saving": 25},
    }
    assert list(record.items())[: len(head)] == list(head.items())
    assert list(record)[len(head) :] == ["file_groups", "files", "explanation", "versions", "config"]
    # by kind in FILE_KINDS order: array data, index (none here), metadata, commit marker (none)
    assert record["file_groups"] == [
        {"kind": "array data", "num_files": 1, "num_bytes": 1_649_700},
        {"kind": "metadata", "num_files": 1, "num_bytes": 300},
    ]
    assert record["files"][1] == {"path": "_METADATA", "kind": "metadata", "num_bytes": 300}
    assert record["versions"] == {"jax": "x", "orbax-checkpoint": "y"}
    assert record["config"]["layers"] == [{"features": 1024, "use_bias": True}]
    assert any("bfloat16" in line for line in record["explanation"])
    assert json.loads(json.dumps(record)) == record  # JSON-ready: nothing a dump would change

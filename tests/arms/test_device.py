"""Devices: the choice, what is recorded, and the one code path that runs on every device.

The GPU-specific branches (``arms/device.py``) are small and named; everything else runs
the same on ``device=cpu``, which these tests exercise. The GPU itself is checked by
``bench/gpu_check.sh`` on a machine that has one.
"""

from __future__ import annotations

import pytest
import torch
import yaml
from test_runtime_mapping import BASE, protocol_with

from arms.bases.builtin import tiny_random_base
from arms.device import DeviceUnavailable, attention_for, describe, model_device, place, resolve_device
from arms.runtime import base_choice_readings, build_runtime
from ledger.protocol.loader import parse_protocol
from ledger.reader.shared import Reader
from ledger.rows.tasks import generate_rule_chasing
from ledger.rows.tasks.alphabets import resolve_alphabet


def test_auto_takes_the_cpu_where_there_is_no_gpu_and_a_named_gpu_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu") == resolve_device(None)
    assert resolve_device("cpu") == torch.device("cpu")
    for choice in ("cuda", "cuda:0"):
        with pytest.raises(DeviceUnavailable, match=r"no CUDA GPU.*--device cpu"):
            resolve_device(choice)
    for bad in ("gpu", "cuda:x", "tpu:0", ""):
        if bad:
            with pytest.raises(DeviceUnavailable, match="not one of"):
                resolve_device(bad)


def test_with_gpus_auto_takes_the_first_and_an_index_past_the_last_is_refused(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == torch.device("cuda:0")
    assert resolve_device("cuda") == torch.device("cuda:0")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(DeviceUnavailable, match="has 2 GPU"):
        resolve_device("cuda:2")
    assert attention_for(torch.device("cuda:1")) == "sdpa" and attention_for(torch.device("cpu")) is None


def test_describe_records_device_name_and_dtype() -> None:
    described = describe(torch.device("cpu"), torch.bfloat16)
    assert described["device"] == "cpu" and described["dtype"] == "bfloat16" and described["device_name"]
    assert describe(torch.device("cpu"), "float32")["dtype"] == "float32"


def _runtime(model, tokenizer):
    protocol = protocol_with({"bridge": {"kind": "split"}, "budget": {"kind": "full_block"}})
    reader = Reader(list(resolve_alphabet("N16")), tokenizer=tokenizer)
    return protocol, build_runtime(protocol.arms[0], model, tokenizer, reader), reader


def test_a_placed_model_trains_and_reads_exactly_as_the_unplaced_one_on_the_cpu() -> None:
    """`place` + the runtime's device handling are the path a GPU run takes; on the CPU they change nothing."""
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 2), rows_per_depth=4, seed=3, split="train")
    results = []
    for placed in (False, True):
        model, tokenizer = tiny_random_base(BASE)
        if placed:
            model = place(model, resolve_device("cpu"))
        protocol, runtime, reader = _runtime(model, tokenizer)
        assert runtime.device == model_device(runtime.model) == torch.device("cpu")
        torch.manual_seed(0)
        loss = runtime.train_stage(protocol.arms[0].stages[0], rows, ("seed",))
        readings = runtime.evaluate(rows, protocol.arms[0].evaluation)
        base = base_choice_readings(model, tokenizer, reader, rows[:2])
        results.append((loss, [(r.row_id, r.loop, r.prediction, r.margin) for r in readings], base))
    assert results[0][0] == results[1][0] and results[0][1] == results[1][1]
    assert [(r.prediction, r.margin) for r in results[0][2]] == [(r.prediction, r.margin) for r in results[1][2]]


def test_the_canonical_hash_does_not_depend_on_the_device_chosen() -> None:
    plain = protocol_with({"bridge": {"kind": "split"}, "budget": {"kind": "full_block"}})
    document = plain.model_dump(mode="json", by_alias=True)
    hashes = set()
    for device in ("auto", "cpu", "cuda", "cuda:3"):
        chosen = parse_protocol(yaml.safe_dump({**document, "device": device}))
        assert chosen.device == device
        hashes.add(chosen.sha256)
    assert hashes == {plain.sha256}
    with pytest.raises(Exception, match="device"):
        parse_protocol(yaml.safe_dump({**document, "device": "gpu"}))


def test_a_gpu_run_takes_the_deterministic_settings_and_the_cpu_keeps_its_own(monkeypatch) -> None:
    from arms.device import deterministic_settings

    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    environ: dict[str, str] = {}
    deterministic_settings(torch.device("cpu"), environ)
    assert not torch.are_deterministic_algorithms_enabled() and environ == {} and torch.backends.cudnn.benchmark
    try:
        deterministic_settings(torch.device("cuda", 0), environ)
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert environ == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
        environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"  # a user's own setting is kept
        deterministic_settings(torch.device("cuda", 0), environ)
        assert environ == {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}
    finally:
        torch.use_deterministic_algorithms(False)

"""Nothing inside the loop makes the host wait for the device: the counter, and the forward and training
step held to it (``arms/host_syncs.py``; the bench with the numbers is ``bench/host_syncs.py``)."""

from __future__ import annotations

import pytest
import torch
from test_bf16_training import ARMS, _runtime

from arms.host_syncs import HostSyncs
from arms.train.recurrent import make_recurrent_batch
from ledger.rows.tasks import generate_rule_chasing

pytestmark = pytest.mark.models


def test_the_counter_sees_reads_of_device_tensors_and_not_host_bookkeeping() -> None:
    layer = torch.nn.Linear(3, 2)
    host, bookkeeping = torch.arange(4), torch.arange(4)
    with HostSyncs(layer) as syncs:
        out = layer(torch.ones(1, 3))
        float(out.detach().sum())  # a device value read on the host
        bool((out > 0).any())
        out[out > 0]  # a boolean-mask index: a nonzero underneath
        moved = host.to(out.device)
        moved.tolist()  # moved to the device, then read back
        # host bookkeeping is free (on the CPU a tensor "moved" to the CPU is the same object: it counts as moved)
        int(bookkeeping[2]) + len(bookkeeping.tolist())
        out.sum().backward()
        layer.weight.grad.max().item()  # a gradient is a device tensor
    assert syncs.count == 5, syncs.by_site
    assert all("test_host_syncs.py" in site for site in syncs.by_site)


def _rows():
    rows = generate_rule_chasing(surface="symbolic", depth_range=(1, 4), rows_per_depth=4, seed=3, split="train")
    return rows[::2]  # depths 1, 1, 2, 2, 3, 3, 4, 4


@pytest.mark.parametrize("kind", ["full_block", "adapter"])
def test_the_loop_makes_no_host_sync_whatever_its_length(kind: str) -> None:
    _, runtime = _runtime(ARMS[kind])
    batch = make_recurrent_batch(_rows(), runtime.reader)
    depths = batch.depths.tolist()
    counted = []
    for loops in (2, 8):  # the adapter arm trains nothing at loop 1
        with HostSyncs(runtime.model) as syncs:
            readouts = runtime.model(
                batch.input_ids, batch.attention_mask, loops=loops, depths=[min(d, loops) for d in depths]
            )
            readouts.float().sum().backward()
        counted.append(syncs.by_site)
    assert counted[1] == counted[0], counted  # rows leave at their depth: decided on the host


def test_a_training_step_copies_nothing_to_the_host_but_the_losses_once_in_ten_steps() -> None:
    counts = []
    for steps in (4, 14):
        protocol, runtime = _runtime(ARMS["full_block"])
        stage = protocol.arms[0].stages[0].model_copy(update={"steps": steps})
        with HostSyncs(runtime.model) as syncs:
            runtime.train_stage(stage, _rows(), ("syncs",))
        counts.append(syncs.by_site)
    extra = counts[1] - counts[0]
    assert sum(extra.values()) == 1 and all("arms/train/step.py" in site for site in extra), extra

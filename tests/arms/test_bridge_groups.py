"""Each bridge module says its own optimiser groups, and they are exactly those its kind declares
(``BridgeKind.groups``, the names a protocol's ``group_lrs`` may use), covering every tensor once."""

from __future__ import annotations

import pytest

from ledger.protocol.arms import BRIDGES

pytestmark = pytest.mark.models


@pytest.mark.parametrize("name", [kind.name for kind in BRIDGES])
def test_a_bridge_modules_groups_are_its_kinds(name):
    module = BRIDGES.implementation(name)(16)
    groups = module.param_groups()
    assert tuple(groups) == BRIDGES[name].groups
    assert module.kind == name and module.design == BRIDGES[name].design  # what the run asks it: its kind's
    tensors = [id(p) for group in groups.values() for p in group]
    assert len(tensors) == len(set(tensors)) and set(tensors) == {id(p) for p in module.parameters()}


def test_state_norm_joins_the_rest_group():
    module = BRIDGES.implementation("split")(16, state_norm=True)
    assert {id(p) for p in module.state_norm.parameters()} <= {id(p) for p in module.param_groups()["bridge_rest"]}

"""A plugin (``LEDGER_PLUGINS=gated_bridge_plugin``) registering the gated-residual bridge kind."""

from __future__ import annotations

from gated_bridge_spec import KIND

from ledger.protocol.arms import BRIDGES

BRIDGES.add(KIND)

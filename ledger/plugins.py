"""Kinds from outside this package: a plugin is a module that registers kinds when it is imported.

A researcher's own arm kind, statistic or gate lives in their own package: its spec subclasses the extension
point's base (``ledger.protocol.arms.ArmSpec`` for an arm kind) and its module adds a ``Kind`` to the registry
(``ARM_KINDS.add(ArmKind(...))``), naming its implementation as ``"module:attribute"``. ``ledger`` imports
every plugin before it reads a protocol: the modules named in ``LEDGER_PLUGINS`` (comma-separated), then
every entry point of the group ``ledger.plugins`` that an installed distribution declares, as pytest finds
its plugins. A protocol's arms, the schema and ``ledger check`` then know the new kinds like the built-in ones.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os

ENVIRONMENT_VARIABLE = "LEDGER_PLUGINS"
ENTRY_POINT_GROUP = "ledger.plugins"


class PluginError(Exception):
    """A plugin that could not be imported: one line naming it and why."""


def plugin_modules() -> list[str]:
    """The plugins to import, in order: ``LEDGER_PLUGINS``'s modules, then the installed entry points'."""
    named = [name.strip() for name in os.environ.get(ENVIRONMENT_VARIABLE, "").split(",") if name.strip()]
    declared = [point.value for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    return list(dict.fromkeys([*named, *declared]))


def load_plugins() -> list[str]:
    """Import every plugin once (a module already imported is not imported again); the modules imported."""
    loaded = []
    for name in plugin_modules():
        module = name.partition(":")[0]
        try:
            importlib.import_module(module)
        except Exception as exc:  # any failure of someone else's module is one line, not a traceback
            origin = f"{ENVIRONMENT_VARIABLE} or the entry points of {ENTRY_POINT_GROUP!r}"
            raise PluginError(
                f"plugin {module!r} (from {origin}) failed to import: {type(exc).__name__}: {exc}"
            ) from exc
        loaded.append(module)
    return loaded

"""Plugins from the command line: ``--config.imports=my_pkg.a,my_pkg.b``.

Each named module is imported before the run is built, so that what it registers
(``rl.estimators.register_estimator``, ``envs.registry.register_family``,
``trainers.interfaces.register_interface``) is known by name when the config asks for it
(``--config.rl.estimator=...``, ``--config.env.family=...``, ``--config.policy.interface=...``).
Env worker processes rebuild a registered family from its env class path, so a family's env
class must live in an importable module (the plugin's own, typically).
"""

from __future__ import annotations

import importlib


def module_names(spec: str) -> list[str]:
    """The module names of a comma-separated ``config.imports`` ("" = none)."""
    names = [name.strip() for name in spec.split(",")]
    if any(not name for name in names) and spec.strip():
        raise ValueError(f"config.imports={spec!r} has an empty module name; write "
                         "comma-separated modules, e.g. my_pkg.estimators,my_pkg.envs.")
    return [name for name in names if name]


def import_plugins(spec: str) -> list[str]:
    """Imports every module of ``spec`` (``config.imports``); returns their names.

    Raises:
      ImportError: naming the module that does not import and how to make it importable.
    """
    names = module_names(spec)
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"config.imports: plugin module {name!r} does not import ({e}). "
                              "Install its package, or put the folder holding it on "
                              "PYTHONPATH.") from e
    return names

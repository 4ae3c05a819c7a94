"""An access-tracking view of an ml_collections config, for the config-honesty tests.

`track(c)` returns a proxy that behaves like `c` for reading (attributes, items, `get`, `in`,
iteration, `dict(...)`) and records the dotted path of every leaf read. `set_fields(c)` lists
the leaves a config file sets: those whose value differs from `configs.common.base_config()`,
and those the base has not. A config is honest when every field it sets is read on its path.
"""
from __future__ import annotations

import importlib
from typing import Any

import ml_collections

from configs import common


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, (dict, ml_collections.ConfigDict)) and len(v):
            out.update(_flatten(v, path + "."))
        else:
            out[path] = v
    return out


def set_fields(c: ml_collections.ConfigDict) -> set[str]:
    """Leaves of `c` that differ from (or are absent in) the base config."""
    base = _flatten(common.base_config().to_dict())
    mine = _flatten(c.to_dict())
    return {k for k, v in mine.items() if k not in base or base[k] != v}


class Tracked:
    """A read-recording proxy of a ConfigDict (writes go through to it)."""

    def __init__(self, cd: ml_collections.ConfigDict, prefix: str = "",
                 reads: set[str] | None = None):
        object.__setattr__(self, "_cd", cd)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "reads", set() if reads is None else reads)

    def _wrap(self, name: str, value: Any) -> Any:
        path = f"{self._prefix}{name}"
        if isinstance(value, ml_collections.ConfigDict) and len(value):
            return Tracked(value, path + ".", self.reads)
        self.reads.add(path)
        return value

    def __getattr__(self, name: str) -> Any:
        return self._wrap(name, getattr(self._cd, name))

    def __getitem__(self, name: str) -> Any:
        return self._wrap(name, self._cd[name])

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._cd else default

    def __contains__(self, name: str) -> bool:
        return name in self._cd

    def keys(self):
        return self._cd.keys()

    def __iter__(self):
        return iter(self._cd.keys())

    def __len__(self) -> int:
        return len(self._cd)

    def items(self):
        return [(k, self[k]) for k in self._cd.keys()]

    def values(self):
        return [self[k] for k in self._cd.keys()]

    def to_dict(self) -> dict[str, Any]:
        for path in _flatten(self._cd.to_dict(), self._prefix):
            self.reads.add(path)
        return self._cd.to_dict()

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._cd, name, value)

    def unlock(self):
        self._cd.unlock()
        return self

    def lock(self):
        self._cd.lock()
        return self


def track(c: ml_collections.ConfigDict) -> Tracked:
    return Tracked(c)


def unread(c: ml_collections.ConfigDict, tracked: Tracked) -> list[str]:
    """The fields `c` sets that nothing read through `tracked` (sorted)."""
    return sorted(f for f in set_fields(c)
                  if not any(f == r or f.startswith(r + ".") for r in tracked.reads))


def smoke_config(name: str, games_dir: str, args: str = ""):
    """configs/<name>.py's smoke variant (with ``args``, more of its switches: "a=1,b=2")."""
    arg = ",".join(filter(None, ["smoke=True", args]))
    c = importlib.import_module(f"configs.{name}").get_config(arg)
    c.unlock()
    c.games.cache_dir = games_dir   # the test run's game cache (not a set field: base has it)
    c.lock()
    return c


def assert_honest(name: str, tracked, args: str = "") -> None:
    """Every field configs/<name>.py's smoke variant (with ``args``) sets was read through
    ``tracked``."""
    c = smoke_config(name, "unused", args)
    missed = [f for f in unread(c, tracked) if f != "games.cache_dir"]
    assert not missed, f"configs/{name}.py sets fields its run never reads: {missed}"

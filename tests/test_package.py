"""The package installs, imports, and keeps its import directions."""
import ast
import pathlib

import meowjax

ROOT = pathlib.Path(meowjax.__file__).parent


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_version():
    assert meowjax.__version__.count(".") == 2


def test_envs_never_import_jax():
    files = list((ROOT / "envs").rglob("*.py"))
    assert files
    for path in files:
        bad = {n for n in _imports(path) if n.split(".")[0] in ("jax", "flax", "optax", "chex")}
        assert not bad, f"{path} imports {bad}: meowjax/envs is host-only"


def test_import_directions():
    """rl and models depend on nothing of ours; envs only on itself; no cycles upward: agents
    play (models, rollout, envs, the runtime's placement and checkpoints), evaluation plays
    agents and never imports a trainer."""
    low = {"rl", "models", "envs", "rollout", "sharding", "runtime"}
    allowed = {
        "rl": {"rl"},
        "models": {"models"},
        "envs": {"envs"},
        "sharding": {"sharding", "models"},
        "rollout": {"rollout", "models", "envs", "sharding"},
        "agents": {"agents"} | low,
        "eval": {"eval", "agents"} | low,
    }
    for pkg, ok in allowed.items():
        for path in (ROOT / pkg).rglob("*.py"):
            ours = {n.split(".")[1] for n in _imports(path) if n.startswith("meowjax.")}
            assert ours <= ok, f"{path} imports meowjax.{ours - ok}; allowed: {ok}"

"""An open registry of advantage estimators, and one entry point that dispatches on the name.

An estimator is `fn(inputs, hp) -> (advantages_BL, returns_BL)`: `inputs` an `EstimatorInputs`
(every field always an array), `hp` a mapping of the shared return parameters `gamma`, `lam`
plus the estimator's own config section (`rl.<name>`, defaults in `EstimatorSpec.defaults`).
Validation is derived from the registry: `validate_estimator(name)` accepts exactly the keys of
`ESTIMATORS`, `estimator_hparams` exactly the fields of the estimator's section.

Adding one from any module (no edit here):

    register_estimator(EstimatorSpec(name="mine", fn=my_fn, needs=("group_ids_B",),
                                     defaults={"temperature": 1.0}, description="..."))

Under `jit` the hyper-parameters are static (they pick the program: `use_std` is a Python branch)
and `estimator_hparams` returns a hashable `HParams`, so:

    hp = estimator_hparams(name, gamma=c.rl.gamma, lam=c.rl.lam, section=c.rl.get(name))
    fn = jax.jit(compute_advantages, static_argnames=("name", "hp"))
    adv_BL, ret_BL = fn(name, inputs, hp)          # one compile per (name, hp, shapes)
"""
import dataclasses
from typing import Any, Callable, Final, Iterator, Mapping, NamedTuple

import chex
import jax.numpy as jnp
import numpy as np

from meowjax.rl import advantages, gigpo

SHARED_HPARAMS: Final[tuple[str, ...]] = ("gamma", "lam")
LEVELS: Final[tuple[str, ...]] = ("token", "turn", "episode")


class EstimatorInputs(NamedTuple):
    """Everything an estimator may read (a pytree of arrays: one pytree shape, one compile).

    Every field is always an array; fields an estimator does not read (`EstimatorSpec.needs`)
    are zeros (`make_inputs`). `state_key_BL` (int32): at each turn's last agent token
    (`turn_end == 1`) the hash of the observation that turn acted in; ignored elsewhere.
    `bootstrap_B`: the value after a row's last agent token (0 where the episode ended, the
    critic's estimate where a turn budget cut it); read by the critic estimators, optional
    (None = zeros) so that a tuple built without it keeps working. `baseline_B`: a given
    baseline return per row (ReMax: the return of its task's greedy episode, played by the
    trainer when an estimator needs it); optional in the same way. `won_B`: 1 where the row's
    episode won the game (its outcome, whatever the reward), 0 elsewhere; optional too.
    `extra`: inputs beyond these fields, by name, for estimators that name them in `needs`
    (`EXTRA_SUFFIXES`: `<name>_B`, one value per row, or `<name>_BL`, one per unit); the trainer
    computes each from the iteration's episodes with the provider registered under its name
    (`meowjax.trainers.estimator_inputs`), so a new input needs no edit here or in the loop."""

    rewards_BL: chex.Array
    mask_BL: chex.Array
    row_weight_B: chex.Array
    values_BL: chex.Array
    turn_end_BL: chex.Array
    group_ids_B: chex.Array
    state_key_BL: chex.Array
    bootstrap_B: chex.Array | None = None
    baseline_B: chex.Array | None = None
    won_B: chex.Array | None = None
    extra: Mapping[str, chex.Array] | None = None


# The named fields; `extra` holds the rest. An extra input's name ends in one of
# `EXTRA_SUFFIXES`, which says its shape.
CORE_FIELDS: Final[tuple[str, ...]] = tuple(f for f in EstimatorInputs._fields if f != "extra")
EXTRA_SUFFIXES: Final[tuple[str, ...]] = ("_B", "_BL")


def extra_needs(needs: tuple[str, ...]) -> tuple[str, ...]:
    """The names in `needs` that are not fields of `EstimatorInputs` (read from `extra`)."""
    return tuple(n for n in needs if n not in CORE_FIELDS)


_INT_FIELDS: Final[frozenset[str]] = frozenset({"group_ids_B", "state_key_BL"})


def make_inputs(
    rewards_BL: chex.Array, mask_BL: chex.Array, row_weight_B: chex.Array, *,
    extra: Mapping[str, chex.Array] | None = None, **fields: chex.Array
) -> EstimatorInputs:
    """`EstimatorInputs` with zeros (host numpy; int32 for ids and keys, float32 otherwise) for
    the fields not given; `extra` (by name) is checked against its name's shape: `_B` -> [B],
    `_BL` -> [B, L]."""
    batch, length = np.shape(mask_BL)
    for name, x in (extra or {}).items():
        want = (batch,) if name.endswith("_B") else (batch, length)
        if not name.endswith(EXTRA_SUFFIXES) or np.shape(x) != want:
            raise ValueError(f"extra estimator input {name!r} has shape {np.shape(x)}; an input "
                             f"named <name>_B holds one value per row {(batch,)}, <name>_BL "
                             f"one per unit {(batch, length)}.")
    for f in CORE_FIELDS[3:]:
        if fields.get(f) is None:
            shape = (batch,) if f.endswith("_B") else (batch, length)
            fields[f] = np.zeros(shape, np.int32 if f in _INT_FIELDS else np.float32)
    return EstimatorInputs(rewards_BL, mask_BL, row_weight_B, **fields,
                           extra=dict(extra) if extra else None)


class HParams(Mapping[str, Any]):
    """An immutable, hashable mapping: a valid static argument of `jax.jit`."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any):
        self._items = {**(items or {}), **kwargs}

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._items.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._items == dict(other)

    def __repr__(self) -> str:
        return f"HParams({self._items!r})"


EstimatorFn = Callable[[EstimatorInputs, Mapping[str, Any]], tuple[chex.Array, chex.Array]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EstimatorSpec:
    """An advantage estimator.

    Attributes:
      name: registry key, and the name of its config section `rl.<name>`.
      fn: `fn(inputs, hp) -> (advantages_BL, returns_BL)`; `hp` holds `gamma`, `lam` and the
        fields of `defaults` (see `estimator_hparams`).
      needs_critic: whether it reads `values_BL` (the trainer then trains a value head).
      needs: the `EstimatorInputs` fields it reads beyond rewards, mask and row weights, and
        the names of the extra inputs it reads from `inputs.extra` (`<name>_B` / `<name>_BL`;
        each computed by the provider registered under that name in
        `meowjax.trainers.estimator_inputs`).
      level: "token" (per-token advantages), "turn" (one per turn, broadcast to its tokens) or
        "episode" (one per row, broadcast).
      description: one line for help texts.
      defaults: its own config section with default values (hashable values).
    """

    name: str
    fn: EstimatorFn
    needs_critic: bool = False
    needs: tuple[str, ...] = ()
    level: str = "episode"
    description: str = ""
    defaults: Mapping[str, Any] = HParams()

    def __post_init__(self):
        object.__setattr__(self, "needs", tuple(self.needs))
        object.__setattr__(self, "defaults", HParams(self.defaults))
        unknown = sorted(n for n in extra_needs(self.needs) if not n.endswith(EXTRA_SUFFIXES))
        if unknown:
            raise ValueError(f"Estimator {self.name!r} needs unknown inputs {unknown}; "
                             f"EstimatorInputs has {list(CORE_FIELDS)}, and an extra input's "
                             "name ends in _B (one value per row) or _BL (one per unit).")
        if self.needs_critic != ("values_BL" in self.needs):
            raise ValueError(f"Estimator {self.name!r}: needs_critic must equal whether "
                             "'values_BL' is in needs.")
        if self.level not in LEVELS:
            raise ValueError(f"Estimator {self.name!r}: level {self.level!r} not in {LEVELS}.")
        shared = sorted(set(self.defaults) & set(SHARED_HPARAMS))
        if shared:
            raise ValueError(f"Estimator {self.name!r}: {shared} are shared (rl.gamma, rl.lam), "
                             "not fields of its own section.")


ESTIMATORS: Final[dict[str, EstimatorSpec]] = {}


def register_estimator(spec: EstimatorSpec, *, replace: bool = False) -> EstimatorSpec:
    """Adds `spec` to `ESTIMATORS` (ValueError if the name is taken, unless `replace`)."""
    if spec.name in ESTIMATORS and not replace:
        raise ValueError(f"An advantage estimator named {spec.name!r} is already registered; "
                         "pass replace=True to override it.")
    ESTIMATORS[spec.name] = spec
    return spec


def validate_estimator(name: str) -> EstimatorSpec:
    """The spec registered under `name`; ValueError listing the valid names otherwise."""
    if name not in ESTIMATORS:
        raise ValueError(
            f"Unknown advantage estimator {name!r}; choose one of {sorted(ESTIMATORS)}."
        )
    return ESTIMATORS[name]


def estimator_hparams(
    name: str, *, gamma: float, lam: float, section: Mapping[str, Any] | None = None
) -> HParams:
    """`hp` for estimator `name`: its defaults updated by `section` (its config section `rl.<name>`,
    e.g. a `ConfigDict`), plus `gamma` and `lam`. ValueError naming any unknown section field."""
    spec = validate_estimator(name)
    given = dict(section.items()) if section is not None else {}
    unknown = sorted(set(given) - set(spec.defaults))
    if unknown:
        fields = ", ".join(repr(k) for k in unknown)
        raise ValueError(f"rl.{name} has no field {fields}; known: {sorted(spec.defaults)}.")
    return HParams({**spec.defaults, **given, "gamma": float(gamma), "lam": float(lam)})


def compute_advantages(
    name: str, inputs: EstimatorInputs, hp: Mapping[str, Any]
) -> tuple[chex.Array, chex.Array]:
    """Run the estimator `name` on a batch: `(advantages_BL, returns_BL)`, 0 at masked tokens and
    on padded rows (`row_weight = 0`).

    `hp` (from `estimator_hparams`) must hold exactly `gamma`, `lam` and the estimator's section
    fields; jit with `hp` static (module docstring). A needed input that is None fails with a
    ValueError naming the field.
    """
    spec = validate_estimator(name)
    needed = ("rewards_BL", "mask_BL", "row_weight_B", *spec.needs)
    extra = inputs.extra or {}
    missing = [f for f in needed if (f not in extra if f not in CORE_FIELDS
                                     else getattr(inputs, f) is None)]
    if missing:
        raise ValueError(f"Estimator {name!r} needs {missing} in EstimatorInputs; pass arrays "
                         f"(needs: {list(spec.needs)}; zeros elsewhere, see make_inputs; extra "
                         "inputs go in `extra`).")
    expected = {*SHARED_HPARAMS, *spec.defaults}
    if set(hp) != expected:
        raise ValueError(f"hp for estimator {name!r} has keys {sorted(hp)}, expected "
                         f"{sorted(expected)}; build it with estimator_hparams.")
    adv_BL, returns_BL = spec.fn(inputs, hp)
    valid = (inputs.mask_BL > 0) & (inputs.row_weight_B > 0)[:, None]
    return jnp.where(valid, adv_BL, 0), jnp.where(valid, returns_BL, 0)


# ---------------------------------------------------------------- built-in estimators


def _gae(x: EstimatorInputs, hp: Mapping[str, Any]):
    return advantages.token_gae(
        x.rewards_BL, x.values_BL, x.mask_BL, gamma=hp["gamma"], lam=hp["lam"],
        bootstrap_B=x.bootstrap_B,
    )


def _turn_gae(x: EstimatorInputs, hp: Mapping[str, Any]):
    return advantages.turn_gae(
        x.rewards_BL, x.values_BL, x.mask_BL, x.turn_end_BL, gamma=hp["gamma"], lam=hp["lam"],
        bootstrap_B=x.bootstrap_B,
    )


def _episode(x: EstimatorInputs, hp: Mapping[str, Any], adv_fn):
    """`G_b = sum_k gamma^k r_k` over turns (`discounted_episode_returns`; the plain sum for
    gamma = 1), `adv_fn(G_B) -> A_B`, both broadcast to agent tokens."""
    returns_B = advantages.discounted_episode_returns(
        x.rewards_BL, x.mask_BL, x.turn_end_BL, gamma=hp["gamma"]
    )
    adv_B = adv_fn(returns_B)
    return (
        advantages.broadcast_episode_advantage(adv_B, x.mask_BL),
        advantages.broadcast_episode_advantage(returns_B, x.mask_BL),
    )


def _grpo(x: EstimatorInputs, hp: Mapping[str, Any]):
    return _episode(x, hp, lambda r_B: advantages.grpo_advantages(
        r_B, x.group_ids_B, x.row_weight_B, use_std=hp["use_std"]))


def _rloo(x: EstimatorInputs, hp: Mapping[str, Any]):
    return _episode(x, hp, lambda r_B: advantages.rloo_advantages(
        r_B, x.group_ids_B, x.row_weight_B))


def _remax(x: EstimatorInputs, hp: Mapping[str, Any]):
    return _episode(x, hp, lambda r_B: advantages.baseline_advantages(
        r_B, x.baseline_B, x.row_weight_B))


def _rft(x: EstimatorInputs, hp: Mapping[str, Any]):
    return _episode(x, hp, lambda r_B: advantages.best_win_advantages(
        r_B, x.won_B, x.group_ids_B, x.row_weight_B, best_only=hp["best_only"]))


def _gigpo(x: EstimatorInputs, hp: Mapping[str, Any]):
    return gigpo.gigpo_advantages(
        x.rewards_BL, x.mask_BL, x.turn_end_BL, x.state_key_BL, x.group_ids_B, x.row_weight_B,
        gamma=hp["gamma"], step_weight=hp["step_weight"], use_std=hp["use_std"],
        episode_discount=hp["episode_discount"],
    )


for _spec in (
    EstimatorSpec(name="gae", fn=_gae, needs_critic=True, needs=("values_BL",), level="token",
                  description="token-level GAE with a critic (PPO)"),
    EstimatorSpec(name="turn_gae", fn=_turn_gae, needs_critic=True,
                  needs=("values_BL", "turn_end_BL"), level="turn",
                  description="turn-level GAE: one value per agent turn, broadcast to its tokens"),
    EstimatorSpec(name="grpo", fn=_grpo, needs=("group_ids_B", "turn_end_BL"), level="episode",
                  description="group-normalised episode returns (use_std=False: Dr. GRPO)",
                  defaults={"use_std": True}),
    EstimatorSpec(name="rloo", fn=_rloo, needs=("group_ids_B", "turn_end_BL"), level="episode",
                  description="leave-one-out group baseline on episode returns"),
    EstimatorSpec(name="remax", fn=_remax, needs=("turn_end_BL", "baseline_B"),
                  level="episode",
                  description="ReMax: episode return minus the return of the task's greedy "
                              "episode (the trainer plays one per task)"),
    EstimatorSpec(name="rft", fn=_rft, needs=("group_ids_B", "turn_end_BL", "won_B"),
                  level="episode", defaults={"best_only": True},
                  description="rejection-sampling fine-tuning: advantage 1 for each group's "
                              "best winning episode (every win with best_only=False), else 0"),
    EstimatorSpec(name="gigpo", fn=_gigpo, needs=("group_ids_B", "turn_end_BL", "state_key_BL"),
                  level="turn",
                  defaults={"step_weight": 1.0, "use_std": True, "episode_discount": False},
                  description="GiGPO: GRPO episode advantage on the total reward + step groups "
                              "of turns acting in the same observation, on discounted "
                              "return-to-go (episode_discount: the episode level discounts "
                              "too)"),
):
    register_estimator(_spec)
del _spec

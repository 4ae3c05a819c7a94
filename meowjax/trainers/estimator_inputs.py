"""Estimator inputs beyond the built-in ones: what a registered estimator reads from an RL
iteration's episodes, computed by a provider registered under the input's name.

An estimator names an extra input in its ``needs`` (``rl.estimators.EstimatorSpec``): ``<name>_B``
holds one value per episode row, ``<name>_BL`` one per unit (turn or token) of the ``[E, X]``
matrices. A provider registered under the same name computes it from the iteration's
``EpisodeBatch``; the RL iteration calls the providers its estimator needs and passes their
arrays in ``EstimatorInputs.extra``. A new input is one function and one call, from a plugin
module too (``--config.imports``), with no edit to the loop:

    def turns(batch):                                    # [E]: turns each episode played
        return np.asarray([e.num_turns for e in batch.episodes], np.float32)

    register_estimator_input("turns_B", turns)

``check_provided`` fails at set-up, before any work, on a needed input nobody provides.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Final, NamedTuple, Sequence

import numpy as np

from meowjax.rl import estimators


class UnitMatrices(NamedTuple):
    """The built-in ``[E, X]`` matrices an interface lays out from an iteration's episodes
    (``AgentTrainer.matrices``; X = turns or tokens): the reward at each unit (at turn ends),
    which units the loss covers, which end a turn, and each unit's state key (GiGPO's
    anchor states; int32)."""

    rewards_EX: np.ndarray
    mask_EX: np.ndarray
    turn_end_EX: np.ndarray
    state_key_EX: np.ndarray


@dataclasses.dataclass(frozen=True)
class EpisodeBatch:
    """What a provider reads: the iteration's ``episodes`` (``rollout.trajectory.Trajectory``,
    in the row order of the ``[E, X]`` matrices), its update ``rows``, the built-in matrices
    (``rewards_EX`` before the turn cost, ``mask_EX``, ``turn_end_EX``), the greedy episodes
    of the iteration's tasks where the run plays them, the run's ``config``, and ``layout``
    (per-update-row values -> ``[E, X]``, the interface's own)."""

    episodes: Sequence[Any]
    rows: Sequence[dict[str, np.ndarray]]
    rewards_EX: np.ndarray
    mask_EX: np.ndarray
    turn_end_EX: np.ndarray
    greedy: Sequence[Any]
    config: Any
    layout: Callable[[Sequence[Any]], np.ndarray]


Provider = Callable[[EpisodeBatch], np.ndarray]
PROVIDERS: Final[dict[str, Provider]] = {}


def register_estimator_input(name: str, fn: Provider, *, replace: bool = False) -> Provider:
    """Registers ``fn`` as the provider of extra estimator input ``name`` (``<name>_B`` or
    ``<name>_BL``). ValueError if the name is a built-in field, has no shape suffix, or is taken
    (unless ``replace``)."""
    if name in estimators.CORE_FIELDS:
        raise ValueError(f"{name!r} is a built-in field of EstimatorInputs; the trainer fills it "
                         "itself: register an extra input under another name.")
    if not name.endswith(estimators.EXTRA_SUFFIXES):
        raise ValueError(f"estimator input {name!r}: end its name in _B (one value per row) or "
                         "_BL (one per unit).")
    if name in PROVIDERS and not replace:
        raise ValueError(f"An estimator input named {name!r} is already registered; pass "
                         "replace=True to override it.")
    PROVIDERS[name] = fn
    return fn


def check_provided(spec: estimators.EstimatorSpec) -> None:
    """ValueError naming each extra input ``spec`` needs that no provider computes."""
    missing = [n for n in estimators.extra_needs(spec.needs) if n not in PROVIDERS]
    if missing:
        raise ValueError(f"rl.estimator={spec.name!r} needs the estimator inputs {missing}, and "
                         "nothing provides them: register a provider for each with "
                         "meowjax.trainers.estimator_inputs.register_estimator_input(name, fn), "
                         "in a module named by --config.imports.")


def provide(spec: estimators.EstimatorSpec, batch: EpisodeBatch) -> dict[str, np.ndarray]:
    """The extra inputs ``spec`` needs, each from its provider (float32 host arrays; shapes are
    checked by ``estimators.make_inputs``)."""
    check_provided(spec)
    return {n: np.asarray(PROVIDERS[n](batch), np.float32)
            for n in estimators.extra_needs(spec.needs)}

"""An agent: a model, its tokenizer and an action interface, and how it plays episodes.

    agent = agent_class(c.policy.interface)(c, workdir)     # meowjax.agents.registry
    params, meta = agent.restore_params()                   # the workdir's latest policy
    trajs = agent.play_tasks(params, pool, tasks, samples=1, budget=12, greedy=True, seed=0)

An agent builds nothing a training run needs (no game sets, optimizers or update steps): an
evaluation uses one on its own; a trainer (``meowjax.trainers.loop``) builds one and trains its
params. What differs between interfaces is a subclass's ``setup_model`` (tokenizer, model
config, initial params) and ``play`` (one batch of episodes -> ``rollout.trajectory.Trajectory``
records); the evaluation player (``Player.play_tasks``) is shared.

Randomness of the evaluation player: host ``default_rng([seed, EVAL_RNG])`` (greedy) or
``default_rng([seed, EVAL_RNG, 1 + stream])`` (sampled), device ``fold_in(key(seed),
10_000_000 + stream)`` folded with each chunk's start, so an agent evaluated here and by its
trainer at the same seed plays the same episodes.
"""

from __future__ import annotations

import abc
import os
from typing import Any, Callable, Sequence

import jax
import ml_collections
import numpy as np

from meowjax.rollout import score_episodes, trajectory
from meowjax.rollout import tokenizer as tok_lib
from meowjax.runtime import checkpoint, console, multihost, placement
from meowjax.runtime.rng import EVAL_RNG
from meowjax.sharding import make_mesh


class Player:
    """The evaluation player over a ``play`` hook: an agent's, and its trainer's (whose
    ``play`` is its agent's, a seam tests wrap). Reads ``c``, ``batch_rows``, ``rollout_mesh``
    and ``play``."""

    @property
    def eval_temperature(self) -> float:
        """Sampled evaluation episodes (Pass@(K,T)) run at ``policy.eval_temperature``, or at
        the training temperature when it is unset."""
        t = self.c.policy.eval_temperature
        return self.c.policy.temperature if t is None else t

    def play_tasks(self, params, pool, tasks: Sequence[Any], *, samples: int, budget: int,
                   greedy: bool, seed: int, stream: int = 0,
                   desc: str = "eval") -> list[trajectory.Trajectory]:
        """``samples`` episodes per task at turn budget ``budget``, in chunks of at most one
        rollout batch; greedy, or sampled at ``eval_temperature`` (randomness: the module
        doc). ``stream`` separates several sampled evaluations of one seed (the per-budget
        Pass@(K,T) mode plays one per budget). ``desc`` names its progress bar."""
        rng = (np.random.default_rng([seed, EVAL_RNG]) if greedy
               else np.random.default_rng([seed, EVAL_RNG, 1 + stream]))
        key = jax.random.fold_in(jax.random.key(seed), 10_000_000 + stream)
        trajs = []
        per_chunk = max(1, self.batch_rows // samples)
        with console.Progress(desc, len(tasks) * samples, "episode") as bar:
            for start in range(0, len(tasks), per_chunk):
                chunk = list(tasks[start:start + per_chunk])
                trajs += self.play_share(params, pool, chunk, group_size=samples,
                                         budgets=[budget] * (len(chunk) * samples), rng=rng,
                                         greedy=greedy, key=jax.random.fold_in(key, start),
                                         temperature=self.eval_temperature)
                bar.update(len(chunk) * samples)
        return trajs

    def play_share(self, params, pool, tasks: Sequence[Any], *, group_size: int,
                   budgets: Sequence[int], rng: np.random.Generator, greedy: bool,
                   key: jax.Array, temperature: float) -> list[trajectory.Trajectory]:
        """``play`` of all ``tasks``, this process playing its contiguous block of them
        (``multihost.share``; whole groups), then every process's episodes gathered in task
        order: with one process, or several, the same list on every process.

        ``rng`` gives one number per call, whatever the block: the seed of every episode's own
        stream, so the draws of an episode do not depend on which process plays it."""
        start, stop = multihost.share(len(tasks))
        local_rng = np.random.default_rng(int(rng.integers(2**63)))
        local = []
        if stop > start:
            local = self.play(multihost.local_view(params, self.rollout_mesh), pool,
                              list(tasks[start:stop]), group_size=group_size,
                              budgets=list(budgets[start * group_size:stop * group_size]),
                              rng=local_rng, greedy=greedy, key=key, temperature=temperature,
                              offset=start)
        return multihost.allgather_objects(local)


class Agent(Player, abc.ABC):
    """Model, tokenizer and interface of config ``c``, placed on a mesh over every process's
    devices (each process plays on ``rollout_mesh``, its own devices)."""

    interface: str = ""
    needs_admissible: bool = False   # the env lists admissible commands (scoring interface)
    pad_values: dict[str, Any] = {}  # packing pads of the interface's own batch fields

    def __init__(self, c: ml_collections.ConfigDict, workdir: str, *, mesh=None,
                 expert_text: Callable[[], list[dict[str, Any]]] | None = None):
        """``expert_text()`` gives trajectories to train a game-text tokenizer on when none
        is saved under ``workdir/tokenizer`` yet (a trainer passes its demonstrations);
        without it such a model needs its run's saved tokenizer."""
        self.c, self.workdir = c, workdir
        self.check_config()
        self.mesh = mesh if mesh is not None else make_mesh(c.mesh.axes, jax.devices(),
                                                            field="config.mesh.axes")
        self.rollout_mesh = multihost.process_submesh(self.mesh)
        self._expert_text = expert_text
        self.setup_model()
        self.place = placement.Placement(self.mesh, self.cfg)
        self.rollout_place = placement.Placement(self.rollout_mesh, self.cfg)
        self.setup_play()

    # ----- what an interface supplies --------------------------------------------------------
    def check_config(self) -> None:
        """Fails, before any work, on config fields this interface cannot honour."""

    @abc.abstractmethod
    def setup_model(self) -> None:
        """Sets ``tok``, ``cfg`` and the initial params factory ``init_params(key)``."""

    def setup_play(self) -> None:
        """Builds whatever jitted function ``play`` uses (after the placements exist)."""

    @abc.abstractmethod
    def play(self, params, pool, tasks, *, group_size: int, budgets: Sequence[int],
             rng: np.random.Generator, greedy: bool, key: jax.Array, temperature: float,
             offset: int = 0) -> list[trajectory.Trajectory]:
        """Episodes of ``tasks`` on this process's devices (``rollout_mesh``). ``tasks`` are
        items ``offset ...`` of the caller's list: group ids and each episode's sampling
        randomness follow the position in that list, not the process."""

    def set_state_budget(self, on: bool) -> None:
        """Whether prompts state the turn budget from now on (``policy.state_budget``)."""
        if on:
            raise ValueError(f"the {self.interface!r} interface cannot state the turn budget in "
                             "its prompts (policy.state_budget is for interface 'score').")

    def set_forced_action(self, forced) -> None:
        """Every episode plays a given command at a given turn (the forced-action probe)."""
        if forced is not None:
            raise ValueError(f"the {self.interface!r} interface cannot force an action (the "
                             "forced-action probe is for interface 'score').")

    # ----- shared --------------------------------------------------------------------------
    @property
    def batch_rows(self) -> int:
        """Episodes in one rollout batch (``rollout.tasks_per_iter x rollout.group_size``)."""
        return self.c.rollout.tasks_per_iter * self.c.rollout.group_size

    @property
    def min_rows(self) -> int:
        """Smallest rollout row bucket: a multiple of the batch shards (>= 4), so every bucket
        divides over the mesh."""
        shards = placement.batch_shards(self.mesh)
        return shards * -(-4 // shards)

    def game_tokenizer(self):
        """The game-text BPE tokenizer of ``workdir/tokenizer`` (trained there first from
        ``expert_text()`` when it is missing and the agent has them)."""
        folder = os.path.join(self.workdir, "tokenizer")
        if os.path.exists(os.path.join(folder, "tokenizer.json")):
            return tok_lib.load_tokenizer(folder)
        if self._expert_text is None:
            raise FileNotFoundError(f"{folder} is missing: a game-text model is evaluated with "
                                    "the tokenizer its run trained (train first: "
                                    "experiments/train.py, or pass --hf_path/--smollm2).")
        texts = []
        for ex in self._expert_text():
            texts.append(ex["objective"])
            texts.extend(ex["observations"])
            texts.extend(cmd for cmds in ex["admissible"] for cmd in cmds)
        texts.append("current state: your action: You are an agent playing a text adventure game.")
        if self.c.policy.history:
            texts.append(score_episodes.history_line(()))
        return tok_lib.train_bpe_tokenizer(texts, self.c.model.vocab_size, folder)

    def restore_params(self, *, ref: bool = False) -> tuple[Any, dict[str, Any]]:
        """(policy params on the mesh, meta) of the newest checkpoint under the workdir that
        loads: only the policy is read (``ref``: the reference policy RL started from), so the
        run's optimizer and critic need not be known."""
        ckpt = checkpoint.Checkpointer(self.workdir, writer=False)
        try:
            if ckpt.latest_step() is None:
                raise FileNotFoundError(f"No checkpoint under {ckpt.directory}; train first "
                                        "(experiments/train.py) or evaluate an imported model.")
            abstract = jax.eval_shape(self.init_params, jax.random.key(0))
            target = placement.with_shardings(abstract, self.place.param_shardings(abstract))
            tree = {"ref": target} if ref else {"state": {"params": target}}
            restored, meta = ckpt.restore_newest(lambda meta: tree, set_aside=False,
                                                 partial=True)
        finally:
            ckpt.close()
        return (restored["ref"] if ref else restored["state"]["params"]), meta

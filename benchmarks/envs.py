"""Environment throughput: EnvPool with 1, 2, 4 workers vs one env stepped in-process, and games/s.

    python -m benchmarks.envs [--slots=16] [--rounds=3] [--gen_games=4]

Stepping: the same ``--slots`` episodes (w2-o3-q4 games, each replaying its walkthrough plus a
few invalid commands) are played ``--rounds`` times (resets included). The reference steps the
slots' envs one after another in this process (``EnvPool(num_workers=0)``: same envs, same
calls, no processes); each pool steps its workers' slots concurrently. Worker
start-up and the first reset are excluded (warm-up round). Printed: steps/s and the ratio to the
reference measured in the same run. Generation: games/s making fresh games with 1 (in-process)
and 2 worker processes (process start-up, ~4 s of importing textworld, included: a user pays it).
"""

import os
import tempfile
import time

from absl import app, flags

from meowjax.envs.pool import EnvPool
from meowjax.envs.registry import EnvSpec
from meowjax.envs.textworld_env import TextWorldEnv
from meowjax.envs.textworld_games import GameSetSpec, generate_games

_SLOTS = flags.DEFINE_integer("slots", 16, "Parallel episodes per round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Timed rounds (after one warm-up round).")
_GEN = flags.DEFINE_integer("gen_games", 6, "Games to generate per generation measurement.")
_WORKERS = flags.DEFINE_list("workers", ["1", "2", "4"], "Pool sizes to measure.")
_OUT = flags.DEFINE_string("out", os.path.join(tempfile.gettempdir(), "meowjax_bench_games"),
                           "Game cache for the stepping benchmark.")

JUNK = ["dance wildly", "take the moon"]  # invalid commands: exercise the feedback path too


def _plans(tasks, walkthroughs):
    return [JUNK + list(w) for w in walkthroughs]


def _pool_round(pool, tasks, plans) -> int:
    pool.reset(tasks, [50] * len(tasks))
    steps = 0
    for t in range(max(len(p) for p in plans)):
        results = pool.step([p[t] if t < len(p) else None for p in plans])
        steps += sum(r is not None for r in results)
    return steps


def bench_pool(workers: int, tasks, plans, rounds: int) -> float:
    """steps/s of a pool (workers=0: the reference, one env per slot stepped in this process)."""
    with EnvPool(EnvSpec("textworld", {"reward_mode": "dense"}), num_workers=workers) as pool:
        _pool_round(pool, tasks, plans)  # warm-up: process start-up, game loading
        steps, start = 0, time.perf_counter()
        for _ in range(rounds):
            steps += _pool_round(pool, tasks, plans)
        return steps / (time.perf_counter() - start)


def bench_generation(workers: int, num: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        spec = GameSetSpec(kind="custom", split="valid", num_games=num, seed_offset=500)
        start = time.perf_counter()
        generate_games(spec, out, workers=workers)
        return num / (time.perf_counter() - start)


def main(argv):
    del argv
    base = generate_games(GameSetSpec(kind="custom", split="valid", num_games=4), _OUT.value,
                          workers=2)
    tasks = [base[i % len(base)] for i in range(_SLOTS.value)]
    env = TextWorldEnv()
    plans = _plans(tasks, [env.reset(t, 50).walkthrough for t in tasks])
    env.close()
    print(f"cpu cores: {os.cpu_count()}; {len(tasks)} slots x {_ROUNDS.value} rounds, "
          f"{sum(map(len, plans))} steps per round")
    ref = bench_pool(0, tasks, plans, _ROUNDS.value)
    print(f"in-process (workers=0)   : {ref:8.1f} steps/s   (reference 1.00x)")
    for workers in map(int, _WORKERS.value):
        rate = bench_pool(workers, tasks, plans, _ROUNDS.value)
        print(f"EnvPool, {workers} worker(s)     : {rate:8.1f} steps/s   ({rate / ref:.2f}x)")
    gen1 = bench_generation(1, _GEN.value)
    print(f"generation, in-process   : {gen1:8.2f} games/s  (reference 1.00x)")
    gen2 = bench_generation(2, _GEN.value)
    print(f"generation, 2 workers    : {gen2:8.2f} games/s  ({gen2 / gen1:.2f}x)")


if __name__ == "__main__":
    app.run(main)

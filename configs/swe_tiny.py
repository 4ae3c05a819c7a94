"""Code repair (SWE-style) end to end: a tiny from-scratch agent on the easiest tier (tier 1).

Free-text tool calls (`cat`, `replace`, `test`, `submit`; syntax in the system prompt), the
Practitioner's Guide verified ratio reward (fraction of FAIL_TO_PASS + PASS_TO_PASS tests passing
at submit), SFT on expert trajectories (read -> reference edit -> test -> submit), then PPO.
Held-out tasks are the test split of tier 1; the harder split is tier 2.

    python -m experiments.train --config=configs/swe_tiny.py --workdir=runs/swe_tiny
"""

from configs import common


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False)
    c = common.base_config()
    c.name = "swe_tiny"
    # Model-written code runs isolated; "best_effort" only where namespaces are unavailable and
    # the code is trusted (see docs/sandbox.md).
    c.env.update(dict(family="swe", reward_mode="ratio", num_workers=2, sandbox="namespaces"))
    c.games.update(dict(cache_dir="data/swe", level=1, num_train=32, num_sft=32, num_eval=16,
                        num_eval_hard=8))
    c.model.update(dict(preset="small", vocab_size=2048))
    c.model.overrides.update(dict(hidden_size=128, intermediate_size=384, num_layers=3,
                                  num_heads=4, num_kv_heads=2, head_dim=32))
    c.policy.update(dict(interface="generate", temperature=1.0, max_action_tokens=96))
    c.rollout.update(dict(length_buckets=(1024, 2048, 3072, 4096), tasks_per_iter=4,
                          group_size=2))
    c.turns.update(dict(max_turns=6, eval_max_turns=6))
    c.budget.update(dict(total_episodes=480, sft_share=0.5))   # 24 demos, 240 RL episodes
    c.sft.update(dict(epochs=4, batch_rows=4, lr=1e-3))
    c.rl.update(dict(estimator="gae", epochs=1, minibatch_rows=4))
    c.eval.update(dict(every_iters=0, num_samples=2, pass_ks=(1, 2), pass_ts=(4, 6)))
    if arg.smoke:
        c.games.update(dict(num_train=4, num_sft=2, num_eval=2, num_eval_hard=1))
        c.budget.update(dict(total_episodes=32, sft_share=0.5))   # 2 demos, 2 RL iterations
        c.model.update(dict(preset="tiny", vocab_size=600))
        c.model.overrides = {}
        c.sft.update(dict(epochs=1, batch_rows=2))
        c.rl.update(dict(minibatch_rows=8))
    c.lock()
    return c

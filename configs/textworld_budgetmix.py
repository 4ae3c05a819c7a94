"""Turn-budget study, arm 2: BudgetMix (each training episode's budget drawn from a mix).

Same games, model, RL budget and evaluation grid as configs/textworld_fixed_budget.py; only the
training budgets differ. ``mix`` lists the budgets separated by ``/``.

    python -m experiments.train --config=configs/textworld_budgetmix.py --workdir=runs/mix
    python -m experiments.train --config=configs/textworld_budgetmix.py:mix=4/8/16 --workdir=x
"""

from configs import common
from configs import textworld_fixed_budget as fixed


def parse_mix(text: str) -> tuple[int, ...]:
    """``"4/8/12"`` -> (4, 8, 12); every budget a positive integer."""
    try:
        mix = tuple(int(x) for x in text.split("/") if x)
    except ValueError:
        mix = ()
    if not mix or min(mix) < 1:
        raise ValueError(f"mix={text!r}: give positive turn budgets separated by '/', e.g. 4/8/12.")
    return mix


def get_config(arg=None):
    arg = common.parse_arg(arg, smoke=False, seed=0, mix="4/6/8/12/16")
    c = fixed.get_config(f"smoke={arg.smoke},seed={arg.seed}")
    c.unlock()
    c.name = "textworld_budgetmix"
    mix = parse_mix(arg.mix)
    if arg.smoke:
        mix = tuple(sorted({min(b, 6) for b in mix} | {2, 4}))[:4]
    c.turns.budget_mix = mix
    c.turns.max_turns = max(mix)
    c.lock()
    return c

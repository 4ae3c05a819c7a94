"""Packed admissible-command scoring equals scoring each candidate alone; bucketing; tokenizer."""
import itertools

import jax
import jax.numpy as jnp

import numpy as np
import pytest

from meowjax.models import lm
from meowjax.models.config import get_preset
from meowjax.rollout import buckets, scoring, tokenizer


@pytest.fixture(scope="module")
def tiny():
    cfg = get_preset("tiny")
    return cfg, lm.init_params(cfg, jax.random.key(0))


def _alone(params, cfg, prompt, cand):
    toks = jnp.asarray([prompt + cand])
    m = jnp.ones_like(toks)
    logits = lm.forward(params, cfg, toks, lm.positions_from_mask(m), m)
    return float(lm.token_logprobs(logits[:, :-1], toks[:, 1:])[0, len(prompt) - 1:].sum())


def test_packed_scores_equal_separate_forwards(tiny):
    cfg, params = tiny
    rng = np.random.default_rng(0)
    turns = []
    for p_len, c_lens in ((7, (1, 3, 2)), (12, (4, 1))):
        prompt = [int(x) for x in rng.integers(3, 500, p_len)]
        cands = [[int(x) for x in rng.integers(3, 500, n)] for n in c_lens]
        turns.append((prompt, cands))
    rows = [scoring.pack_turn(p, cs, max_cands=4) for p, cs in turns]
    batch = buckets.pack_rows(rows, length_buckets=[16, 32], num_rows=3, pad_values={"cand": 4})
    assert batch["tokens"].shape == (3, 32)
    s = np.asarray(scoring.candidate_scores(params, cfg, {k: jnp.asarray(v) for k, v in batch.items()}, 4))
    for b, (prompt, cands) in enumerate(turns):
        for c, cand in enumerate(cands):
            np.testing.assert_allclose(s[b, c], _alone(params, cfg, prompt, cand), rtol=1e-5, atol=1e-5)
        assert np.all(s[b, len(cands):] == scoring.ABSENT)
    logp = scoring.candidate_logp(jnp.asarray(s[:2]), 0.5)
    np.testing.assert_allclose(np.exp(logp).sum(-1), 1.0, rtol=1e-6)
    ent = np.asarray(scoring.candidate_entropy(logp))
    grad = jax.grad(lambda x: scoring.candidate_entropy(scoring.candidate_logp(x)).sum())(jnp.asarray(s))
    assert np.all(np.isfinite(np.asarray(grad)))            # padded candidates leak no NaN
    p = np.exp(np.asarray(logp))
    ref = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), -1)
    np.testing.assert_allclose(ent, ref, rtol=1e-4, atol=1e-6)


def test_packed_mask_blocks_other_candidates():
    row = scoring.pack_turn([5, 6, 7], [[8, 9], [10]], max_cands=2)
    m = np.asarray(scoring.packed_attention_mask(jnp.asarray(row["seg"])[None],
                                                 jnp.ones((1, 6), jnp.int32)))[0]
    # rows: prompt 0..2, cand0 3..4, cand1 5
    assert m[4].tolist() == [1, 1, 1, 1, 1, 0]
    assert m[5].tolist() == [1, 1, 1, 0, 0, 1]
    assert m[2].tolist() == [1, 1, 1, 0, 0, 0]
    assert row["src"].tolist() == [0, 0, 0, 2, 3, 2]
    assert row["positions"].tolist() == [0, 1, 2, 3, 4, 3]


def test_pack_turn_errors():
    with pytest.raises(ValueError, match="max_cands"):
        scoring.pack_turn([1], [[2]] * 3, max_cands=2)
    with pytest.raises(ValueError, match="at least one candidate"):
        scoring.pack_turn([1], [], max_cands=2)


def test_buckets_never_truncate_and_weight_padding():
    rows = [{"tokens": np.arange(5, dtype=np.int32), "x": np.float32(1.0)},
            {"tokens": np.arange(3, dtype=np.int32), "x": np.float32(2.0)}]
    b = buckets.pack_rows(rows, length_buckets=[4, 8], num_rows=4)
    assert b["tokens"].shape == (4, 8)
    assert b["mask"].sum(1).tolist() == [5, 3, 0, 0]
    assert b["row_weight"].tolist() == [1, 1, 0, 0]
    assert b["x"].tolist() == [1, 2, 0, 0]
    assert buckets.padding_efficiency(b) == pytest.approx(8 / 32)
    with pytest.raises(ValueError, match="raise rollout.length_buckets"):
        buckets.pack_rows(rows, length_buckets=[4], num_rows=4)


def test_bpe_tokenizer_roundtrip_and_chat_template(tmp_path):
    tok = tokenizer.train_bpe_tokenizer(["take the red apple from the table"] * 20, 300, str(tmp_path))
    for text in ("take red apple", "héllo  wörld\n\n x", "unseen zebra 123!"):
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    again = tokenizer.load_tokenizer(str(tmp_path))
    assert again.encode("take red apple") == tok.encode("take red apple")
    assert again.eos_token == "<|im_end|>" and again.pad_token == "<pad>"
    with pytest.raises(ValueError, match="vocab_size"):
        tokenizer.train_bpe_tokenizer(["x"], 100)


def test_prompt_lm_logp_equals_plain_forward(tiny):
    """The auxiliary LM term: next-token log-probs of prompt tokens in a packed row equal a plain
    causal forward over the prompt alone (candidates must not leak into the prompt's context)."""
    cfg, params = tiny
    rng = np.random.default_rng(1)
    prompt = [int(x) for x in rng.integers(3, 500, 9)]
    cands = [[int(x) for x in rng.integers(3, 500, n)] for n in (2, 3)]
    batch = buckets.pack_rows([scoring.pack_turn(prompt, cands, max_cands=2)], length_buckets=[16],
                              num_rows=2, pad_values={"cand": 2})
    jb = {k: jnp.asarray(v) for k, v in batch.items()}
    _, next_BL = scoring.packed_token_logp(params, cfg, jb)
    mask_BL = np.asarray(scoring.prompt_lm_mask(jb))
    assert mask_BL[0].tolist() == [0] + [1] * 8 + [0] * 7 and mask_BL[1].sum() == 0
    toks = jnp.asarray([prompt])
    m = jnp.ones_like(toks)
    logits = np.asarray(lm.forward(params, cfg, toks, lm.positions_from_mask(m), m))[0]
    ref = [logits[t - 1, prompt[t]] - np.log(np.exp(logits[t - 1]).sum()) for t in range(1, 9)]
    np.testing.assert_allclose(np.asarray(next_BL)[0, 1:9], ref, rtol=1e-5, atol=1e-5)


def test_row_bucket_and_length_grouped_minibatches():
    assert [buckets.row_bucket(n, 32) for n in (1, 4, 5, 9, 17, 32)] == [4, 4, 8, 16, 32, 32]
    assert buckets.row_bucket(2, 2, min_rows=4) == 2
    with pytest.raises(ValueError, match="do not fit"):
        buckets.row_bucket(33, 32)
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 500, 100)
    chunks = buckets.length_grouped_minibatches(lengths, 16, np.random.default_rng(1))
    assert sorted(np.concatenate(chunks).tolist()) == list(range(100))
    assert [len(c) for c in chunks].count(16) == 6
    # Each chunk spans a contiguous range of the sorted lengths: padding to its own max wastes
    # far less than random chunks padded to theirs.
    srt = np.sort(lengths)
    for c in chunks:
        lo, hi = lengths[c].min(), lengths[c].max()
        assert np.sum((srt > lo) & (srt < hi)) <= len(c) - 2 + np.sum(srt == lo) + np.sum(srt == hi)
    waste = lambda cs: sum(len(c) * lengths[c].max() - lengths[c].sum() for c in cs)
    random_chunks = [np.arange(100)[i:i + 16] for i in range(0, 100, 16)]
    assert waste(chunks) < 0.2 * waste(random_chunks)
    # Without an rng: deterministic, sorted order; the partial chunk holds the shortest rows.
    det = buckets.length_grouped_minibatches([3, 1, 2], 2)
    assert [c.tolist() for c in det] == [[1], [2, 0]]


def _min_slots_brute_force(lengths, size, bucket_list):
    """Smallest padded slots over every cut of the sorted rows into ceil(n/size) chunks."""
    ends = sorted(buckets.choose_bucket(int(x), bucket_list) for x in lengths)
    n, m = len(ends), -(-len(ends) // size)
    best = None
    for inner in itertools.combinations(range(1, n), m - 1):
        cuts = [0, *inner, n]
        if all(1 <= b - a <= size for a, b in zip(cuts[:-1], cuts[1:])):
            slots = sum(size * ends[b - 1] for b in cuts[1:])
            best = slots if best is None else min(best, slots)
    return best


def test_row_multiple_pads_only_to_the_next_step():
    assert [buckets.row_multiple(n, 32, 8) for n in (1, 8, 9, 24, 25, 32)] == [8, 8, 16, 24, 32, 32]
    assert buckets.row_multiple(5, 6, 4) == 6  # capped at max_rows
    with pytest.raises(ValueError, match="do not fit"):
        buckets.row_multiple(33, 32, 8)


def test_length_grouped_minibatches_pad_the_fewest_slots():
    # Against every cut of the sorted rows into ceil(n / size) chunks of <= size rows.
    bucket_list = (256, 320, 384, 448, 512, 768)
    rng = np.random.default_rng(3)
    for _ in range(150):
        n, size = int(rng.integers(1, 13)), int(rng.integers(1, 6))
        lengths = rng.integers(200, 769, n)
        chunks = buckets.length_grouped_minibatches(lengths, size, rng)
        assert sorted(np.concatenate(chunks).tolist()) == list(range(n))
        assert len(chunks) == -(-n // size) and all(1 <= len(c) <= size for c in chunks)
        slots = sum(size * buckets.choose_bucket(int(lengths[c].max()), bucket_list)
                    for c in chunks)
        assert slots == _min_slots_brute_force(lengths, size, bucket_list)
    # 3 rows <= 256 and 4 longer rows, chunks of 4: the partial chunk at the long end (the cut
    # before 47d4ef0) pads 4 x (320 + 320) slots; at the short end, 4 x (256 + 320).
    lengths = [250] * 3 + [300] * 4
    best = buckets.length_grouped_minibatches(lengths, 4)
    cost = lambda cs: sum(4 * buckets.choose_bucket(max(lengths[i] for i in c), bucket_list)
                          for c in cs)
    assert cost(best) == 4 * 576 < cost([np.arange(4), np.arange(4, 7)]) == 4 * 640


def test_prompt_builder_window_and_history(tmp_path):
    from meowjax.rollout import score_episodes
    tok = tokenizer.train_bpe_tokenizer(["open box take key go north"] * 20, 300, str(tmp_path))
    obs, acts = ["Room: A", "Room: A box open", "Room: B"], ["open box", "go north"]
    plain = score_episodes.PromptBuilder(tok, window=1, max_cands=4)
    msgs = plain.messages("win", obs, acts)
    # system, then the last completed turn (obs_1, a_2), then the current observation.
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert "Room: A box open" in msgs[1]["content"] and msgs[2]["content"] == "go north"
    assert "Actions so far" not in msgs[-1]["content"]
    hist = score_episodes.PromptBuilder(tok, window=0, max_cands=4, history=True)
    msgs = hist.messages("win", obs, acts)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "Actions so far: open box; go north\nRoom: B" in msgs[-1]["content"]
    first = hist.messages("win", obs[:1], [])
    assert "Actions so far: none\nRoom: A" in first[-1]["content"]
    # The rendered prompt is exactly the chat template of those messages.
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert hist.prompt_ids("win", obs, acts) == tok.encode(text, add_special_tokens=False)


def test_prompt_builder_states_the_turns_left_only_when_asked(tmp_path):
    from meowjax.rollout import score_episodes
    tok = tokenizer.train_bpe_tokenizer(["open box take key go north"] * 20, 300, str(tmp_path))
    obs, acts = ["Room: A", "Room: A box open", "Room: B"], ["open box", "go north"]
    stated = score_episodes.PromptBuilder(tok, window=0, max_cands=4, history=True,
                                          state_budget=True)
    last = stated.messages("win", obs, acts, budget=8)[-1]["content"]
    assert "Turns left: 6 of 8\nActions so far: open box; go north\nRoom: B" in last
    assert "Turns left: 8 of 8" in stated.messages("win", obs[:1], [], budget=8)[-1]["content"]
    plain = score_episodes.PromptBuilder(tok, window=0, max_cands=4, history=True)
    assert "Turns left" not in plain.messages("win", obs, acts, budget=8)[-1]["content"]
    with pytest.raises(ValueError, match="needs the episode's turn budget"):
        stated.messages("win", obs, acts)


def test_forced_action_replaces_the_policys_choice_at_its_turn_only(tmp_path):
    """score_episodes.collect(forced=(t, command)): turn t of every episode plays the command
    (where admissible), the other turns the policy's greedy choice; its log-prob is recorded."""
    from types import SimpleNamespace

    from meowjax.envs.base import ResetResult, StepResult
    from meowjax.rollout import score_episodes
    tok = tokenizer.train_bpe_tokenizer(["go north look inventory take coin"] * 20, 300,
                                        str(tmp_path))
    cmds = ["go north", "inventory", "look"]

    class Pool:   # every game: 3 turns, the same admissible commands, never won
        def reset(self, tasks, budgets):
            self.turn = [0] * len(tasks)
            return [ResetResult("Room", "win", 1.0, admissible=list(cmds)) for _ in tasks]

        def step(self, actions):
            out = []
            for i, a in enumerate(actions):
                if a is None:
                    out.append(None)
                    continue
                self.turn[i] += 1
                out.append(StepResult("Room", 0.0, self.turn[i] >= 3, False,
                                      {"admissible": list(cmds)}))
            return out

    def score(batch):   # the policy prefers command 0 ("go north") by far
        logp = np.full(batch["cand"].shape[:1] + (4,), -10.0, np.float32)
        logp[:, 0] = -0.01
        return logp

    builder = score_episodes.PromptBuilder(tok, window=0, max_cands=4, history=True)
    tasks = [SimpleNamespace(task_id=f"t{i}") for i in range(2)]
    kw = dict(group_size=1, max_turns=[3, 3], batch_rows=4, length_buckets=(256, 512),
              rng=np.random.default_rng(0), greedy=True)
    plain = score_episodes.collect(score, Pool(), builder, tasks, **kw)
    forced = score_episodes.collect(score, Pool(), builder, tasks, forced=(1, "inventory"), **kw)
    assert [[t.action for t in e.turns] for e in plain] == [["go north"] * 3] * 2
    assert [[t.action for t in e.turns] for e in forced] == [["go north", "inventory",
                                                              "go north"]] * 2
    assert forced[0].turns[1].chosen == 1 and forced[0].turns[1].logp == pytest.approx(-10.0)
    # A command that is not admissible forces nothing.
    none = score_episodes.collect(score, Pool(), builder, tasks, forced=(1, "dance"), **kw)
    assert [[t.action for t in e.turns] for e in none] == [["go north"] * 3] * 2

"""The benchmark scripts run on their tiniest settings and report real numbers (never timings)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import aot, padding, profile_ops, rollout, score_step, timing, train_step
from meowjax.models import config as config_lib


@pytest.mark.slow
def test_train_step_tiny_matches_torch_loss_and_writes_table(tmp_path, capsys):
    results_md = tmp_path / "RESULTS.md"
    (res,) = train_step.main(["--presets=tiny", "--batch=2", "--length=16", "--repeats=1",
                              "--peak_n=128", f"--results={results_md}",
                              "--no-keep_host_memory"])  # this pytest process's allocator stays
    # Same weights, same batch: the first-batch PPO loss of both sides agrees to fp32 rounding.
    np.testing.assert_allclose(res.ours_loss, res.torch_loss, rtol=1e-4, atol=1e-6)
    assert res.params == config_lib.num_params(config_lib.get_preset("tiny"))
    assert res.ours_tok_s > 0 and res.torch_tok_s > 0
    # The peak is the faster of both libraries' products, and MFU is judged against it.
    assert res.peak.jnp_flops > 0 and res.peak.torch_flops > 0
    assert res.peak.flops == max(res.peak.jnp_flops, res.peak.torch_flops)
    assert res.mfu(res.ours_tok_s) == pytest.approx(6 * res.params * res.ours_tok_s
                                                    / res.peak.flops)
    out = capsys.readouterr().out
    assert "ratio" in out and f"jnp {res.peak.jnp_flops / 1e9:.1f} and torch" in out
    table = results_md.read_text()
    assert f"faster of jnp {res.peak.jnp_flops / 1e9:.1f} and torch " \
        f"{res.peak.torch_flops / 1e9:.1f}" in table
    assert "| preset | params | B x L |" in table and "| tiny | 0.1M | 2 x 16 | float32 |" in table
    assert "### Training step (`benchmarks/train_step.py`)\n" in table  # defaults: no settings
    train_step.main(["--presets=tiny", "--batch=2", "--length=16", "--repeats=1", "--no_torch",
                     "--peak_n=128", f"--results={results_md}", "--no-keep_host_memory",
                     "--scan_unroll=2", "--note=probe"])
    section = results_md.read_text().split("### Training step")[-1]
    assert "and torch not measured" in section  # --no_torch: the peak is jnp's alone
    heading = section.splitlines()[0]
    assert heading == " (`benchmarks/train_step.py`) (--scan_unroll=2) probe", heading


@pytest.mark.parametrize("what", sorted(score_step.COMPARES))
def test_score_step_variants_compute_the_same_loss(tmp_path, what):
    results_md = tmp_path / "RESULTS.md"
    (res,) = score_step.main(["--rows=4", "--lengths=256", "--repeats=1",
                              f"--results={results_md}", f"--compare={what}", "--control"])
    # Same params, same packed batch: the unrolled scan / the checkpointed block is the same
    # function.
    np.testing.assert_allclose(res["loss"]["variant"], res["loss"]["reference"], rtol=1e-5)
    assert res["layers"] == 3 and min(res["seconds"].values()) > 0
    # --control: the reference compiled a second time, the same program, timed in the rounds.
    assert set(res["seconds"]) == {"reference", "variant", "control"}
    assert res["loss"]["control"] == res["loss"]["reference"]
    assert res["control_ratio"] == res["seconds"]["reference"] / res["seconds"]["control"]
    text = results_md.read_text()
    assert "| 4 x 256 | 3 |" in text and f"--compare={what}" in text
    assert f"{res['control_ratio']:.2f}x. A speedup no farther" in text
    assert {"unroll": "scan_unroll=3", "saved_activations": "saved_activations=projections",
            "attention_blocks": "attention_blocks=4"}[what] in text


@pytest.mark.parametrize("what", ["saved_activations", "norm", "attention_blocks"])
def test_train_step_compare_same_loss(tmp_path, what):
    results_md = tmp_path / "RESULTS.md"
    flag = train_step.COMPARE_FLAGS[what]
    (res,) = train_step.main([flag, "--presets=tiny", "--batch=2",
                              "--length=64", "--repeats=1", f"--results={results_md}"])
    assert res.what == what and min(res.seconds.values()) > 0
    np.testing.assert_allclose(res.loss["current"], res.loss["reference"], rtol=1e-6)
    if what == "saved_activations":  # projections-only blocks keep less than "everything"
        assert res.temp_bytes["current"] < res.temp_bytes["reference"], res.temp_bytes
    assert f"`benchmarks/train_step.py {flag}`" in results_md.read_text()


def test_train_step_compare_control_times_the_reference_twice(tmp_path):
    results_md = tmp_path / "RESULTS.md"
    (res,) = train_step.main(["--compare_norm", "--control", "--presets=tiny", "--batch=2",
                              "--length=64", "--repeats=2", f"--results={results_md}"])
    assert set(res.seconds) == {"reference", "current", "control"}
    assert min(res.seconds.values()) > 0 and set(res.faults) == set(res.seconds)
    assert res.control_ratio == res.seconds["reference"] / res.seconds["control"]
    text = results_md.read_text()
    assert f"{res.seconds['control']:.3f} s, {res.control_ratio:.2f}x" in text
    assert "A/A control (`--control`" in text
    (plain,) = train_step.main(["--compare_norm", "--presets=tiny", "--batch=2", "--length=64",
                                "--repeats=1", "--results="])
    assert plain.control_ratio is None and set(plain.seconds) == {"reference", "current"}


def test_make_batch_fields_match_the_pg_step_contract():
    cfg = config_lib.get_preset("tiny")
    b = train_step.make_batch(cfg, 3, 5)
    assert set(b) == {"tokens", "mask", "loss_mask", "old_logp", "adv", "ret", "old_value",
                      "ref_logp", "row_weight"}
    assert all(v.shape == (3, 5) for k, v in b.items() if k != "row_weight")
    assert b["row_weight"].shape == (3,)
    assert b["tokens"].min() >= 0 and b["tokens"].max() < cfg.vocab_size
    assert not b["loss_mask"][:, 0].any()


@pytest.mark.slow
def test_aot_tiny_sharded_compiles_and_memory_is_consistent(tmp_path, capsys):
    results_md = tmp_path / "RESULTS.md"
    common = ["--batch=4", "--length=16", "--new_tokens=8", f"--results={results_md}"]
    sharded = aot.main(["--targets=update:tiny,prefill:tiny,decode:tiny",
                        "--mesh=fsdp=2,tensor=2"] + common)
    assert all("error" not in r for r in sharded), sharded
    update = sharded[0]
    # The whole fp32 train state is params + Adam mu + nu = 12 bytes per parameter; on
    # fsdp=2 x tensor=2 the big tables are split, so one device holds well under that ...
    n = config_lib.num_params(config_lib.get_preset("tiny"))
    assert update["argument_bytes"] < 0.75 * 12 * n
    # ... but at least a quarter of it (no parameter is split more than 4 ways).
    assert update["argument_bytes"] >= 12 * n / 4
    # The donated state is aliased to the new state.
    assert update["alias_bytes"] >= 0.9 * update["argument_bytes"] - 4 * 4 * 16 * 9
    assert all(r["per_device_bytes"] > 0 for r in sharded)
    out = capsys.readouterr().out
    assert out.count("GiB/device") == 3 and "fits 16GB:yes" in out
    assert "| update | tiny |" in results_md.read_text()


def test_aot_rejects_unknown_target_and_mesh():
    with pytest.raises(ValueError, match="update\\|prefill\\|decode"):
        aot.main(["--targets=backward:tiny", "--results="])
    with pytest.raises(ValueError, match="fsdp and tensor"):
        aot.main(["--targets=update:tiny", "--mesh=pipeline=2", "--results="])
    with pytest.raises(ValueError, match="known plans are \\['cpu', 'tpu'\\]"):
        aot.main(["--plan=gpu", "--results="])


def test_aot_tpu_plan_covers_the_topology_and_the_table_names_the_compiler():
    plan = aot.PLANS["tpu"]
    assert {t.preset for t in plan} == {"qwen2.5-1.5b", "qwen2.5-7b"}
    chips = lambda t: int(np.prod([int(d) for d in t.topology.split(":")[1].split("x")]))
    assert all(t.topology and t.devices == chips(t) for t in plan)
    assert {t.topology for t in plan} == {"v5p:4x4x4", "v5e:2x4"}
    cpu = dict(fn="update", preset="tiny", fsdp=2, tensor=1, batch=4, length=16,
               new_tokens=8, dtype="float32", remat=False, params=10, compile_s=1.0,
               argument_bytes=1, output_bytes=1, alias_bytes=0, temp_bytes=1, code_bytes=0,
               per_device_bytes=3)
    tpu = dict(cpu, topology="v5p:2x2x1", fsdp=4)
    table = aot.markdown_table([cpu, tpu])
    assert "| 2 x 1 | CPU |" in table and "| 4 x 1 | TPU v5p:2x2x1 |" in table
    assert "simulated CPU devices" in table and "libtpu topology descriptions (v5p:2x2x1" in table


@pytest.mark.slow
def test_aot_on_a_tpu_topology_compiles_with_libtpu_or_says_what_is_missing(tmp_path):
    """With the libtpu wheel the TPU compiler builds a sharded tiny update for a 4-chip v5p
    slice; without it the target fails with an error naming the wheel (CI has no libtpu)."""
    import importlib.util

    out = aot.main(["--targets=update:tiny", "--mesh=fsdp=4", "--topology=v5p:2x2x1",
                    "--batch=4", "--length=16", f"--results={tmp_path / 'R.md'}"])
    assert len(out) == 1
    if importlib.util.find_spec("libtpu") is None:
        assert "libtpu" in out[0]["error"] and "pip install" in out[0]["error"], out
    else:
        assert "error" not in out[0], out
        n = config_lib.num_params(config_lib.get_preset("tiny"))
        assert 12 * n / 4 <= out[0]["argument_bytes"] < 0.75 * 12 * n
    assert "| TPU v5p:2x2x1 |" in (tmp_path / "R.md").read_text()


def test_rollout_summary_from_metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    recs = [{"step": 1, "sft/loss": 1.0},
            {"step": 2, "time/rollout_s": 10.0, "time/update_s": 30.0,
             "perf/padding_efficiency": 0.5, "perf/turns_per_s": 1.0},
            {"step": 3, "time/rollout_s": 2.0, "time/update_s": 1.0,
             "perf/padding_efficiency": 0.9, "perf/turns_per_s": 4.0},
            {"step": 4, "time/rollout_s": 4.0, "time/update_s": 3.0,
             "perf/padding_efficiency": 1.0, "perf/turns_per_s": 2.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    s = rollout.summarize(rollout.read_metrics(str(path)))
    assert s["iterations"] == 3
    assert s["rollout_s"] == pytest.approx(16.0) and s["update_s"] == pytest.approx(34.0)
    assert s["rollout_share"] == pytest.approx(16 / 50)
    assert s["steady_rollout_s"] == pytest.approx(3.0) and s["steady_update_s"] == pytest.approx(2.0)
    assert s["padding_efficiency"] == pytest.approx(0.8)
    assert s["turns_per_s"] == pytest.approx(3.0)
    out = rollout.main([f"--metrics={path}", f"--results={tmp_path / 'R.md'}"])
    assert "padding efficiency 80.0%" in out and "rollout share 32.0%" in out


def test_padding_breakdown_splits_row_and_length_padding():
    # B=4, L=10: 3 real rows holding 6 + 5 + 4 tokens; B=2, L=5: 2 real rows, 5 + 5 tokens.
    p = rollout.padding_breakdown([(4, 10, 3, 15), (2, 5, 2, 10)])
    assert p["batches"] == 2
    assert p["efficiency"] == pytest.approx(25 / 50)
    assert p["row_padding"] == pytest.approx(10 / 50)
    assert p["length_padding"] == pytest.approx(15 / 50)


def test_padding_whatif_splits_iterations_and_counts_slots(tmp_path):
    # Two iterations of 4 episodes, minibatches of 4 rows, buckets (10, 20):
    #   iteration 1: 6 rows (1.5 turns per episode) -> 2 recorded batches;
    #   iteration 2: 4 rows (1.0) -> 1 batch.
    lengths = [[5, 6, 12, 15], [18, 9], [7, 8, 9, 10]]
    (tmp_path / "update_row_lengths.json").write_text(json.dumps(lengths))
    recs = [{"step": 1, "sft/loss": 1.0}, {"step": 2, "rollout/episode_turns": 1.5},
            {"step": 3, "rollout/episode_turns": 1.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    its = padding.iterations(str(tmp_path), 4, 4)
    assert its == [[5, 6, 12, 15, 18, 9], [7, 8, 9, 10]]
    # before: [5 6 9 12 | 15 18] -> 4 x 20 + 4 x 20 slots; current: [5 6 | 9 12 15 18] ->
    # 4 x 10 + 4 x 20; iteration 2: 4 x 10 either way. Real tokens 65 + 34 = 99.
    before = padding.evaluate(its, 4, (10, 20), "before")
    current = padding.evaluate(its, 4, (10, 20), "current")
    assert (before["slots"], current["slots"]) == (200, 160)
    assert before["efficiency"] == pytest.approx(99 / 200)
    assert current["efficiency"] == pytest.approx(99 / 160)
    assert current["row_padding"] == pytest.approx(2 * 10 / 160)
    assert before["shapes"] == current["shapes"] == 2
    out = padding.main([f"--workdir={tmp_path}", "--minibatch_rows=4", "--episodes_per_iter=4",
                        "--buckets=10,20", f"--results={tmp_path / 'R.md'}"])
    assert "| current | 10,20 | 61.9% |" in out
    (tmp_path / "update_row_lengths.json").write_text(json.dumps(lengths[:2]))
    with pytest.raises(ValueError, match="same run"):
        padding.iterations(str(tmp_path), 4, 4)


def test_rollout_rejects_missing_or_rl_free_metrics(tmp_path):
    with pytest.raises(FileNotFoundError, match="--metrics"):
        rollout.read_metrics(str(tmp_path / "nope.jsonl"))
    with pytest.raises(ValueError, match="RL iteration"):
        rollout.summarize([{"step": 1, "sft/loss": 1.0}])


def test_compile_counter_counts_one_compile_per_function_and_shape():
    @jax.jit
    def bench_counted_fn(x):
        return x * 2 + 1

    inputs = [jnp.ones((n,)) for n in (3, 3, 5, 3, 5)]
    with rollout.CompileCounter() as counter:
        for x in inputs:
            bench_counted_fn(x).block_until_ready()
    assert counter.by_fn["bench_counted_fn"] == 2
    assert len(counter.signatures["bench_counted_fn"]) == 2
    assert counter.repeats() == {}


def test_timers_accumulate_calls():
    timers = rollout.Timers()
    f = timers.wrap("f", lambda x: x + 1)
    assert [f(1), f(2)] == [2, 3]
    assert timers.calls["f"] == 2 and timers.seconds["f"] >= 0


def test_profile_ops_sums_trace_events_per_op_and_kind():
    events = [{"ph": "X", "name": "ynn_fusion", "dur": 3000},
              {"ph": "X", "name": "ynn_fusion.2", "dur": 1000},
              {"ph": "X", "name": "copy.7", "dur": 2000},
              {"ph": "X", "name": "ThunkExecutor::Execute", "dur": 9000},  # runtime, not an op
              {"ph": "i", "name": "copy.7", "dur": 5000}]                   # not a complete event
    by_name, by_kind = profile_ops.op_times(events, calls=2)
    assert by_name == pytest.approx({"ynn_fusion": 0.0015, "ynn_fusion.2": 0.0005,
                                     "copy.7": 0.001})
    assert by_kind == pytest.approx({"ynn_fusion": 0.002, "copy": 0.001})


@pytest.mark.slow
def test_profile_ops_traces_a_tiny_update(capsys):
    out = profile_ops.main(["--what=update", "--preset=tiny", "--batch=2", "--length=16",
                            "--calls=1", "--no-keep_host_memory"])
    assert out["wall_s"] > 0 and sum(out["by_kind"].values()) > 0
    # the update's matmuls are XLA ops of the trace (dots or YNN fusions, by the XLA build)
    assert any("dot" in k or "ynn" in k or "fusion" in k for k in out["by_kind"]), out["by_kind"]
    assert "| op kind | s per call |" in capsys.readouterr().out


def test_sampler_bench_folder_matches_generate_greedy_tokens(tmp_path):
    from benchmarks import sampler as sampler_bench
    from meowjax.models import hf_io, lm

    cfg = config_lib.get_preset("tiny")
    hf_io.save_hf_checkpoint(str(tmp_path), cfg, lm.init_params(cfg, jax.random.key(0)))
    r = sampler_bench.bench_folder(str(tmp_path), "tiny", batch=2, prompt_len=8, new_tokens=6,
                                   repeats=2)
    # fp32 greedy on the same weights: every new token equals transformers' generate.
    assert r["agree"] == 1.0 and r["params"] == config_lib.num_params(cfg)
    assert r["ours"] > 0 and r["theirs"] > 0 and r["ratio"] == pytest.approx(
        r["ours"] / r["theirs"])
    assert "| tiny | 0.1M | 2 x 8 | 6 |" in sampler_bench.generate_table([r])


def test_sampler_decode_compare_runs_both_layouts_and_names_its_flag():
    from benchmarks import sampler as sampler_bench

    result = sampler_bench.compare_samplers("tiny", batch=2, prompt_len=8, new_tokens=4,
                                            repeats=1, kind="decode", control=True)
    assert result["prefill_tokens_equal"] and result["generate_tokens_equal"]
    assert set(result["generate_s"]) == {"reference", "current", "control"}
    assert all(s > 0 for s in result["generate_s"].values())
    g = result["generate_s"]
    assert result["control_generate"] == g["reference"] / g["control"]
    table = sampler_bench.compare_table([result])
    assert "--decode_compare" in table and "| tiny | 2 x 8 |" in table
    assert f"generate {result['control_generate']:.2f}x. A speedup no farther" in table


def test_cpu_line_names_the_widest_vector_extension():
    info = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx fma avx2\n"
    assert train_step.cpu_line(info) == "AMD EPYC, AVX2 (no AVX-512)"
    assert train_step.cpu_line(info.replace("avx2", "avx2 avx512f avx512bw")) == "AMD EPYC, AVX-512"
    assert train_step.cpu_line("model name: X\nflags: sse2\n").endswith("no AVX2")
    assert "CPUs (" in train_step.machine_line()


def test_matmul_peak_is_the_faster_library():
    assert timing.MatmulPeak(64, "float32", 2e9, 3e9).flops == 3e9
    assert timing.MatmulPeak(64, "float32", 2e9, 1e9).flops == 2e9
    only_jnp = timing.MatmulPeak(64, "float32", 2e9)
    assert only_jnp.flops == 2e9 and "torch not measured" in only_jnp.describe()
    measured = timing.measure_peak(64, "float32", with_torch=True)
    assert measured.jnp_flops > 0 and measured.torch_flops > 0


def test_time_interleaved_alternates_the_sides_with_their_own_syncs_and_keeps_each_best():
    calls, synced = [], []
    names = ("torch", "ours")
    runs = {name: (lambda name=name: calls.append(name) or name) for name in names}
    best = timing.time_interleaved(runs, repeats=3,
                                   syncs={name: synced.append for name in names})
    assert calls == ["torch", "ours"] * 3 and synced == calls
    assert set(best) == {"torch", "ours"} and all(0 <= s < 1 for s in best.values())


@pytest.mark.slow
def test_gpu_correctness_tiny_on_cpu_reports_parity(tmp_path):
    """The accelerator check's correctness script on the CPU: fp32 logits equal transformers',
    fp32 greedy decode equals the full forward's argmax, and every check writes its row."""
    from benchmarks import gpu_correctness

    results_md = tmp_path / "gpu.md"
    gpu_correctness.main(["--presets=tiny", "--device=cpu", "--batch=2", "--length=32",
                          "--sample_batch=2", "--prompt_len=16", "--new_tokens=8",
                          f"--results={results_md}"])
    rows = {line.split(" | ")[2]: line for line in results_md.read_text().splitlines()
            if line.startswith("| tiny |")}
    assert len(rows) == 8, rows
    fp32 = rows["ours fp32 (precision highest) vs torch fp32"]
    assert float(fp32.split("rel ")[1].split(",")[0]) < 1e-5, fp32
    assert "share 1, rows_identical 1" in rows["float32: decode == full-forward argmax"]
    gap = rows["bf16: sampler vs trainer recompute"]
    assert float(gap.split("max ")[1].split(",")[0]) < 0.05, gap


def test_multiturn_cache_smoke_times_both_paths_and_writes_table(tmp_path):
    """`benchmarks/multiturn_cache.py --smoke`: both paths play the same episodes; readings at
    each turn count, per-turn costs and the Markdown table (no timing asserted)."""
    from benchmarks import multiturn_cache

    results = tmp_path / "R.md"
    r = multiturn_cache.main(["--smoke", f"--results={results}"])
    assert [row["turns"] for row in r["rows"]] == [2, 4, 6]
    assert all(row["cached_s"] > 0 and row["reprefill_s"] > 0 for row in r["rows"])
    assert len(r["turn_s"]["cached"]) == len(r["turn_s"]["reprefill"]) == 6
    assert r["same_tokens"] == 1.0 and 0 < r["slot_use"] <= 1
    assert set(r["turn_cost"]) == {2, 4, 6} and r["turn_cost"][2] == 1.0
    assert "| 6 |" in results.read_text() and "multiturn_cache.py" in results.read_text()

"""`make bench` (cluster_train/image/bench.py) on the CPU at the smallest size: each kind of row is measured in its own
processes and the comparisons are computed. The GPU figures come from the same code on a GPU (benchmarks/README.md)."""
import json

import pytest

import cluster_train.image.bench
from cluster_train.image.bench import CPU_MODELS, VARIANTS, bench, cases, gpu_models


@pytest.mark.slow  # real processes per case
def test_bench_measures_the_registered_loop_against_a_plain_one(tmp_path):
    out = bench(models="resnet_cifar_d8_w4", strategies="ddp,no_such", variants="fp32", ranks=2, batch=8, steps=2,
                warmup=1, repeats=1, out_dir=str(tmp_path))
    result = json.loads(out.read_text())
    rows = {(r["kind"], r["strategy"]): r for r in result["rows"]}
    assert set(rows) == {("strategy", "ddp"), ("strategy", "no_such"), ("variant", "single"), ("plain", "none")}
    assert "no_such" in rows[("strategy", "no_such")]["error"]  # a case that fails is a row, and the rest still run
    assert rows[("strategy", "ddp")]["ranks"] == 2 and rows[("strategy", "ddp")]["state_bytes_per_rank"] > 0
    variant, plain = rows[("variant", "single")], rows[("plain", "none")]
    assert variant["vs_fp32"] == 1.0 and plain["samples_per_s"] > 0
    assert variant["loop_vs_plain"] == round(variant["samples_per_s"] / plain["samples_per_s"], 3)
    assert result["device"] == "cpu" and result["steps"] == 2


def test_repeats_alternate_the_loop_and_the_plain_case_and_compare_their_medians(tmp_path, monkeypatch):
    """The CPU's default of 5 runs, their order, every run's figures in the rows and loop_vs_plain as the ratio of the
    medians, with the measurement replaced by made-up speeds (no processes): 'no_such' fails once, not repeated."""
    speeds = {"variant": iter([900.0, 1000.0, 1200.0, 950.0, 1100.0]),
              "plain": iter([1000.0, 1300.0, 1100.0, 1050.0, 1200.0])}
    order = []

    def measured(case):
        order.append((case["kind"], case["strategy"]))
        if case["strategy"] == "no_such":
            return {"kind": case["kind"], "model": case["label"], "strategy": case["strategy"],
                    "variant": case["variant"], "ranks": case["ranks"], "error": "no_such"}
        speed = next(speeds[case["kind"]])
        return {"kind": case["kind"], "model": case["label"], "strategy": case["strategy"], "variant": case["variant"],
                "ranks": 1, "samples_per_s": speed, "step_ms": round(8000 / speed, 2), "host_peak_mb_per_rank": 1.0,
                "device_peak_mb_per_rank": None, "wall_s": 1.0}

    monkeypatch.setattr(cluster_train.image.bench, "_measured", measured)
    # the CPU's cases on any machine
    monkeypatch.setattr(cluster_train.image.bench.torch.cuda, "is_available", lambda: False)
    out = bench(models="resnet_cifar_d8_w4", strategies="no_such", variants="fp32", batch=8, steps=2, warmup=1,
                out_dir=str(tmp_path))
    assert order == [("strategy", "no_such")] + [("variant", "single"), ("plain", "none")] * 5
    result = json.loads(out.read_text())
    rows = {r["kind"]: r for r in result["rows"]}
    assert result["repeats"] == 5 and rows["strategy"]["error"] == "no_such" and rows["strategy"]["runs"] == 1
    variant, plain = rows["variant"], rows["plain"]
    assert variant["samples_per_s_runs"] == [900.0, 1000.0, 1200.0, 950.0,
                                             1100.0] and variant["samples_per_s"] == 1000.0
    assert plain["samples_per_s"] == 1100.0 and len(plain["samples_per_s_runs"]) == 5
    assert variant["step_ms"] == 8.0 and variant["runs"] == 5 and variant["wall_s"] == 5.0
    assert variant["loop_vs_plain"] == round(1000 / 1100, 3)  # the medians', not the median of the pairs' ratios
    assert variant["loop_vs_plain_runs"] == [0.9, 0.769, 1.091, 0.905, 0.917]


def test_only_the_comparison_is_repeated():
    planned = list(cases(CPU_MODELS, ["single"], ["fp32"], ranks=2, batch=None, steps=1, warmup=1, cuda=False))
    groups = cluster_train.image.bench.schedule(planned, 5)
    assert [([c["kind"] for c in group], times) for group, times in groups] == [
        (["strategy"], 1), (["variant", "plain"], 5)]
    lone = [c for c in planned if c["kind"] != "variant"]  # --variants without the plain case's own: plain alone
    assert [([c["kind"] for c in group], times) for group, times in cluster_train.image.bench.schedule(lone, 5)] == [
        (["strategy"], 1), (["plain"], 5)]


@pytest.mark.slow
def test_gpu_cases_cover_the_seed_models_at_real_sizes_with_every_variant():
    models = gpu_models()
    assert models["resnet_cifar_cifar100"][1] == {"depth": 18, "width": 64, "stages": 4}  # from the experiment file
    assert {"densenet_cifar_cifar100", "mobilenet_v3_small_224", "efficientnet_b0_224", "resnet50_224"} <= set(models)
    planned = list(cases(models, ["single", "ddp"], list(VARIANTS), ranks=1, batch=None, steps=1, warmup=1, cuda=True))
    per_model = {m: [c for c in planned if c["label"] == m and c["kind"] == "variant"] for m in models}
    assert all([c["variant"] for c in v] == list(VARIANTS) for v in per_model.values())
    resnet50 = next(c for c in planned if c["label"] == "resnet50_224" and c["kind"] == "plain")
    assert (resnet50["batch"], resnet50["size"], resnet50["precision"],
            resnet50["channels_last"]) == (256, 224, "bf16-mixed", True)
    assert [c["strategy"] for c in planned if c["kind"] == "strategy"] == ["single", "ddp"]

"""`make bench` (train/bench.py) on the CPU at the smallest size: each kind of row is measured in its own processes and
the comparisons are computed. The GPU figures come from the same code on a GPU (bench/README.md)."""
import json

import pytest

from train.bench import VARIANTS, bench, cases, gpu_models

pytestmark = pytest.mark.slow  # real processes per case


def test_bench_measures_the_registered_loop_against_a_plain_one(tmp_path):
    out = bench(models="resnet_cifar_d8_w4", strategies="ddp,no_such", variants="fp32", ranks=2, batch=8, steps=2,
                warmup=1, out_dir=str(tmp_path))
    result = json.loads(out.read_text())
    rows = {(r["kind"], r["strategy"]): r for r in result["rows"]}
    assert set(rows) == {("strategy", "ddp"), ("strategy", "no_such"), ("variant", "single"), ("plain", "none")}
    assert "no_such" in rows[("strategy", "no_such")]["error"]  # a case that fails is a row, and the rest still run
    assert rows[("strategy", "ddp")]["ranks"] == 2 and rows[("strategy", "ddp")]["state_bytes_per_rank"] > 0
    variant, plain = rows[("variant", "single")], rows[("plain", "none")]
    assert variant["vs_fp32"] == 1.0 and plain["samples_per_s"] > 0
    assert variant["loop_vs_plain"] == round(variant["samples_per_s"] / plain["samples_per_s"], 3)
    assert result["device"] == "cpu" and result["steps"] == 2


def test_gpu_cases_cover_the_seed_models_at_real_sizes_with_every_variant():
    models = gpu_models()
    assert models["resnet_cifar_cifar100"][1] == {"depth": 18, "width": 64, "stages": 4}  # from the experiment file
    assert {"densenet_cifar_cifar100", "mobilenet_v3_small_224", "efficientnet_b0_224", "resnet50_224"} <= set(models)
    planned = list(cases(models, ["single", "ddp"], list(VARIANTS), ranks=1, batch=None, steps=1, warmup=1, cuda=True))
    per_model = {m: [c for c in planned if c["label"] == m and c["kind"] == "variant"] for m in models}
    assert all([c["variant"] for c in v] == list(VARIANTS) for v in per_model.values())
    resnet50 = next(c for c in planned if c["label"] == "resnet50_224" and c["kind"] == "plain")
    assert (resnet50["batch"], resnet50["size"], resnet50["precision"], resnet50["channels_last"]) == (256, 224, "bf16-mixed", True)
    assert [c["strategy"] for c in planned if c["kind"] == "strategy"] == ["single", "ddp"]

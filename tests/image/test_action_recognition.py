"""Seed 002 end to end at small scale: experiments/action_recognition.yaml, the model chosen by name."""
import pytest

pytest.importorskip("torch")
pytest.importorskip("PIL")

from conftest import ROOT  # noqa: E402


@pytest.mark.parametrize("model", ["cnn_lstm", "ensemble"])
def test_action_recognition_experiment_trains_a_model_chosen_by_name(tmp_path, model):
    from cluster_train.shared import config as cfg
    from cluster_train.image.data.ufc10 import generate_ufc10
    from cluster_train.image.fit import fit

    data = generate_ufc10(tmp_path / "data", train_per_class=1, val_per_class=1, test_per_class=1, size=16)
    run = cfg.load(ROOT / "experiments" / "action_recognition.yaml", [
        f"model.name={model}", "model.params={}", f"data.root={data}", "data.num_workers=0",
        f"output_dir={tmp_path / 'run'}", "trainer.max_epochs=1", "trainer.strategy=single",
        "trainer.accelerator=cpu", "trainer.limit_train_batches=1"])
    results = fit(run)
    assert results["model"] == model and results["epochs"] == 1
    assert (tmp_path / "run" / "results.json").is_file()

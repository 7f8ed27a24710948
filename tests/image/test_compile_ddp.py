"""torch.compile under DDP (cluster_train/image/speed.py): a compiled model trains on 2 ranks and saves plain keys. Run
inside the image, by the torch jobs use, whose inductor cache (under /tmp) outlives a clean clone; a new host venv
compiles every kernel again (its paths are in the cache keys)."""
import pytest
import torch

from image.test_speed import TINY, assert_host_memory, make_data_dir, tiny_run
from cluster_train.image.fit import fit
from cluster_train.image.localrun import spawn
from cluster_train.shared.models import MODELS

# inductor compiles C++ kernels on the CPU: make test runs this inside the image (test_in_image.py), not here again
pytestmark = [pytest.mark.slow, pytest.mark.image_copy]


@pytest.fixture(scope="module")
def tiny_cifar(tmp_path_factory):
    return make_data_dir(tmp_path_factory.mktemp("compile") / "data")


def compiled_rank(rank, data, out):
    # Without inductor's layout optimisation: torch 2.13's CPU inductor turns this ResNet's saved activations
    # channels-last and its aten.convolution_backward then dies of SIGSEGV (pytorch/pytorch#189239 is that lowering);
    # what this test proves is ours, that a compiled model trains under DDP and saves plain keys
    import torch._inductor.config as inductor  # read at torch's import, so its environment variable would be too late

    inductor.layout_optimization = False
    inductor.compile_threads = 1  # the two ranks fill both cores: a pool of compile workers each only adds interpreters
    return fit(tiny_run(data, out, devices=2, strategy="ddp", compile=True, limit_val_batches=1))


def test_compile_trains_under_ddp_and_keeps_checkpoint_keys(tiny_cifar, tmp_path):
    results = spawn(compiled_rank, 2, tiny_cifar, tmp_path)[0]
    assert results["compiled"] and results["world_size"] == 2 and results["epochs"] == 1
    assert_host_memory(results, ranks=2)  # rank 1's figures gathered into rank 0's results
    assert torch.isfinite(torch.tensor(results["final_val_loss"]))
    keys = set(torch.load(results["weights"]))
    assert keys == set(MODELS.build("resnet_cifar", num_classes=100, **TINY).state_dict())  # no _orig_mod. prefix

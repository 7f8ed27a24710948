"""What a CUDA image's %test proves on a machine without a GPU: the CUDA torch was built for, the GPU
architectures compiled in, NCCL and the InfiniBand verbs libraries load, and DeepSpeed's CPU Adam (the offload
strategies' optimizer) builds with the image's own compiler and takes a step. `python -m train imagecheck ...`.

Each check raises with the one thing that is wrong; the image's build fails on it.
"""
import ctypes
import glob
import os
import tempfile
from pathlib import Path
from typing import List

VERBS_LIBRARIES = ("libibverbs.so.1", "librdmacm.so.1")
VERBS_PROVIDERS = "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav*.so"  # Mellanox/NVIDIA HCAs: most IB nodes


def compiled_capabilities() -> List[float]:
    """The sm_XY architectures torch's CUDA kernels were compiled for, as compute capabilities (no GPU needed)."""
    import torch

    flags = torch._C._cuda_getArchFlags().split()  # "sm_75 sm_80 ... sm_120", fixed when torch was built
    return sorted(int(f.split("_")[1][:-1]) + int(f.split("_")[1][-1]) / 10 for f in flags if f.startswith("sm_"))


def check_cuda(version: str, capabilities) -> str:
    import torch

    if torch.version.cuda != str(version):
        raise SystemExit(f"imagecheck: torch {torch.__version__} is built for CUDA {torch.version.cuda}, not {version}")
    have = compiled_capabilities()
    # a GPU runs kernels of its own major version compiled for an equal or lower minor (sm_86 code on an 8.9 GPU)
    for needed in map(float, capabilities):
        if not any(int(c) == int(needed) and c <= needed for c in have):
            raise SystemExit(f"imagecheck: no kernels for compute capability {needed} (torch has {have})")
    return f"CUDA {torch.version.cuda}, kernels for {' '.join(str(c) for c in have)}"


def check_nccl() -> str:
    import nvidia.nccl  # the nvidia-nccl-cu12 wheel torch loads its NCCL from

    lib = ctypes.CDLL(str(Path(list(nvidia.nccl.__path__)[0]) / "lib" / "libnccl.so.2"))
    version = ctypes.c_int()
    if lib.ncclGetVersion(ctypes.byref(version)) != 0:
        raise SystemExit("imagecheck: ncclGetVersion failed")
    return f"NCCL {version.value // 10000}.{version.value // 100 % 100}.{version.value % 100}"


def check_verbs() -> str:
    """NCCL dlopens these at init; without them it falls back to TCP sockets silently."""
    for name in VERBS_LIBRARIES:
        ctypes.CDLL(name)
    providers = glob.glob(VERBS_PROVIDERS)
    if not providers:
        raise SystemExit(f"imagecheck: no InfiniBand verbs provider {VERBS_PROVIDERS} (Debian's ibverbs-providers)")
    ctypes.CDLL(providers[0])
    return f"verbs: {', '.join(VERBS_LIBRARIES)}, {os.path.basename(providers[0])}"


def check_cpu_adam() -> str:
    """DeepSpeed JIT-compiles CPU Adam on first use, with the image's g++, into TORCH_EXTENSIONS_DIR."""
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", tempfile.mkdtemp(prefix="torch_extensions"))
    weight = torch.nn.Parameter(torch.ones(8))
    optimizer = DeepSpeedCPUAdam([weight], lr=0.1)
    weight.grad = torch.ones(8)
    optimizer.step()
    if not torch.all(weight < 1):
        raise SystemExit("imagecheck: DeepSpeed's CPU Adam step left the weights unchanged")
    return "DeepSpeed CPU Adam built and stepped"


def imagecheck(cuda: str, *capabilities: float) -> None:
    """CUDA version, then the compute capability of every GPU containers/flavors.yaml maps to the image."""
    for line in (check_cuda(cuda, capabilities), check_nccl(), check_verbs(), check_cpu_adam()):
        print(f"imagecheck: {line}")

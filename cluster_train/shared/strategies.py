"""Distributed strategy registry: a name in the config -> a Lightning strategy object (or name).

Every constructor (cluster_train/image/strategies/builders.py) takes (accelerator, trainer=None):
the resolved accelerator name and the TrainerConfig. DeepSpeed configurations are JSON files beside
the constructors (package data), one per ZeRO variant.
Torch-free: names, PRECISIONS and check_precision serve the login node; a strategy's module is imported when built.
"""
from cluster_train.shared.errors import UserError
from cluster_train.shared.registry import Registry

_B = "cluster_train.image.strategies.builders"
STRATEGIES = Registry("strategy", {
    name: f"{_B}:{name}" for name in ("ddp", "single", "fsdp", "zero1", "zero2", "zero2_offload", "zero3",
                                      "zero3_offload")
}, fixed=("accelerator", "trainer"))

PRECISIONS = ("auto", "32", "16-mixed", "bf16-mixed")  # auto: cluster_train/image/speed.py
# The same names as a registry (no constructors: Lightning takes the string itself), for cluster_train.shared.catalog.
PRECISION_NAMES = Registry("precision", {name: "" for name in PRECISIONS})


def check_precision(precision: str) -> str:
    if str(precision) not in PRECISIONS:
        raise UserError(f"unknown precision {precision!r}; choose one of: {', '.join(PRECISIONS)}")
    return str(precision)


# Why torch.compile cannot go with a strategy (trainer.compile); single and ddp compile.
COMPILE_REFUSED = {
    "fsdp": "its FSDP1 wrapper aborted under torch.compile in our tests (double free, torch 2.13); PyTorch supports "
            "compile with FSDP2's fully_shard, which this strategy does not use yet",
    **{name: "DeepSpeed's engine wraps the module and hooks every parameter, which torch.compile cannot trace"
       for name in ("zero1", "zero2", "zero2_offload", "zero3", "zero3_offload")},
}


def check_compile(strategy: str, compile: bool, cuda_graphs: str = "auto") -> None:
    if compile and strategy in COMPILE_REFUSED:
        raise UserError(f"trainer.compile=true with strategy {strategy!r}: {COMPILE_REFUSED[strategy]}; "
                        f"set trainer.compile=false, or strategy ddp or single")
    if cuda_graphs == "always" and strategy in COMPILE_REFUSED:  # graphs are recorded through torch.compile
        raise UserError(f"trainer.cuda_graphs=always with strategy {strategy!r}: {COMPILE_REFUSED[strategy]}; "
                        f"set trainer.cuda_graphs=auto (it leaves this strategy eager), or strategy ddp or single")

"""Data set registry: `build(config)` (DATASETS.build(name, config=DataConfig, **config.params)) returns a
LightningDataModule. Torch-free: a data set's module is imported when it is built; its `data.params` are the
keyword arguments of its data module's constructor besides `config` (DATASETS.params(name))."""
from cluster_train.shared.registry import Registry

DATASETS = Registry("data set", {
    "cifar100": "cluster_train.image.data.cifar100:Cifar100DataModule",
    "ufc10": "cluster_train.image.data.ufc10:VideoDataModule",
    "planner_scenes": "cluster_train.image.data.planner_scenes:PlannerScenesDataModule",  # seed 003
    "motion_tokens": "cluster_train.image.data.motion_tokens:MotionTokensDataModule",  # seed 004
}, fixed=("config",))

# Generators write small learnable data sets in each loader's real on-disk format (`python -m train make_data`).
GENERATORS = Registry("data generator", {
    "cifar100": "cluster_train.image.data.cifar100:generate_cifar100",
    "ufc10": "cluster_train.image.data.ufc10:generate_ufc10",
    "planner_scenes": "cluster_train.image.data.planner_scenes_format:generate_planner_scenes",
    "motion_tokens": "cluster_train.image.data.motion_tokens_format:generate_motion_tokens",
}, fixed=("root",))


def build(config):
    """The data module for a DataConfig: its name, with its own params."""
    return DATASETS.build(config.name, config=config, **config.params)

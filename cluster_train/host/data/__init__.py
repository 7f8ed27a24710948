"""The data room: data sets packed as SquashFS images, stored by sha256 beside the images, bound read-only into jobs.
Torch-free.

    store.py     the data store: <image store>/data/store/<sha256>.sqsh and data/index.json, one record per image
    pack.py      `data pack`: a directory becomes one reproducible SquashFS file (mksquashfs)
    transport.py push and pull through an OCI registry (apptainer ORAS), the SquashFS inside a SIF wrapper
    binding.py   a run's `data.image` resolved to its stored, verified file, the bind and the manifest's record
    directory.py a command's data directory (data.root, --data) by digest: the manifest's record, --rerun's check
    commands.py  `run-cluster data pack|import|push|pull|list|verify`, the command line
"""

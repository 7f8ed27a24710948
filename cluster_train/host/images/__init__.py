"""The image room: SIF images by sha256, built, stored, moved between machines, signed and derived. Torch-free.

    store.py        the image store: images/store/<sha256>.sif and images/index.json, one record per image
    content_key.py  the content key of a build (what `make image` rebuilds on), stale and untested images; its CLI
    build_log.py    `make image`'s view of apptainer build: the current step as a status line, the whole log kept
                    is what containers/images.mk runs (stdlib only)
    sif.py          a SIF from outside the store: header and label checks, then admission (import, pull)
    oci.py          push and pull through an OCI registry (apptainer ORAS), a pull admitted into the store
    signing.py      `images sign` and the check of an image against a cluster's signing policy
    derive.py       `images derive`: a project's hash-locked packages on top of a stored image
    locations.py    which store a command uses, and the verified image a recorded run used (--rerun, resume)
    commands.py     `run-cluster images list|import|push|pull|verify|sign|derive`, the command line
"""

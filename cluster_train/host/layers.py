"""The rooms of the login-node side (cluster_train/host/<room>/, or a module at its top), in layers from the doors
down: a module imports from its own room or from a lower layer only, at module level, inside a function and under
TYPE_CHECKING alike (tests/host/test_layout.py holds the code to it; benchmarks/spine_counts.py counts what does
not). Rooms of one layer import each other without a circle. A new room goes in the layer its imports allow."""

LAYERS = [
    ["cli", "completion", "submit", "commands", "interactive"],  # doors: parse, call the core, print
    ["api"],  # the Python door, which the command line's doors call too
    ["views", "reports", "doctor", "check_cluster", "init_cluster", "probe_data"],  # what shows runs and clusters
    ["search", "remote"],  # studies, and clusters reached over SSH
    ["runs"],  # run directories: queue, follow, status, resume, rerun
    ["jobs"],  # a request resolved, checked and rendered into a job
    ["data", "images"],  # data sets and images, stored and checked
    ["clusters"],  # cluster files, each checked against its scheduler's adapter
    ["schedulers"],  # one adapter per scheduler
    ["settings"],  # the user's settings, which may name a site's own adapter
    ["scheduling"],  # what an adapter is asked and answers: the resolved job, states, names, launch shapes
    # plain helpers every room may use
    ["fabric", "project", "git", "reach", "progress", "status_line", "usage", "undecodable", "apptainer"],
]

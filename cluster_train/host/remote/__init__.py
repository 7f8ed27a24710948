"""A cluster reached over SSH from the user's own machine (a laptop): the user's settings say how to reach it
(`ssh:`, `remote_dir:`...), the cluster file stays the site's facts.

The design: the launcher itself runs on the login node. The laptop checks what needs only the config (the cluster
file, the settings, the experiment and every --set resolved), sends the project's files by content (rsync over the
one SSH connection: unchanged files are not sent again) and the cluster's settings, then runs the same
`bin/run-cluster` there with the same arguments. Every check that needs the cluster's file system or scheduler
(input paths, the image in the store, account and QOS, `sbatch --test-only`) is then the login node's own code on the
login node's own state, so its refusals read exactly as they would there, and there is no second implementation of
any of them to drift. The laptop keeps a small record per run (runs/<id>/remote.json) that says where the run lives;
status, logs, cancel, resume and --rerun of such a run are the same commands run there, streamed back.

    ssh.py       the one shared connection per cluster, every remote word quoted, ssh's failures as one line
    sync.py      what a job needs sent by content (code, settings, image); a run's small files fetched back
    commands.py  submit there; status, logs, cancel, resume and --rerun proxied; report and compare on fetched copies
    runs.py      the same questions for the Python API's Run (cluster_train/host/api/run.py), their answers read here
    race.py      --first-to-start across clusters: runs here and over SSH queued, the first to start kept
"""

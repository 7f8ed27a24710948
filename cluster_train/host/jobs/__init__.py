"""The jobs room: from "this cluster, this profile, this experiment" to a checked script, writing nothing.

    build.py          the one job builder: a Site (cluster file + settings, read once per command) and a Request
                      become a Submission; submit, --rerun, resume, sweeps, scaling and check-cluster all use it
    resolve.py        the numbers: the run config resolved once, then the Job (shape, requests, image, environment)
    job.py            the Job itself: every number and path one script needs; the manifest records it
    memory.py         a job's memory as the site wants it asked (per node, GPU or CPU, the whole node, or none)
    measured.py       host RAM per rank and per worker as earlier runs and probe-data measured it, else as stated
    requests.py       what a profile asks of the scheduler, in its words: time limits, the warning, CPU binding
    preflight.py      the checks a job must pass before it is queued (partition fit, GPUs, launch, image, driver...)
    config_check.py   the run config's own checks: every registered name and parameter, without torch
    summary.py        what a user reads before queuing (the shape, the effective batch, host RAM, the image)
    cost.py           the most a job can cost: its time limit x its GPUs (or CPUs), per allocation
    render.py         the Job into its scheduler's script (Jinja; every value quoted)
    user_code.py      your own code (a command after --, or --dev): its snapshot and what preflight reads of it
    reads.py          `reads:`: which keys of your own YAML mean the numbers preflight checks
    code_snapshot.py  the code a run executes, frozen at submission (a tar and its sha256)
    left_out.py       what a command's snapshot left out because git ignores it, named in the summary
    run_refs.py       ${run:<id>}: an earlier run's directory named in a config value, resolved once at build time
"""

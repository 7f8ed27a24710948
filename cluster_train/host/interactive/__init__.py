"""Work inside the pinned image on a compute node: `run-cluster notebook` (JupyterLab in a batch job of the profile,
its port forwarded here) and `run-cluster shell`.

    waiting.py   the wait in the queue: the pending reason and start estimate shown, Ctrl-C withdraws the request
    forward.py   a local port carried to the notebook's node: a TCP relay on the login node, ssh -L from a laptop
    notebook.py  `run-cluster notebook`: the job submitted with a fresh token, waited for, forwarded, stopped
    laptop.py    the same from a laptop: the login node's notebook command over ssh, its port forwarded by ssh
"""

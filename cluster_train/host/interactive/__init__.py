"""Interactive work inside the pinned image on a compute node: `run-cluster shell` (shell.py, allocation.py) and
`run-cluster notebook`; waiting.py shows a pending allocation's reason and start estimate until it runs."""

"""The reports room: what a run or a set of runs came to, read from their directories on the login node (no torch;
matplotlib only inside curves.py's functions, when a figure is drawn; without it, svg_curves.py draws the curves).

run_facts.py    a run directory's manifest, results and metrics (`Run`, `load_run`), dotted config keys, what differs
compare.py      `run-cluster compare runs/a runs/b ...`: the differing keys, images, code and metrics as one table
report.py       `run-cluster report runs/<id>|sweeps/<id>`: report.html for a run or a directory of runs
study.py        report.html of a study (cluster_train/host/search): its best trial, Optuna's plots, every trial
html_blocks.py  report.html's building blocks: escaping, tables, sections, PNGs as data: URIs, the page
curves.py       training and validation curves from a run's CSV logs, drawn as PNG bytes (SVG without matplotlib)
svg_curves.py   those curves as SVG with the standard library alone
scaling.py      `run-cluster scaling CLUSTER PROFILE...`: scaling efficiency against 1 GPU (scaling.json, .png)
"""

"""What shows runs and acts on them from the command line, above the rooms it reads (runs/, search/, remote/): a run's
status, logs, cancel and resume, and the listing of every run of this machine and of each cluster reached over SSH.

The room:
    commands.py     `run-cluster status|logs|cancel|resume`
    table.py        `run-cluster runs`: every run of this machine and of each cluster reached over SSH, one table
"""

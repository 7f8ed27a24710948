"""Hyperparameter search (`run-cluster CLUSTER PROFILE EXPERIMENT --search FILE.yaml`): an Optuna study whose trials
are ordinary runs queued as job arrays.

    spec.py          the search file, checked whole (space, objective, trials, sampler, pruner)
    plan.py          the study checked and shown before anything is queued; its directory created
    driver.py        asks, queues, prunes from metrics.csv and tells; killed and started again at any moment
    record.py        the study's directory: study.json, trials.json, the driver's lock
    objective.py     what each task logs, and a trial's value read from its run directory
    optuna_study.py  the one module that imports Optuna
    storage.py       SQLite in the study's directory, or your settings' PostgreSQL
    showing.py       `status`, `runs`, `cancel` of a study
"""

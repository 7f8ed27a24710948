"""Where a study's trials are stored: SQLite in the study's directory (the default: one writer, the driver), or a
PostgreSQL database named in your settings, its password read from an environment variable when the driver connects
and never written:

    search_storage: {url: "postgresql://me@db.example.edu:5432/optuna", password_env: OPTUNA_PG_PASSWORD}
"""
from pathlib import Path
from typing import Any, Dict


def storage_of(user: Dict[str, Any], study_dir: Path) -> Dict[str, str]:
    """study.json's storage: the settings' PostgreSQL (URL and variable name only), else the study's SQLite file."""
    if user.get("search_storage"):
        return {"url": str(user["search_storage"]["url"]), "password_env": str(user["search_storage"]["password_env"])}
    return {"url": f"sqlite:///{Path(study_dir).resolve() / 'study.db'}"}

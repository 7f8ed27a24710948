"""The settings' `search_storage:` (a study's PostgreSQL database; cluster_train/host/search/storage.py uses it),
checked where settings are read: the URL names no password, the password's variable is a name."""
import re
from typing import Any

from cluster_train.shared.errors import UserError

EXAMPLE = 'search_storage: {url: "postgresql://me@db.example.edu/optuna", password_env: OPTUNA_PG_PASSWORD}'
URL = re.compile(r"^postgresql(\+[a-z0-9]+)?://[^:@/\s]+@[^@/\s]+/[^/\s]+$")
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check(value: Any, where: str) -> None:
    """The settings' search_storage, checked where settings are read."""
    if not isinstance(value, dict) or set(value) != {"url", "password_env"}:
        raise UserError(f"{where}: search_storage {value!r} must give url and password_env; write {EXAMPLE}")
    url, variable = str(value["url"]), str(value["password_env"])
    if not URL.match(url):
        raise UserError(f"{where}: search_storage url {url!r} is not postgresql://USER@HOST[:PORT]/DATABASE (the "
                        f"password goes in the variable password_env names, never in the file)")
    if not VARIABLE.match(variable):
        raise UserError(f"{where}: search_storage password_env {variable!r} is not an environment variable's name; "
                        f"write e.g. password_env: OPTUNA_PG_PASSWORD")

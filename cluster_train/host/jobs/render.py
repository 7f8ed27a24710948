"""Render a ResolvedJob into its scheduler's script: the template the adapter names (cluster_train/host/schedulers/templates/
for the built-in ones), which includes the shared partials of that folder."""
import functools
import re
import shlex
from pathlib import Path
from typing import Optional

from cluster_train.shared import exit_codes
from cluster_train.shared.errors import UserError
from cluster_train.host import fabric
from cluster_train.host.scheduling.job import ResolvedJob
from cluster_train.host.schedulers import SHARED_TEMPLATES
from cluster_train.shared.ports import master_port_shell

TEMPLATES = SHARED_TEMPLATES
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HOST_VALUE = re.compile(r"\$\$|\$([A-Za-z_][A-Za-z0-9_]*)")  # in an env value: a literal $, or the node's $NAME
# Per-task values a launcher sets and the training code reads inside the container.
FORWARDED = ["SLURM_*", "LSB_*", "LSF_*", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "CT_*",
             "PYTHONUNBUFFERED"]


def render(job: ResolvedJob, template: str = "") -> str:
    """The job's script: its scheduler's template, or `template` of the same folders (an interactive session's)."""
    for name in job.work.env:
        if not ENV_NAME.match(name):
            raise UserError(f"environment variable name {name!r} is not valid; use letters, digits and '_'")
    scheduler = job.adapter
    template = environment(scheduler.template_dir()).get_template(template or scheduler.template)
    return template.render(job=job, scheduler=scheduler, requeue_exit=exit_codes.REQUEUE,
                           forward_patterns="|".join(FORWARDED + sorted(job.work.env) + job.work.credentials),
                           fabric=fabric, fabric_check=fabric.check(job.fabric.name) if job.fabric.check else None)


@functools.lru_cache(maxsize=None)  # one per template folder: compiling the templates is most of a render's time
def environment(own: Optional[Path] = None):
    """The templates' Jinja environment: every value reaching a script goes through `| q` (or `| env_word`). `own`:
    an adapter's template folder, searched first, so that an adapter defined outside cluster_train/host/schedulers/
    still includes the shared partials."""
    try:  # here, not at the top: a refused job never pays for importing it
        import jinja2
    except ImportError:
        raise UserError("jinja2 is not installed; install the host requirements: "
                        "python3 -m pip install --user pyyaml jinja2") from None
    folders = [TEMPLATES] if own in (None, TEMPLATES) else [own, TEMPLATES]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(folder) for folder in folders]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        comment_start_string="{{#",  # bash's ${#array[@]} would otherwise open a Jinja comment
        comment_end_string="#}}",
        # compiled once per user (in /tmp), not by every command; a name of its own: the key is the template's source,
        # not this environment's settings
        bytecode_cache=jinja2.FileSystemBytecodeCache(pattern="__cluster_train_%s.cache"),
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["env_word"] = env_word
    env.globals["master_port"] = master_port_shell
    return env


def env_word(value: str) -> str:
    """One shell word for an env value: literal text single-quoted, each $NAME expanded on the node when the job
    runs ("${NAME-}": unset is empty, which `set -u` would otherwise abort on), $$ a literal $."""
    parts, start = [], 0
    for match in HOST_VALUE.finditer(value):
        parts.append(shlex.quote(value[start:match.start()] + ("$" if match.group(1) is None else "")))
        if match.group(1):
            parts.append(f'"${{{match.group(1)}-}}"')
        start = match.end()
    parts.append(shlex.quote(value[start:]))
    word = "".join(p for p in parts if p != "''")
    return word or "''"

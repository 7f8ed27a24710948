"""Render a Job into the scheduler's script from the template files in train/templates/."""
import re
import shlex
from pathlib import Path

from train import exit_codes
from train.errors import UserError
from train.ports import master_port_shell
from train.host.job import Job
from train.host.schedulers import adapter

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Per-task values a launcher sets and the training code reads inside the container.
FORWARDED = ["SLURM_*", "LSB_*", "LSF_*", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "CT_*", "PYTHONUNBUFFERED"]


def render(job: Job) -> str:
    try:  # here, not at the top: a refused job never pays for importing it
        import jinja2
    except ImportError:
        raise UserError("jinja2 is not installed; install the host requirements: "
                        "python3 -m pip install --user pyyaml jinja2") from None

    for name in job.env:
        if not ENV_NAME.match(name):
            raise UserError(f"environment variable name {name!r} is not valid; use letters, digits and '_'")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        comment_start_string="{{#",  # bash's ${#array[@]} would otherwise open a Jinja comment
        comment_end_string="#}}",
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.globals["master_port"] = master_port_shell
    template = env.get_template(f"{job.scheduler}.sh.j2")
    return template.render(job=job, scheduler=adapter(job.scheduler), requeue_exit=exit_codes.REQUEUE,
                           forward_patterns="|".join(FORWARDED + sorted(job.env)))

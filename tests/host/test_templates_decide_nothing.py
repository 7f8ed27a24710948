"""The job-script templates write a finished request and decide nothing: every choice between scheduler spellings,
every number computed, is the adapter's (cluster_train/host/schedulers/*.py), where a unit test reaches it. A template's
`{% if %}` only tests that one finished value is there."""
from pathlib import Path
from typing import List

import jinja2.lexer
import pytest

from cluster_train.host.jobs.render import environment
from cluster_train.host.schedulers import SHARED_TEMPLATES

TEMPLATES = sorted(Path(SHARED_TEMPLATES).glob("*.j2"))
# Jinja's lexer names: comparisons, arithmetic, concatenation, subscripts and slices
OPERATORS = {"eq", "ne", "lt", "lteq", "gt", "gteq", "add", "sub", "mul", "div", "floordiv", "mod", "pow", "tilde",
             "lbracket"}
# tests (`is none`), combined conditions, inline if/else, variables set in the template, and string or number work
NAMES = {"is", "and", "or", "in", "if", "else", "elif", "set", "startswith", "endswith", "replace", "round", "int",
         "float", "string", "format", "split", "strip", "lower", "upper", "abs", "min", "max", "sum"}
BLOCKS = {"if", "for", "include", "else", "endif", "endfor"}


def decisions(source: str) -> List[str]:
    """Each Jinja tag of `source` that computes or chooses, as `line N: the tag's tokens`."""
    found, tag = [], []
    for line, kind, value in environment().lex(source):
        if kind in ("block_begin", "variable_begin"):
            tag = [kind]
        elif kind in ("block_end", "variable_end"):
            if deciding(tag):
                found.append(f"line {line}: {' '.join(str(word) for word in tag[1:])}")
        elif tag and kind != "whitespace":
            tag.append(value if kind != "operator" else kind_of(value))
    return found


def kind_of(operator: str) -> str:
    return jinja2.lexer.operators[operator]  # "==" -> "eq"


def deciding(tag: List[str]) -> bool:
    kind, words = tag[0], tag[1:]
    if kind == "block_begin":
        head, rest = words[0], words[1:]
        if head not in BLOCKS:
            return True
        if head == "for":  # `for NAME[, NAME] in VALUE`: the loop's own `in`
            rest = rest[rest.index("in") + 1:]
        words = rest
    return any(word in OPERATORS or word in NAMES for word in words)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda path: path.name)
def test_a_template_makes_no_decision(template):
    assert decisions(template.read_text()) == []


@pytest.mark.parametrize("text", [
    '{% if job.gpu_request == "typed" %}x{% endif %}', "{{ job.max_requeues + 1 }}",
    "{% if job.a and job.b %}{% endif %}",
    '{{ job.log_path[:-4] }}', "{% if job.mem_gb is not none %}{% endif %}", "{{ (job.mem_gb / 2) | round(1) }}",
    '{% set gpus = job.gpu_type ~ ":" %}', '{{ " " if not loop.last }}', "{% elif job.whole_node %}",
    '{% if job.gpu_request.startswith("typed") %}{% endif %}',
])
def test_the_scan_finds_each_kind_of_decision(text):
    assert decisions(text), text


def test_the_scan_lets_finished_values_through():
    text = ('{% for option in scheduler.directives(job) %}#SBATCH {{ option }}\n{% endfor %}{% if not job.tasks %}'
            '{{ job.run_dir | q }}{% else %}{{ job.tasks | map(attribute="results_path") | join(" ") }}{% endif %}'
            '{% for name, value in job.env | dictsort %}{{ name }}{% endfor %}{% include "_preamble.sh.j2" %}')
    assert decisions(text) == []

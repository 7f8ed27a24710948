"""The docs test's extraction and mode rule (tests/docs_blocks.py) on small pages, and the real pages' blocks checked
against the convention (bash fences, marks with reasons): no cluster, no image."""
import pytest
from docs_blocks import PLACEHOLDERS, collect, counts, extract, fill, mode, problems, runnable, with_dry_run

from cluster_train.host.commands import BY_NAME

COMMANDS = tuple(BY_NAME)
PAGE = """# A page

```bash
bin/run-cluster status runs/<id>
```

<!-- docs-test: not-run: installs on the login node of a real cluster -->
```bash
module load apptainer
```

1. In a list:

   ~~~bash
   bin/run-cluster gilbreth single_node_4gpu demo
   ~~~

```text
job 1 COMPLETED
```

<!--docs-test: not-run:   -->
```bash
ssh login.example.edu
```
"""


def test_every_fence_is_found_with_its_line_language_and_mark():
    blocks, indented = extract(PAGE, "docs/page.md")
    assert [(b.line, b.info, b.mark is not None) for b in blocks] == [
        (3, "bash", False), (8, "bash", True), (14, "bash", False), (18, "text", False), (23, "bash", True)]
    assert blocks[2].text == "bin/run-cluster gilbreth single_node_4gpu demo\n"  # the list's indent is gone
    assert blocks[0].where == "docs/page.md:3" and indented == []
    assert [b.line for b in runnable(blocks)] == [3, 14]


def test_marks_are_counted_and_a_mark_without_a_reason_is_refused():
    blocks, _ = extract(PAGE, "docs/page.md")
    assert counts(blocks, COMMANDS) == {"real": 1, "dry-run": 1, "not-run": 2}
    assert problems(blocks, {}) == [
        "docs/page.md:23: the mark '<!--docs-test: not-run:   -->' gives no reason; write <!-- docs-test: not-run: "
        "REASON --> saying why this block can neither run nor dry-run here"]


@pytest.mark.parametrize("text, problem", [
    ("```console\n$ make demo\n```\n", "docs/p.md:1: a ```console block is never run by the docs test"),
    ("```sh\nmake demo\n```\n", "docs/p.md:1: a ```sh block is never run"),
    ("Run:\n\n    bin/run-cluster names\n", "docs/p.md:3: an indented code block that starts like a command"),
    ("<!-- docs-test: not-run: why -->\n```yaml\na: 1\n```\n", "docs/p.md:2: a docs-test mark above a ```yaml"),
    ("<!-- docs-test: skip: slow -->\n```bash\nmake test\n```\n", "docs/p.md:2: the mark '<!-- docs-test: skip"),
])
def test_what_would_escape_the_test_is_refused_by_page_and_line(text, problem):
    blocks, indented = extract(text, "docs/p.md")
    (found,) = problems(blocks, {"docs/p.md": indented})
    assert found.startswith(problem), found


def test_a_list_item_indented_as_text_is_not_taken_for_code():
    blocks, indented = extract("- one\n\n    more about make in the list item\n", "docs/p.md")
    assert blocks == [] and indented == []


@pytest.mark.parametrize("line, expected", [
    ("bin/run-cluster gilbreth single_node_4gpu demo --set trainer.max_epochs=2",
     "bin/run-cluster --dry-run gilbreth single_node_4gpu demo --set trainer.max_epochs=2"),
    ("bin/run-cluster ci-slurm n1_gpu1 -- python train.py --epochs 2",  # before the user's command's --
     "bin/run-cluster --dry-run ci-slurm n1_gpu1 -- python train.py --epochs 2"),
    ("bin/run-cluster --rerun runs/x", "bin/run-cluster --dry-run --rerun runs/x"),
    ("bin/run-cluster --first-to-start gilbreth:a torch-hpc:b demo",  # a race across clusters
     "bin/run-cluster --dry-run --first-to-start gilbreth:a torch-hpc:b demo"),
    ("bin/run-cluster resume runs/x --set trainer.max_epochs=8", "bin/run-cluster resume --dry-run runs/x --set "
                                                                 "trainer.max_epochs=8"),
    ("cd ~/p && bin/run-cluster dtu default \\\n    --set a=1  # a comment", "cd ~/p && bin/run-cluster --dry-run dtu "
                                                                           "default \\\n    --set a=1  # a comment"),
    ("cd examples/p && ../../bin/run-cluster gilbreth n1 -- python train.py",
     "cd examples/p && ../../bin/run-cluster --dry-run gilbreth n1 -- python train.py"),
    ("bin/run-cluster doctor ci-slurm --node n2_gpu2", "bin/run-cluster doctor --dry-run ci-slurm --node n2_gpu2"),
    ("bin/run-cluster doctor ci-slurm", None),
    ("bin/run-cluster gilbreth single_node_4gpu --dry-run", None),  # dry already: run as written
    ("bin/run-cluster status runs/x && bin/run-cluster logs runs/x | tail -3", None),
    ('eval "$(bin/run-cluster completion bash)"', None),
    ("bin/run-cluster --help", None),
    ("bin/run-cluster gilbreth --help", None),
    ("bin/run-cluster images list  # every image, run against dtu", None),
])
def test_a_command_that_would_queue_a_job_gets_dry_run_and_no_other(line, expected):
    script, added = with_dry_run(line, COMMANDS)
    assert (script if added else None) == expected
    assert mode(extract(f"```bash\n{line}\n```\n", "p.md")[0][0], COMMANDS) == ("dry-run" if expected else "real")


def test_placeholders_take_their_values_and_an_unknown_one_is_refused_by_name():
    blocks, _ = extract("```bash\nbin/run-cluster compare runs/<id> runs/<id2> > diff.txt\n```\n"
                        "```bash\nbin/run-cluster status runs/<sweep-id>\n```\n", "docs/p.md")
    assert fill(blocks[0], {"<id>": "a", "<id2>": "b"}) == "bin/run-cluster compare runs/a runs/b > diff.txt\n"
    with pytest.raises(ValueError, match=r"^docs/p.md:4: <sweep-id> has no value in the docs test \(it knows <id>, "):
        fill(blocks[1], dict.fromkeys(PLACEHOLDERS, "x"))


def test_pages_are_the_readme_and_every_page_under_docs(tmp_path):
    (tmp_path / "docs" / "how-to").mkdir(parents=True)
    (tmp_path / "README.md").write_text("```bash\nmake demo\n```\n")
    (tmp_path / "docs" / "how-to" / "x.md").write_text("```bash\nbin/run-cluster names\n```\n```python\nx\n```\n")
    blocks, found = collect(tmp_path)
    assert [(b.where, b.info) for b in blocks] == [("README.md:1", "bash"), ("docs/how-to/x.md:1", "bash"),
                                                   ("docs/how-to/x.md:4", "python")]
    assert found == []


def test_every_command_of_the_readme_and_docs_is_in_a_bash_block_and_every_mark_says_why():
    blocks, found = collect()
    assert found == [], "\n".join(found)
    assert runnable(blocks), "no unmarked ```bash block in README.md or docs/: the docs test would run nothing"

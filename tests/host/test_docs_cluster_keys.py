"""The add-cluster page shows the cluster file as the schema reads it (issue 55 item 16): its table of keys wrote
"`slingshot`: `nccl_plugin` ..." as if the Slingshot paths were keys under a `slingshot:` key, where they are the
partition's own, beside `fabric: slingshot`. Every key the table names is a key of the level its row names, and
every ```yaml block of the page reads as (part of) a cluster file."""
import dataclasses
import re

import pytest
import yaml
from docs_blocks import extract

from conftest import ROOT
from cluster_train.host import clusters

PAGE = "docs/how-to/add-cluster.md"
ROW = re.compile(r"^\| (?P<where>cluster|partition|profile|cluster, profile) \| (?P<keys>[^|]+) \|", re.M)
LEVELS = {"cluster": {f.name for f in dataclasses.fields(clusters.Cluster)} | {"apptainer", "pipelines"},
          "partition": {f.name for f in dataclasses.fields(clusters.Partition)} - {"name"},
          "profile": {f.name for f in dataclasses.fields(clusters.Profile)} - {"name"}}


def keys_named(cell: str) -> list:
    """The keys a table cell names, read as a reader does: `key`, or `key: value` (then a bare word after it is one
    more of its values: `fabric: infiniband`, `slingshot`); after "`key`:" the rest are its values. What is in
    parentheses explains, it names no key."""
    depth, flat = 0, ""
    for char in cell:
        depth += {"(": 1, ")": -1}.get(char, 0)
        flat += char if depth == 0 and char not in "()" else ""
    found, after_value = [], False
    for token in re.finditer(r"`([^`]+)`(:?)", flat):
        word, listed = token.group(1), token.group(2)
        if ":" in word:
            found.append(word.split(":")[0].strip())
            after_value = True
        elif not after_value:
            found.append(word)
        if listed:
            break
    return found


def test_every_key_the_table_names_is_a_key_of_its_level():
    rows = ROW.findall((ROOT / PAGE).read_text())
    assert len(rows) > 20, rows  # the table is still there, in this form
    wrong = [f"{where}: {key}" for where, cell in rows for key in keys_named(cell)
             for level in where.split(", ") if key not in LEVELS[level]]
    assert wrong == []


def test_the_reading_of_a_cell():
    assert keys_named("`fabric: infiniband`, `slingshot` (or `ethernet`)") == ["fabric"]
    assert keys_named("`gpu_request`: `count`, `typed`") == ["gpu_request"]
    assert keys_named("`images` (the `x` store), `require_signed: true`, `signers: [F]`") == [
        "images", "require_signed", "signers"]


def without_elisions(value):
    """A block's `...` (the rest of an entry left out) dropped."""
    if isinstance(value, dict):
        return {k: without_elisions(v) for k, v in value.items() if k != "..."}
    return value


@pytest.mark.parametrize("block", [b for b in extract((ROOT / PAGE).read_text(), PAGE)[0] if b.info == "yaml"],
                         ids=lambda block: block.where)
def test_every_yaml_block_of_the_page_reads_as_a_cluster_file(block, tmp_path):
    shown = without_elisions(yaml.safe_load(block.text))
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump({"name": "docs", "scheduler": "slurm", "profiles": {"p": {}}, **shown}))
    clusters.load(path)  # a key the schema does not have, or a value it refuses, raises here naming it

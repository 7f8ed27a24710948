"""Data for your own code (issue 56 item 4), on the host: --data DIR (or data: {root: DIR}) is bound read-only at the
same path with CT_DATA_ROOT for a command; its digest (cluster_train/host/data/directory.py) goes into the manifest
and --rerun refuses, in one line and before anything is queued, data that changed since; the summary names what the
snapshot left out because git ignores it. The job itself reading the bind: tests/cluster/test_own_code_data_job.py."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import run_cluster
from host.test_preflight import refused

from cluster_train.host.data import directory
from cluster_train.host.jobs.build import Request, Site, build
from cluster_train.host.runs import queue


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def project(tmp_path, ignore="", files=None):
    """A user's git project: train.py committed, `files` written beside it (and ignored where .gitignore says)."""
    code = tmp_path / "proj"
    code.mkdir(parents=True)
    (code / "train.py").write_text("print('training')\n")
    (code / ".gitignore").write_text(ignore)
    git(code, "init", "-q")
    git(code, "add", ".")
    git(code, "commit", "-qm", "init")
    for name, size in (files or {}).items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_bytes(b"x" * size)
    return code


def data_dir(tmp_path, text="abc\n"):
    root = tmp_path / "mydata"
    (root / "sub").mkdir(parents=True)
    (root / "input.txt").write_text(text)
    (root / "sub" / "train.bin").write_bytes(bytes(range(256)))
    return root


def dry_run(code, *args):
    done = run_cluster("local", "cpu_1proc", "--dry-run", *args, "--", "python", "train.py", cwd=code)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_data_is_bound_read_only_at_its_path_with_ct_data_root_for_a_command(store, tmp_path):
    code, root = project(tmp_path), data_dir(tmp_path)
    out = dry_run(code, "--data", "../mydata")  # relative to where it is typed
    assert f"-B {root}:{root}:ro " in out and f"export CT_DATA_ROOT={root}\n" in out
    assert f"data: {root} bound read-only at the same path ($CT_DATA_ROOT), 2 file(s)" in out
    (code / "experiment.yaml").write_text(json.dumps({"command": ["python", "train.py"], "code": ".",
                                                      "data": {"root": "../mydata"}}))  # relative to the file
    done = run_cluster("local", "cpu_1proc", str(code / "experiment.yaml"), "--dry-run")
    assert done.returncode == 0 and f"export CT_DATA_ROOT={root}\n" in done.stdout, done.stderr
    assert "CT_DATA_ROOT" not in dry_run(code)  # no data named: none bound, none said
    odd = tmp_path / "my $HOME data"  # a $ in the path is text: the job's shell expands nothing of it
    odd.mkdir()
    line = next(x for x in dry_run(code, "--data", str(odd)).splitlines() if x.startswith("export CT_DATA_ROOT="))
    said = subprocess.run(["bash", "-c", f'{line}; printf %s "$CT_DATA_ROOT"'], capture_output=True, text=True)
    assert said.stdout == str(odd)
    said = refused(run_cluster("local", "cpu_1proc", "--dry-run", "--data", "nope", "--", "python", "train.py",
                               cwd=code), f"data.root: {code}/nope does not exist; fix --data DIR")
    assert len(said.strip().splitlines()) == 1
    refused(run_cluster("local", "cpu_1proc", "--dry-run", "--data", str(root), "--set", "data.root=/x", "--",
                        "python", "train.py", cwd=code),
            f"--data {root} and --set data.root=/x both name the data directory; keep one")


def test_the_digest_hashes_small_data_and_lists_large_data(tmp_path, monkeypatch):
    root = data_dir(tmp_path)
    first = directory.record(str(root))
    assert (first["method"], first["files"], first["bytes"]) == ("content", 2, 4 + 256)
    stat = (root / "input.txt").stat()
    (root / "input.txt").write_text("abd\n")  # same size, same times: only the content tells
    os.utime(root / "input.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    directory._HASHED.clear()  # one process hashes one listing once (a sweep's elements); a rerun's check anew
    assert directory.record(str(root))["digest"] != first["digest"]
    monkeypatch.setattr(directory, "CONTENT_MAX_BYTES", 100)  # past it: path, size and mtime only (git-annex WORM)
    listed = directory.record(str(root))
    assert listed["method"] == "listing"
    (root / "input.txt").write_text("abc\n")
    os.utime(root / "input.txt", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert directory.record(str(root))["digest"] == listed["digest"]  # the documented blind spot
    (root / "input.txt").touch()
    assert directory.record(str(root))["digest"] != listed["digest"]
    monkeypatch.setattr(directory, "LIST_MAX_FILES", 1)
    assert directory.record(str(root))["method"] == "none" and directory.now(directory.record(str(root))) is None


def recorded_run(store, code, root, monkeypatch) -> Path:
    """A command run written as a submission writes it (run directory, snapshot, manifest), never queued."""
    monkeypatch.chdir(code)
    sub = build(Site.load("local"), Request("cpu_1proc", None, [f"data.root={root}"], run_id="r",
                                            command=["python", "train.py"]))
    queue.write_run(sub)
    queue.write_manifest(sub, "1")
    return store / "runs" / "r"


def test_the_manifest_records_the_digest_and_rerun_refuses_changed_data(store, tmp_path, monkeypatch):
    code, root = project(tmp_path), data_dir(tmp_path)
    run_dir = recorded_run(store, code, root, monkeypatch)
    data = json.loads((run_dir / "manifest.json").read_text())["data"]
    assert data == {"kind": "directory", "root": str(root), "method": "content", "files": 2, "bytes": 260,
                    "digest": directory.record(str(root))["digest"]}
    done = run_cluster("--rerun", run_dir, "--dry-run")
    assert done.returncode == 0 and f"data: {root} bound read-only" in done.stdout, done.stderr
    (root / "input.txt").write_text("abd\n")  # as long as before: hashed to tell
    said = refused(run_cluster("--rerun", run_dir, "--dry-run"),
                   f"--rerun {run_dir}: the data directory {root} changed since the run read it (content sha256 "
                   f"{directory.record(str(root))['digest'][:12]} now, content sha256 {data['digest'][:12]} then); "
                   f"restore it, or rerun with --data {root}")
    assert len(said.strip().splitlines()) == 1
    (root / "sub" / "train.bin").unlink()
    refused(run_cluster("--rerun", run_dir), "(other files or sizes now")  # not hashed: the listing tells
    done = run_cluster("--rerun", run_dir, "--data", str(root), "--dry-run")  # the data as it is now, by choice
    assert done.returncode == 0 and f"data: {root} bound read-only at the same path ($CT_DATA_ROOT), 1 file(s)" \
        in done.stdout, done.stderr
    assert sorted(p.name for p in (store / "runs").iterdir()) == ["r"]  # nothing queued


def test_the_summary_lists_what_git_ignores_and_the_bind_that_brings_it(store, tmp_path):
    code = project(tmp_path, "*.bin\ndata/\n.venv/\n__pycache__/\n",
                   {"data/shakespeare/train.bin": 3 * 2**20, "data/shakespeare/val.bin": 2**20,
                    "data/shakespeare/meta.pkl": 10, "data/input.txt": 5, ".venv/lib/x.py": 1,
                    "__pycache__/train.cpython-311.pyc": 1})
    out = dry_run(code)
    assert (f"left out of the code snapshot (git ignores them): 4 file(s), 4.0 MiB: data/shakespeare/train.bin "
            f"(3.0 MiB), data/shakespeare/val.bin (1.0 MiB), data/shakespeare/meta.pkl (0.0 MiB), and 1 more; your "
            f"command sees them only through a read-only bind: --data {code}/data (then $CT_DATA_ROOT)\n") in out
    out = dry_run(code, "--data", "data/shakespeare")  # bound: no longer left out
    assert "left out of the code snapshot (git ignores them): 1 file(s), 0.0 MiB: data/input.txt (0.0 MiB); " \
           f"your command sees them only through a read-only bind: --data {code}/data " in out
    clean = project(tmp_path / "clean", ".venv/\n", {".venv/lib/x.py": 1})  # what is never code is not named
    assert "left out of the code snapshot" not in dry_run(clean)  # quiet where nothing is left out

"""What a GPU job checks where it runs (issue 13): the node's NVIDIA driver against the image's CUDA before
`apptainer exec` (a fake nvidia-smi on the test Slurm cluster's nodes), and, on partitions whose nodes talk
InfiniBand, NCCL's own log for the transport it used (real NCCL log lines of both transports)."""
import os
import subprocess

import pytest
import yaml

from conftest import ROOT, job_logs, manifest, run_cluster, wait_for_slurm_job
from test_image_commands import build_sif, images_command

# NCCL 2.x INFO lines as ranks print them: the network plugin's choice at init, then each channel's transport.
IB_LINES = ["gpu-a012:81234:81234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.4.12<0>",
            "gpu-a012:81234:81301 [0] NCCL INFO Using network IB",
            "gpu-a012:81234:81301 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0"]
SOCKET_LINES = ["gpu-a013:7712:7712 [0] NCCL INFO NET/IB : No device found.",
                "gpu-a013:7712:7712 [0] NCCL INFO NET/Socket : Using [0]eth0:10.2.0.13<0>",
                "gpu-a013:7712:7790 [0] NCCL INFO Using network Socket",
                "gpu-a013:7712:7790 [0] NCCL INFO Channel 00/0 : 4[0] -> 0[0] [send] via NET/Socket/0"]


def write_logs(run_dir, **hosts):
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    for host, lines in hosts.items():
        (run_dir / "logs" / f"nccl-{host}-1.log").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("hosts, expected", [
    ({"a012": IB_LINES, "a014": IB_LINES}, None),
    ({"a012": IB_LINES, "a013": SOCKET_LINES}, "WARNING"),  # one node on sockets slows every all-reduce
    ({"a013": SOCKET_LINES[1:2]}, "WARNING"),
    ({"a012": ["gpu-a012:1:1 [0] NCCL INFO cudaDriverVersion 12040"]}, "UNKNOWN"),
    ({}, None),  # no rank has started NCCL yet
])
def test_the_fabric_verdict_reads_nccl_log_lines_of_both_transports(tmp_path, hosts, expected):
    from train.host import fabric

    write_logs(tmp_path, **hosts)
    assert fabric.verdict(tmp_path) == (getattr(fabric, expected) if expected else None)
    assert fabric.transport(IB_LINES) == "ib" and fabric.transport(IB_LINES + SOCKET_LINES) == "socket"


@pytest.fixture
def gilbreth_4_nodes(tmp_path, monkeypatch):
    """gilbreth's multi-node profile (fabric: infiniband) rendered by --dry-run."""
    (tmp_path / "settings.yaml").write_text("account: lab\n")
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))
    done = run_cluster("gilbreth", "multi_node_4x1", "demo", "--dry-run", "--run-id", "ib")
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_job_warns_loudly_when_nccl_fell_back_to_sockets(gilbreth_4_nodes, tmp_path):
    script = gilbreth_4_nodes
    assert "export NCCL_DEBUG_FILE=" in script and "ct_fabric_check\n" in script
    check = script[script.index("ct_fabric_check() {"):]
    check = check[:check.index("\n}\n") + 3]
    for hosts, said in [({"a012": IB_LINES}, ""), ({"a012": IB_LINES, "a013": SOCKET_LINES}, "WARNING: NCCL fell back"),
                        ({"a012": ["NCCL INFO Bootstrap : Using ib0"]}, "InfiniBand is not confirmed")]:
        run_dir = tmp_path / f"run{len(said)}"
        write_logs(run_dir, **hosts)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", check + "ct_fabric_check"], capture_output=True,
                              text=True, env={**os.environ, "RUN_DIR": str(run_dir)})
        assert done.returncode == 0 and said in done.stderr and (said or not done.stderr), done.stderr


def test_status_repeats_the_fabric_warning(tmp_path, capsys):
    import json

    from train.host.runs import commands
    from train.host.schedulers import adapter

    write_logs(tmp_path, a012=IB_LINES, a013=SOCKET_LINES)
    recorded = {"run_id": "r", "cluster_file": "gilbreth", "profile": "multi_node_4x1", "image": {"sha256": "ab"},
                "scheduler": {"name": "local", "job_id": "1"}, "job": {"check_fabric": True}}
    (tmp_path / "manifest.json").write_text(json.dumps(recorded))
    commands.print_status(recorded, adapter("local"), tmp_path)
    assert "WARNING: NCCL fell back to TCP sockets" in capsys.readouterr().out


def cuda_site(tmp_path, driver=None):
    """ci-slurm whose `ci` partition is meant for the cuda12.8 image (its GPUs are the test cluster's fake ones)."""
    site = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    site["partitions"]["ci"]["image"] = "cuda12.8"
    if driver:
        site["partitions"]["ci"]["driver"] = driver
    (tmp_path / "cuda-site.yaml").write_text(yaml.safe_dump(site, sort_keys=False))
    return tmp_path / "cuda-site.yaml"


def test_a_stated_driver_new_enough_for_the_image_passes_preflight(tmp_path, monkeypatch):
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "store"))
    done = run_cluster(cuda_site(tmp_path, driver="550.54.15"), "n1_gpu1", "demo", "--dry-run")
    assert done.returncode == 0 and "CT_NEED_DRIVER=525.60.13" in done.stdout, done.stderr
    old = run_cluster(cuda_site(tmp_path, driver="470.82.01"), "n1_gpu1", "demo", "--dry-run")
    assert old.returncode == 2 and "driver 470.82.01, older than the 525.60.13" in old.stderr, old.stderr


@pytest.mark.slurm
def test_the_job_ends_before_apptainer_exec_on_a_node_whose_driver_is_too_old(slurm_cluster, demo_data, runs_dir,
                                                                            tmp_path, monkeypatch):
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "store"))
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    labels = "    org.cluster-train.flavor cuda12.8\n    org.cluster-train.git-commit c0ffee\n"
    assert images_command("import", build_sif(tmp_path / "cuda12.8.sif", labels=labels)).returncode == 0
    fake_nvidia_smi(tmp_path, monkeypatch, "echo 470.82.01")  # a CUDA 11 era driver
    done = run_cluster(cuda_site(tmp_path), "n1_gpu1", "demo", "--set", f"data.root={demo_data}", "--run-id", "old",
                       "--no-wait")
    assert done.returncode == 0, done.stderr
    assert wait_for_slurm_job(manifest(runs_dir / "old")["scheduler"]["job_id"]) == "FAILED"
    log = job_logs(runs_dir / "old")
    assert "the NVIDIA driver on " in log and "is 470.82.01, older than the 525.60.13" in log, log
    assert "[cluster-train] job " not in log  # no step, no apptainer exec


@pytest.mark.slurm
def test_every_node_of_a_multi_node_job_checks_its_own_driver(slurm_cluster, demo_data, runs_dir, tmp_path,
                                                              monkeypatch):
    """The batch host (node 0) has a new driver, the second node an old one: its task ends before apptainer exec."""
    monkeypatch.setenv("CT_IMAGES", str(tmp_path / "store"))
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    labels = "    org.cluster-train.flavor cuda12.8\n    org.cluster-train.git-commit c0ffee\n"
    assert images_command("import", build_sif(tmp_path / "cuda12.8.sif", labels=labels)).returncode == 0
    fake_nvidia_smi(tmp_path, monkeypatch, '[ "${SLURM_NODEID:-0}" = 1 ] && echo 470.82.01 || echo 550.54.15')
    done = run_cluster(cuda_site(tmp_path), "n2_gpu1", "demo", "--set", f"data.root={demo_data}", "--run-id", "mixed",
                       "--no-wait")
    assert done.returncode == 0, done.stderr
    assert wait_for_slurm_job(manifest(runs_dir / "mixed")["scheduler"]["job_id"]) == "FAILED"
    log = job_logs(runs_dir / "mixed")
    # once: the second node's task (its first node's task and the batch host passed)
    assert log.count("is 470.82.01, older than the 525.60.13") == 1, log


def fake_nvidia_smi(tmp_path, monkeypatch, body: str) -> None:
    """`nvidia-smi --query-gpu=driver_version` on the test cluster's nodes (sbatch passes PATH to the job)."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")

"""What a GPU job checks where it runs (issue 13): the node's NVIDIA driver against the image's CUDA before
`apptainer exec` (a fake nvidia-smi on the test Slurm cluster's nodes), and, on partitions whose nodes talk
InfiniBand or HPE Slingshot, NCCL's own log for the transport it used (real NCCL and aws-ofi-nccl log lines of
the fast network and of the socket fallback). On Slingshot the job also binds the host's NCCL plugin and
libfabric into the container (issue 26)."""
import json
import os
import subprocess

import pytest
import yaml

from conftest import ROOT, job_logs, manifest, run_cluster, wait_for_slurm_job
from host.test_image_commands import build_sif, images_command

# NCCL 2.x INFO lines as ranks print them: the network plugin's choice at init, then each channel's transport.
IB_LINES = ["gpu-a012:81234:81234 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.4.12<0>",
            "gpu-a012:81234:81301 [0] NCCL INFO Using network IB",
            "gpu-a012:81234:81301 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/IB/0"]
SOCKET_LINES = ["gpu-a013:7712:7712 [0] NCCL INFO NET/IB : No device found.",
                "gpu-a013:7712:7712 [0] NCCL INFO NET/Socket : Using [0]eth0:10.2.0.13<0>",
                "gpu-a013:7712:7790 [0] NCCL INFO Using network Socket",
                "gpu-a013:7712:7790 [0] NCCL INFO Channel 00/0 : 4[0] -> 0[0] [send] via NET/Socket/0"]
# On Slingshot: NCCL loads the aws-ofi-nccl plugin, which logs through NCCL with "NET/OFI" (src/nccl_ofi_net.cpp),
# and NCCL names the plugin's network (NCCL_NET="AWS Libfabric" keeps that name on plugins from 1.12 on).
OFI_LINES = ["nid001234:51234:51234 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v8)",
             "nid001234:51234:51234 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.0",
             "nid001234:51234:51234 [0] NCCL INFO NET/OFI Using Libfabric version 1.22",
             "nid001234:51234:51234 [0] NCCL INFO NET/OFI Selected provider is cxi, fabric is cxi (found 4 nics)",
             "nid001234:51234:51301 [0] NCCL INFO Using network AWS Libfabric",
             "nid001234:51234:51301 [0] NCCL INFO Channel 00/0 : 0[0] -> 4[0] [send] via NET/AWS Libfabric/0/GDRDMA"]
NEW_PLUGIN_LINES = ["nid001234:51234:51234 [0] NCCL INFO NET/OFI Selected provider is cxi, "
                    "fabric is cxi (found 4 nics)",
                    "nid001234:51234:51301 [0] NCCL INFO Using network Libfabric"]  # aws-ofi-nccl 1.12+, NCCL_NET unset
# ... and without the plugin in the container (NCCL_NET unset): NCCL finds no libnccl-net.so, no IB, uses sockets.
OFI_FALLBACK_LINES = ["nid001235:7712:7712 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.",
                      "nid001235:7712:7712 [0] NCCL INFO NET/IB : No device found.",
                      "nid001235:7712:7712 [0] NCCL INFO NET/Socket : Using "
                      "[0]hsn0:10.249.2.35<0> [1]hsn1:10.249.2.36<0>",
                      "nid001235:7712:7790 [0] NCCL INFO Using network Socket",
                      "nid001235:7712:7790 [0] NCCL INFO Channel 00/0 : 4[0] -> 0[0] [send] via NET/Socket/0"]
# ... or the plugin over a libfabric without cxi: its TCP provider, sockets under another name
OFI_TCP_LINES = ["nid001235:7712:7712 [0] NCCL INFO NET/OFI Selected provider is tcp;ofi_rxm, fabric is "
                 "10.249.0.0/16 (found 1 nics)",
                 "nid001235:7712:7790 [0] NCCL INFO Using network AWS Libfabric"]
NO_NETWORK = ["nid001234:1:1 [0] NCCL INFO cudaDriverVersion 12040"]


def write_logs(run_dir, **hosts):
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    for host, lines in hosts.items():
        (run_dir / "logs" / f"nccl-{host}-1.log").write_text("\n".join(lines) + "\n")


# (fabric, the logs of each host, what the verdict is: None, or the name of the warning in cluster_train/host/fabric.py)
VERDICTS = [
    ("infiniband", {"a012": IB_LINES, "a014": IB_LINES}, None),
    ("infiniband", {"a012": IB_LINES, "a013": SOCKET_LINES}, "WARNING"),  # one node on sockets slows every all-reduce
    ("infiniband", {"a013": SOCKET_LINES[1:2]}, "WARNING"),
    ("infiniband", {"a012": NO_NETWORK}, "UNKNOWN"),
    ("infiniband", {}, None),  # no rank has started NCCL yet
    ("slingshot", {"n34": OFI_LINES, "n35": OFI_LINES}, None),
    ("slingshot", {"n34": NEW_PLUGIN_LINES}, None),
    ("slingshot", {"n34": OFI_LINES, "n35": OFI_FALLBACK_LINES}, "SLINGSHOT_WARNING"),
    ("slingshot", {"n35": OFI_TCP_LINES}, "SLINGSHOT_WARNING"),
    ("slingshot", {"n34": IB_LINES}, "SLINGSHOT_UNKNOWN"),  # IB is not what this partition has
    ("slingshot", {"n34": NO_NETWORK}, "SLINGSHOT_UNKNOWN"),
    ("slingshot", {}, None),
]


@pytest.mark.parametrize("net, hosts, expected", VERDICTS)
def test_the_fabric_verdict_reads_nccl_log_lines_of_both_transports(tmp_path, net, hosts, expected):
    from cluster_train.host import fabric

    write_logs(tmp_path, **hosts)
    assert fabric.verdict(tmp_path, net) == (getattr(fabric, expected) if expected else None)
    assert fabric.transport(IB_LINES) == "ib" and fabric.transport(IB_LINES + SOCKET_LINES) == "socket"
    assert fabric.transport(OFI_LINES, "slingshot") == "ofi"
    assert fabric.transport(OFI_LINES + OFI_FALLBACK_LINES, "slingshot") == "socket"


@pytest.fixture
def dry_run(tmp_path, monkeypatch):
    """A profile rendered by --dry-run: (cluster, profile) -> the output."""
    (tmp_path / "settings.yaml").write_text("clusters:\n  gilbreth: {account: lab}\n  perlmutter: {account: m1}\n")
    monkeypatch.setenv("CT_SETTINGS", str(tmp_path / "settings.yaml"))
    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))

    def render(cluster, profile, *more):
        done = run_cluster(cluster, profile, "demo", "--dry-run", "--run-id", f"{profile}-dry", *more)
        assert done.returncode == 0, done.stderr
        return done.stdout
    return render


# gilbreth's multi-node profile (fabric: infiniband) and perlmutter's (fabric: slingshot): the script's own check
# (InfiniBand's text unchanged), and the NCCL logs of a good and a fallen-back run
FABRIC_JOBS = [("gilbreth", "multi_node_4x1", IB_LINES, SOCKET_LINES, "WARNING: NCCL fell back to TCP sockets "
                "between the nodes instead of InfiniBand", "InfiniBand is not confirmed"),
               ("perlmutter", "regular_4nodes", OFI_LINES, OFI_FALLBACK_LINES, "WARNING: NCCL fell back to TCP "
                "sockets between the nodes instead of HPE Slingshot",
                "HPE Slingshot (aws-ofi-nccl over cxi) is not confirmed")]


@pytest.mark.parametrize("cluster, profile, good, fallback, warning, unknown", FABRIC_JOBS)
def test_the_job_warns_loudly_when_nccl_fell_back_to_sockets(dry_run, tmp_path, cluster, profile, good, fallback,
                                                             warning, unknown):
    script = dry_run(cluster, profile)
    assert "export NCCL_DEBUG_FILE=" in script and "ct_fabric_check\n" in script
    check = script[script.index("ct_fabric_check() {"):]
    check = check[:check.index("\n}\n") + 3]
    for hosts, said in [({"a012": good}, ""), ({"a012": good, "a013": fallback}, warning),
                        ({"a012": ["NCCL INFO Bootstrap : Using ib0"]}, unknown)]:
        run_dir = tmp_path / f"run{len(said)}"
        write_logs(run_dir, **hosts)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", check + "ct_fabric_check"], capture_output=True,
                              text=True, env={**os.environ, "RUN_DIR": str(run_dir)})
        assert done.returncode == 0 and said in done.stderr and (said or not done.stderr), done.stderr
        assert len(done.stderr.splitlines()) == (1 if said else 0), done.stderr


@pytest.mark.parametrize("net, hosts, said", [
    ("infiniband", {"a012": IB_LINES, "a013": SOCKET_LINES}, "instead of InfiniBand"),
    ("", {"a012": IB_LINES, "a013": SOCKET_LINES}, "instead of InfiniBand"),  # a run recorded before fabric: was
    ("infiniband", {"a012": IB_LINES}, None),
    ("slingshot", {"n34": OFI_LINES, "n35": OFI_FALLBACK_LINES}, "instead of HPE Slingshot"),
    ("slingshot", {"n34": OFI_LINES, "n35": OFI_LINES}, None),
])
def test_status_repeats_the_fabric_warning(tmp_path, capsys, net, hosts, said):
    from cluster_train.host.views import commands
    from cluster_train.host.schedulers import adapter
    from cluster_train.host.runs.manifest import Manifest

    write_logs(tmp_path, **hosts)
    job = {"check_fabric": True, **({"fabric": net} if net else {})}
    recorded = {"run_id": "r", "cluster_file": "c", "profile": "p", "image": {"sha256": "ab"},
                "scheduler": {"name": "local", "job_id": "1"}, "job": job}
    (tmp_path / "manifest.json").write_text(json.dumps(recorded))
    commands.print_status(Manifest(recorded), adapter("local"), tmp_path)
    warnings = [line for line in capsys.readouterr().out.splitlines() if "WARNING" in line]
    assert len(warnings) == (1 if said else 0), warnings
    assert not said or (said in warnings[0] and "fell back to TCP sockets" in warnings[0])
    assert not warnings or ("Slingshot" in warnings[0]) == (net == "slingshot")


PERLMUTTER_PATHS = ["/global/common/software/nersc9/nccl/2.24.3/plugin/lib", "/opt/cray/libfabric/1.22.0/lib64"]


def test_a_slingshot_job_binds_the_hosts_nccl_plugin_and_libfabric(dry_run):
    """Perlmutter's 4-node profile: the plugin and libfabric directories bound read-only at their own paths, the
    host libraries into one directory, all first on the container's library path; NERSC's NCCL/FI variables where
    the cluster file sets none (its own NCCL_SOCKET_IFNAME stays); one node's profile needs none of it."""
    script = dry_run("perlmutter", "regular_4nodes")
    for path in PERLMUTTER_PATHS:
        assert f" -B {path}:{path}:ro " in script
    assert " -B /usr/lib64/libcxi.so.1:/opt/cluster-train/fabric-libs/libcxi.so.1:ro " in script
    assert f"export CT_FABRIC_LIBRARY_PATH={':'.join(PERLMUTTER_PATHS)}:/opt/cluster-train/fabric-libs\n" in script
    for line in ["export NCCL_NET='AWS Libfabric'", "export FI_PROVIDER=cxi", "export NCCL_NET_GDR_LEVEL=PHB",
                 "export NCCL_CROSS_NIC=1", "export FI_CXI_DISABLE_HOST_REGISTER=1",
                 "export FI_MR_CACHE_MONITOR=userfaultfd", "export NCCL_SOCKET_IFNAME=hsn"]:
        assert f"\n{line}\n" in script, line
    one_node = dry_run("perlmutter", "regular_1node")
    assert "fabric-libs" not in one_node and "NCCL_NET" not in one_node and "ct_fabric_check" not in one_node


def slingshot_site(tmp_path, **partition):
    """ci-slurm whose `ci` partition states Slingshot, with what `partition` gives (paths under tmp_path)."""
    site = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    site["partitions"]["ci"].update(fabric="slingshot", **partition)
    site["env"] = {"NCCL_NET": "Socket", "LD_LIBRARY_PATH": "/site/lib"}  # the site's own choices win
    (tmp_path / "slingshot.yaml").write_text(yaml.safe_dump(site, sort_keys=False))
    return tmp_path / "slingshot.yaml"


def test_the_container_finds_the_plugin_first_and_keeps_what_the_site_set(tmp_path, monkeypatch):
    """The forward step each task runs: the container's LD_LIBRARY_PATH is the Slingshot directories, then the
    cluster file's own LD_LIBRARY_PATH; the cluster file's NCCL_NET is not replaced. A path missing on the node
    ends the job before apptainer, naming it."""
    monkeypatch.setenv("CT_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "plugin").mkdir()
    site = slingshot_site(tmp_path, nccl_plugin=str(tmp_path / "plugin"), fabric_libs=[str(tmp_path / "libcxi.so.1")])
    done = run_cluster(site, "n2_gpu1", "demo", "--dry-run", "--run-id", "s")
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert "export NCCL_NET=Socket\n" in script and "NCCL_NET='AWS Libfabric'" not in script
    preamble = script[script.index("export CT_IMAGE_SHA256="):script.index("\nexport MASTER_ADDR=")]
    env = {"PATH": os.environ["PATH"], "RUN_DIR": str(tmp_path), "IMAGE": "x", "IMAGE_SHA256": "y"}
    shown = subprocess.run(["bash", "-c", preamble + '\nbash -c "$forward_env" forward-env printenv '
                            'APPTAINERENV_LD_LIBRARY_PATH APPTAINERENV_NCCL_NET'], capture_output=True, text=True,
                           env=env)
    assert shown.returncode == 1 and "libcxi.so.1 does not exist on" in shown.stderr, shown.stderr
    assert "fix the partition's nccl_plugin, libfabric or fabric_libs in " + str(site) in shown.stderr
    (tmp_path / "libcxi.so.1").write_text("")
    shown = subprocess.run(["bash", "-c", preamble + '\nbash -c "$forward_env" forward-env printenv '
                            'APPTAINERENV_LD_LIBRARY_PATH APPTAINERENV_NCCL_NET'], capture_output=True, text=True,
                           env=env)
    assert shown.stdout.splitlines() == [f"{tmp_path / 'plugin'}:/opt/cluster-train/fabric-libs:/site/lib",
                                         "Socket"], shown.stdout + shown.stderr


PROBE = """#!/bin/sh
# Each rank, inside the container: the Slingshot directories first on the library path, the bound plugin and host
# library readable; then NCCL's log as a run whose second node fell back to sockets writes it.
case "$LD_LIBRARY_PATH" in {plugin}:*) ;; *) echo "the plugin is not first: $LD_LIBRARY_PATH" >&2; exit 3 ;; esac
test -r {plugin}/libnccl-net.so && test -r /opt/cluster-train/fabric-libs/libcxi.so.1
echo "rank $SLURM_PROCID NCCL_NET=$NCCL_NET FI_PROVIDER=$FI_PROVIDER LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
if [ "$SLURM_PROCID" = 0 ]; then lines={good}; else lines={fallback}; fi
printf '%s\\n' "$lines" > "$CT_RUN_DIR/logs/nccl-$(hostname)-$$.log"
"""


@pytest.mark.image
@pytest.mark.slurm
def test_a_two_node_slingshot_job_whose_nccl_fell_back_is_flagged(cpu_image, slurm_cluster, runs_dir, tmp_path):
    """A 2-node job on the test cluster's `ci` partition stated as Slingshot, with a stand-in plugin directory and
    host library: apptainer binds them where the job says, every rank finds them first on its library path with
    NERSC's variables set, and a run whose NCCL logged the socket fallback on one node is flagged by the job and, in
    one line naming Slingshot, by `status`. (No NCCL runs here: the ranks write its lines, the check reads them.)"""
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "libnccl-net.so").write_text("stand-in\n")
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "libcxi.so.1").write_text("stand-in\n")
    site = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    site["partitions"]["ci"].update(fabric="slingshot", nccl_plugin=str(tmp_path / "plugin"),
                                    fabric_libs=[str(tmp_path / "host" / "libcxi.so.1")])
    (tmp_path / "slingshot.yaml").write_text(yaml.safe_dump(site, sort_keys=False))
    project = tmp_path / "project"
    project.mkdir()
    quoted = ["'" + "\n".join(lines).replace("'", "'\\''") + "'" for lines in (OFI_LINES, OFI_FALLBACK_LINES)]
    (project / "probe.sh").write_text(PROBE.format(plugin=tmp_path / "plugin", good=quoted[0], fallback=quoted[1]))
    (project / "experiment.yaml").write_text("name: probe\ncommand: [sh, probe.sh]\ncode: .\n")
    done = run_cluster(tmp_path / "slingshot.yaml", "n2_gpu1", str(project / "experiment.yaml"), "--run-id", "ss",
                       "--stale-image-ok",  # the launcher alone runs here, not the checkout's train code
                       "--no-wait")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    run = runs_dir / "ss"
    assert wait_for_slurm_job(manifest(run)["scheduler"]["job_id"]) == "COMPLETED", job_logs(run)[-3000:]
    log = job_logs(run)
    assert log.count("NCCL_NET=AWS Libfabric FI_PROVIDER=cxi LD_LIBRARY_PATH=" + str(tmp_path / "plugin")) == 2, log
    assert log.count("WARNING: NCCL fell back to TCP sockets between the nodes instead of HPE Slingshot") == 1, log
    status = run_cluster("status", str(run))
    warnings = [line for line in status.stdout.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "instead of HPE Slingshot" in warnings[0], status.stdout + status.stderr


def cuda_site(tmp_path, driver=None):
    """ci-slurm whose `ci` partition is meant for the cuda12.8 image (its GPUs are the test cluster's fake ones); a
    node failing its driver check ends the job, not requeued without it (max_failures 0: tests/host/test_watchdog.py
    proves that requeue)."""
    site = yaml.safe_load((ROOT / "clusters" / "ci-slurm.yaml").read_text())
    site["partitions"]["ci"]["image"] = "cuda12.8"
    for profile in ("n1_gpu1", "n2_gpu1"):
        site["profiles"][profile]["max_failures"] = 0
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
    (tmp_path / "settings.yaml").touch()  # $CT_SETTINGS must name a file
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
    (tmp_path / "settings.yaml").touch()  # $CT_SETTINGS must name a file
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

"""The keys that fit a job to a site, as the rendered script carries them: host variables in env, the module system's
init, hardware threads, and `check-cluster` over every cluster file. (Their refusals: tests/bad_inputs/site_keys.yaml;
the test Slurm cluster running them: tests/test_slurm_sites.py.)"""
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_cluster
from train.host.check_cluster import check_cluster

SITE = """name: site
scheduler: slurm
{top}partitions:
  gpu: {{partition: none, constraint: gpu, image: cuda12.8, gpu_type: A100, gpu_request: typed, gpus_per_node: 4,
        gpu_mem_gb: 40, cpus_per_node: 64, threads_per_core: 2, mem_per_node_gb: 256, nodes: 4}}
profiles:
  p: {{qos: regular, gpus_per_node: 4, cpus_per_task: 32, mem_gb: 200, time: "04:00:00"{profile}}}
"""


def site(tmp_path, top: str = "", profile: str = "") -> str:
    path = tmp_path / "site.yaml"
    path.write_text(SITE.format(top=top, profile=profile))
    return str(path)


def script_of(done) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.split(" script (dry run: nothing submitted) ---\n", 1)[1]


def lines_between(script: str, first: str, last: str) -> str:
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith(last))
    return "\n".join(lines[start:end + 1])


def test_four_tasks_of_32_cpus_fit_64_cores_of_two_threads(store, tmp_path):
    script = script_of(run_cluster(site(tmp_path), "p", "demo", "--dry-run"))
    for directive in ("--qos=regular", "--constraint=gpu", "--gpus-per-node=A100:4", "--ntasks-per-node=4",
                      "--cpus-per-task=32", "--mem=200G"):
        assert f"#SBATCH {directive}\n" in script
    assert "--partition" not in script


def test_env_values_take_settings_host_variables_and_literal_dollars(store, tmp_path):
    """${setting} is filled on the login node (a '$' in it stays literal); $NAME is the node's own variable when the
    job runs, empty if unset (the script runs under set -u); $$ is a literal $."""
    (store / "settings.yaml").write_text("scratch: /scratch/me$1\n")
    env = ('env: {LD_LIBRARY_PATH: "/opt/extra:$LD_LIBRARY_PATH", PRICE: "$$5 a $NOT_SET_ANYWHERE hour", '
           'DATA: "${scratch}/data"}\n')
    script = script_of(run_cluster(site(tmp_path, top=env), "p", "demo", "--dry-run"))
    exports = "\n".join(line for line in script.splitlines() if line.startswith("export ") and "=" in line
                        and line.split()[1].split("=")[0] in ("LD_LIBRARY_PATH", "PRICE", "DATA"))
    shown = subprocess.run(["bash", "-c", f"set -euo pipefail\n{exports}\n"
                            'printf "%s\\n" "$LD_LIBRARY_PATH" "$PRICE" "$DATA"'],
                           capture_output=True, text=True, env={"LD_LIBRARY_PATH": "/usr/lib/site"})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["/opt/extra:/usr/lib/site", "$5 a  hour", "/scratch/me$1/data"]


def test_module_init_runs_before_the_module_loads(store, tmp_path):
    """A site whose batch shells start without `module`: the script sources the module system's init first, and
    module code that reads unset variables does not trip the script's set -u."""
    init = tmp_path / "modules.sh"
    init.write_text('module() { echo "loaded $2${UNSET_BY_THE_SITE}" >> "$MODULE_LOG"; }\n')
    top = f"modules: [StdEnv/2023, apptainer]\nmodule_init: {init}\n"
    script = script_of(run_cluster(site(tmp_path, top=top), "p", "demo", "--dry-run"))
    block = lines_between(script, "set +u", "set -u")
    log = tmp_path / "module.log"
    done = subprocess.run(["bash", "-c", f"set -euo pipefail\n{block}\ntrue"], capture_output=True, text=True,
                          env={"MODULE_LOG": str(log), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["loaded StdEnv/2023", "loaded apptainer"]


@pytest.mark.parametrize("cluster", sorted(p.stem for p in (ROOT / "clusters").glob("*.yaml")))
def test_check_cluster_passes_every_cluster_file(store, cluster):
    report, problems = check_cluster(cluster, scheduler_check=False)
    assert problems == []
    assert len(report) == len(yaml.safe_load((ROOT / "clusters" / f"{cluster}.yaml").read_text())["profiles"])


def test_check_cluster_reports_every_profile_problem_at_once(store, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""name: c
scheduler: slurm
partitions:
  gpu: {image: cuda12.8, gpu_type: A100, gpus_per_node: 4, cpus_per_node: 64, mem_per_node_gb: 256}
  v100: {image: cuda12.8, gpu_type: V100, gpus_per_node: 4, cpus_per_node: 64, mem_per_node_gb: 256}
profiles:
  fine: {partition: gpu, gpus_per_node: 4, cpus_per_task: 8, mem_gb: 200}
  too_many_gpus: {partition: gpu, gpus_per_node: 8, mem_gb: 200}
  repeats: {partition: gpu, gpus_per_node: 1, directives: ["--gres=gpu:a100:1"]}
  wrong_image: {partition: v100, gpus_per_node: 1}
  bad_hint: {partition: gpu, hint: sometimes}
""")
    done = run_cluster("check-cluster", path, "--no-scheduler")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "hint is 'sometimes'" in lines[0]  # the file's own schema comes first
    path.write_text(path.read_text().replace("  bad_hint: {partition: gpu, hint: sometimes}\n", ""))
    done = run_cluster("check-cluster", path, "--no-scheduler")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert [line.split("'")[1] for line in lines] == ["too_many_gpus", "repeats", "wrong_image"], done.stderr
    assert "ok fine:" in done.stdout
    assert "cannot drive V100" in lines[2]


def test_a_cpu_image_is_refused_for_gpus_it_cannot_drive(store, tmp_path):
    """The CPU image on an A100 node with --nv would train on the CPU and bind a driver for nothing."""
    done = run_cluster("gilbreth", "n1_gpu1", "--flavor", "cpu", "--dry-run")
    assert done.returncode == 2 and "image flavor 'cpu' cannot drive A100 GPUs" in done.stderr, done.stderr
    path = site(tmp_path)
    Path(path).write_text(Path(path).read_text().replace("image: cuda12.8", "image: cpu"))
    done = run_cluster(path, "p", "demo", "--dry-run")
    assert done.returncode == 2 and "image flavor 'cpu' cannot drive A100 GPUs" in done.stderr, done.stderr


def test_reservation_exclusive_and_gpu_memory_in_each_schedulers_words(store, tmp_path):
    keys = ", reservation: course-42, exclusive: true, constraint: nvlink, gpu_mem_gb: 40"
    script = script_of(run_cluster(site(tmp_path, profile=keys), "p", "demo", "--dry-run"))
    for directive in ("--reservation=course-42", "--exclusive", "--constraint=gpu&nvlink"):
        assert f"#SBATCH {directive}\n" in script
    lsf = tmp_path / "lsf.yaml"
    lsf.write_text("""name: lsfsite
scheduler: lsf
partitions:
  gpua100: {constraint: gpu80gb, image: cuda12.8, gpu_type: NVIDIAA100_SXM4_80GB, gpu_request: typed, gpus_per_node: 2,
            gpu_mem_gb: 80, cpus_per_node: 32, mem_per_node_gb: 512, nodes: 4}
profiles:
  p: {gpus_per_node: 2, cpus_per_task: 8, mem_gb: 128, time: "8:00", gpu_mem_gb: 80, reservation: course-42,
      exclusive: true, constraint: nvlink}
""")
    flavors = (ROOT / "containers" / "flavors.yaml").read_text()
    assert "NVIDIAA100_SXM4_80GB" not in flavors  # the LSF model name is not an alias: refused until added
    done = run_cluster(lsf, "p", "demo", "--dry-run")
    assert done.returncode == 2 and "NVIDIAA100_SXM4_80GB" in done.stderr
    lsf.write_text(lsf.read_text().replace("NVIDIAA100_SXM4_80GB", "nvidia_a100-sxm4-80gb"))
    script = script_of(run_cluster(lsf, "p", "demo", "--dry-run"))
    for directive in ('-gpu "num=2:mode=exclusive_process:gmodel=nvidia_a100-sxm4-80gb:gmem=80G"',
                      '-R "select[gpu80gb && nvlink]"', "-x", "-U course-42", "-q gpua100"):
        assert f"#BSUB {directive}\n" in script

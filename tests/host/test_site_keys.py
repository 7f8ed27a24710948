"""The keys that fit a job to a site, as the rendered script carries them: host variables in env, the module system's
init, hardware threads, memory (or none), time limits in each scheduler's forms, CPU binding, the scheduler's GPU
name, and `check-cluster` over every cluster file. (Their refusals: tests/bad_inputs/site_keys.yaml;
the test Slurm cluster running them: tests/cluster/test_slurm_sites.py.)"""
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_cluster
from cluster_train.host import clusters
from cluster_train.host.check_cluster import check_cluster

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
    path.write_text(site_text(top, profile))
    return str(path)


def site_text(top: str = "", profile: str = "") -> str:
    return SITE.format(top=top, profile=profile)


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
    assert all(line.startswith(f"run-cluster: error: cluster file {path}: profile '") for line in lines)
    assert "ok fine:" in done.stdout
    assert "cannot drive V100" in lines[2]


def test_perlmutter_states_its_qos_time_limits_and_check_cluster_holds_profiles_to_them(store, tmp_path):
    pm = ROOT / "clusters" / "perlmutter.yaml"
    assert {name: qos.max_time for name, qos in clusters.load(pm).qos.items()} == \
        {"regular": "48:00:00", "debug": "00:30:00"}
    path = tmp_path / "pm.yaml"
    path.write_text(pm.read_text().replace('    time: "00:30:00"', '    time: "00:31:00"'))
    done = run_cluster("check-cluster", path, "--no-scheduler")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"run-cluster: error: profile 'debug_1gpu': time '00:31:00' is longer than the max_time '00:30:00' of qos "
        f"'debug' ({path}); lower time to 00:30:00 or less, or choose a qos that allows it"]


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
    assert "NVIDIAA100_SXM4_80GB" not in flavors  # LSF's model name is no model or alias: not a gpu_type
    done = run_cluster(lsf, "p", "demo", "--dry-run")
    assert done.returncode == 2 and "NVIDIAA100_SXM4_80GB" in done.stderr and "scheduler_gpu_name" in done.stderr
    lsf.write_text(lsf.read_text().replace("NVIDIAA100_SXM4_80GB", "nvidia_a100-sxm4-80gb"))
    done = run_cluster(lsf, "p", "demo", "--dry-run")  # an alias names the model, not what the scheduler calls it
    assert done.returncode == 2 and "set scheduler_gpu_name" in done.stderr and "gpu_type: A100" in done.stderr
    lsf.write_text(lsf.read_text().replace("gpu_type: nvidia_a100-sxm4-80gb",
                                           "gpu_type: A100, scheduler_gpu_name: NVIDIAA100_SXM4_80GB"))
    script = script_of(run_cluster(lsf, "p", "demo", "--dry-run"))
    for directive in ('-gpu "num=2:mode=exclusive_process:gmodel=NVIDIAA100_SXM4_80GB:gmem=80G"',
                      '-R "select[gpu80gb && nvlink]"', "-x", "-U course-42", "-q gpua100"):
        assert f"#BSUB {directive}\n" in script


def test_a_typed_request_names_the_gpu_as_the_scheduler_does(store, tmp_path):
    """gpu_type is the model (the image checks read it), in the flavors file's words or a site's marketing name;
    scheduler_gpu_name is what the typed request says (Slurm's GRES type)."""
    path = site(tmp_path)
    Path(path).write_text(Path(path).read_text().replace("gpu_type: A100,", "gpu_type: A100-SXM4-40GB, "
                                                         "scheduler_gpu_name: a100,"))
    script = script_of(run_cluster(path, "p", "demo", "--dry-run"))
    assert "#SBATCH --gpus-per-node=a100:4\n" in script
    Path(path).write_text(Path(path).read_text().replace("gpu_request: typed,", "gpu_request: typed-gres,"))
    assert "#SBATCH --gres=gpu:a100:4\n" in script_of(run_cluster(path, "p", "demo", "--dry-run"))


def test_memory_as_the_site_wants_it(store, tmp_path):
    """Per node, all of each node's (--mem=0), or nothing at all (the site's default): never a made-up value."""
    path = site(tmp_path)
    Path(path).write_text(Path(path).read_text().replace("mem_gb: 200, ", ""))
    done = run_cluster(path, "p", "demo", "--dry-run")
    assert "#SBATCH --mem" not in script_of(done)
    assert "memory is the site's default (no memory request; a node has 256 GB)" in done.stdout
    done = run_cluster(site(tmp_path, profile=", whole_node: true"), "p", "demo", "--dry-run")
    assert done.returncode == 2 and "sets mem_gb and whole_node" in done.stderr  # one way, not two
    Path(path).write_text(site_text(profile=", whole_node: true").replace("mem_gb: 200, ", ""))
    done = run_cluster(path, "p", "demo", "--dry-run")
    assert "#SBATCH --mem=0\n" in script_of(done)
    assert "of a whole node's memory (whole_node: a node has 256 GB)" in done.stdout
    lsf = tmp_path / "lsf.yaml"
    lsf.write_text("""name: lsfsite
scheduler: lsf
partitions:
  gpuv100: {image: cuda11.6, gpu_type: V100, gpus_per_node: 2, cpus_per_node: 24, mem_per_node_gb: 384}
profiles:
  p: {gpus_per_node: 1, cpus_per_task: 4, time: "4:00"}
""")
    script = script_of(run_cluster(lsf, "p", "demo", "--dry-run"))
    assert "rusage[mem" not in script and '#BSUB -R "span[hosts=1]"' in script


@pytest.mark.parametrize("time, seconds", [("1-00:00:00", 86400), ("0-00:30:00", 1800), ("7-00:00:00", 604800),
                                           ("1-12", 129600), ("1-12:30", 131400), ("36:00:00", 129600),
                                           ("90", 5400), ("30:00", 1800), ("2", 120)])
def test_every_slurm_time_form_is_read_and_rendered_as_written(store, tmp_path, time, seconds):
    from cluster_train.host.schedulers import adapter

    assert adapter("slurm").time_seconds(time) == seconds
    path = site(tmp_path, profile=f', time: "{time}", grace_s: 60')
    Path(path).write_text(Path(path).read_text().replace(', time: "04:00:00"', ""))
    assert f"#SBATCH --time={time}\n" in script_of(run_cluster(path, "p", "demo", "--dry-run"))


def test_lsf_time_forms_and_their_bounds():
    from cluster_train.host.schedulers import adapter

    lsf, slurm = adapter("lsf"), adapter("slurm")
    assert [lsf.time_seconds(t) for t in ("4:00", "36:00", "210", "3:30/hostA", "0")] == [14400, 129600, 12600,
                                                                                          12600, 0]
    assert [lsf.time_seconds(t) for t in ("1-00:00:00", "04:00:00", "3:90", "4 hours", "4:00/")] == [None] * 5
    assert [slurm.time_seconds(t) for t in ("UNLIMITED", "infinite", "-1", "0")] == [0] * 4
    assert [slurm.time_seconds(t) for t in ("99:99:99", "1-24:00:00", "1-", "1:00:00:00", "4h")] == [None] * 5
    assert lsf.warning_seconds(61) == 120 and slurm.warning_seconds(61) == 61


def test_a_profile_without_a_time_gets_one_hour_in_its_schedulers_words(store, tmp_path):
    path = Path(site(tmp_path))
    path.write_text(path.read_text().replace(', time: "04:00:00"', ""))
    assert "#SBATCH --time=01:00:00\n" in script_of(run_cluster(str(path), "p", "demo", "--dry-run"))
    path.write_text("name: q\nscheduler: lsf\napptainer: {nv: false}\npartitions:\n  q: {image: cpu, cpus_per_node: 4, "
                    "mem_per_node_gb: 8, nodes: 1}\nprofiles:\n  one: {partition: q, mem_gb: 4}\n")
    assert "#BSUB -W 1:00\n" in script_of(run_cluster(str(path), "one", "demo", "--dry-run"))  # 01:00:00 is no LSF time


@pytest.mark.parametrize("bind", ["cores", "verbose,cores", "none", "map_cpu:0,16,32,48", "mask_cpu:0xf*4,0xf0*4",
                                  "v", "rank_ldom", "map_ldom:0,0x1"])
def test_cpu_bind_is_on_every_srun_line(store, tmp_path, bind):
    script = script_of(run_cluster(site(tmp_path, profile=f", cpu_bind: '{bind}'"), "p", "demo", "--dry-run"))
    srun = [line for line in script.splitlines() if line.startswith("srun ")]
    assert srun and all(f" --cpu-bind={shlex.quote(bind)} " in line for line in srun), srun
    assert "--cpu-bind" not in script.split("\n# cluster-train run")[0]  # srun's option, no #SBATCH line

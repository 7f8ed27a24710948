"""The most a job can cost before it is queued: its time limit x the GPUs it holds (a job with none: its CPUs), per
allocation, the figure an allocation counted in GPU-hours is charged at most. A requeue takes another allocation."""
from cluster_train.host.scheduling.job import ResolvedJob


def most_hours(job: ResolvedJob) -> float:
    """Hours of the resource `unit(job)` names that one allocation of the job holds at most; 0 with no time limit."""
    place = job.placement
    seconds = place.time_s or 0
    return seconds / 3600 * units(job)


def units(job: ResolvedJob) -> int:
    place = job.placement
    return place.nodes * (place.gpus_per_node or place.tasks_per_node * place.cpus_per_task)


def unit(job: ResolvedJob) -> str:
    return "GPU" if job.placement.gpus_per_node else "CPU"


def most_cost_line(job: ResolvedJob, runs: int = 1) -> str:
    """'cost: at most 0.33 GPU-hours (time 00:20:00 x 1 GPU(s)), each requeue as much again'; a sweep's: all its
    runs."""
    place, count = job.placement, units(job)
    if not place.time_s:
        return f"cost: no upper bound (no time limit) on {count} {unit(job)}(s)"
    each = f" x {runs} runs" if runs > 1 else ""
    requeues = ", each requeue as much again" if job.adapter.requeue_command else ""
    return (f"cost: at most {most_hours(job) * runs:.2f} {unit(job)}-hours (time {place.time} x {count} "
            f"{unit(job)}(s){each}){requeues}")

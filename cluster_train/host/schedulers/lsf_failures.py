"""What LSF's batch shell runs (templates/_failures.sh.j2, _segments.sh.j2) to tell a host's failure apart: LSF has
rerun the job itself, which of its hosts failed. The adapter (lsf.py) hands them to the templates as the Scheduler
contract's words (base.py).

IBM's LSF 10.1: a job submitted rerunnable (`bsub -r`, which the adapter asks for) "is rerun on another host" when its
execution host "becomes unavailable while a job is running", requeued with its job id; a blaunch job is shut down
whole once a task's host is lost (Using Platform LSF HPC: "LSF shuts down the entire job if connection is lost with
the task RES"), so the batch shell, on the first execution host, is signalled and may record the end. bhosts then
shows the failed host `unavail` ("Host is down, or LIM and sbatchd are unreachable") or `unreach` (sbatchd)."""

# HOST<tab>WHY of each of the job's hosts (once each, from its host file) that bhosts shows failed; nothing without a
# host file, where `bhosts -w` of no host would list the whole cluster's, another job's failed host among them
FAILED_NODES = ('[ -s "${LSB_DJOB_HOSTFILE:-}" ] && bhosts -w $(awk \'!seen[$1]++ {print $1}\' "$LSB_DJOB_HOSTFILE") '
                '2>/dev/null | awk \'NR > 1 && ($2 == "unavail" || $2 == "unreach") {print $1 "\\tbhosts: " $2}\'')
# a host of the job failed: LSF is shutting the job down to rerun it (a job lost with its first host has no shell)
REQUEUED_UNDER_US = f'[ -n "$({FAILED_NODES})" ]'

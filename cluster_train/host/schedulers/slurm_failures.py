"""What Slurm's batch shell runs (templates/_failures.sh.j2, _segments.sh.j2) to tell a failure apart: that Slurm
requeued the job itself, which of its nodes failed, which rank died, and how the requeued job leaves nodes out. The
adapter (slurm.py) hands them to the templates as the Scheduler contract's words (base.py)."""
from cluster_train.shared.exit_codes import REQUEUE

# a node failure: Slurm cancels the job "DUE TO NODE FAILURE" and requeues it; srun may exit 0, Restarts go up
# only after it returned (clean-clone CI): a node of the job DOWN says it too (DOWN ends every job on the node)
REQUEUED_UNDER_US = ('{ [ "$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | '
                     'sed -n "s/.* Restarts=\\([0-9]*\\).*/\\1/p")" -gt "${SLURM_RESTART_COUNT:-0}" ] '
                     '2>/dev/null || scontrol show node -o "$SLURM_JOB_NODELIST" 2>/dev/null | '
                     'grep -q " State=[A-Z_+]*DOWN"; }')
# a node failure: HOST<tab>REASON of each of the job's nodes that sinfo shows failed, or that srun saw fail (its
# own lines of the segment's training step, $ct_srun_said in slurm.sh.j2): a node whose slurmd still answers is
# back in service (ReturnToService) before the batch shell looks, and sacct's NodeList holds all the job's nodes
FAILED_NODES = ('{ sinfo -h -N -n "$SLURM_JOB_NODELIST" -t down,drain,fail,no_respond -o "%N|%E" 2>/dev/null; '
                'sed -n "s/^srun: error: Node failure on \\([^ ]*\\)$/\\1|/p" "${ct_srun_said:-/dev/null}" '
                '2>/dev/null; } | '
                'awk -F "|" \'$1 != "" && !seen[$1]++ {print $1 "\\t" $2}\'')
# RANK HOST [EXIT] of the first rank srun saw end, other than one that saved and stopped as asked (kill-on-bad-exit
# ends the others after it): EXIT where it ended by its own exit (an exception), none where a signal killed it. srun
# names the ranks of one node that ended alike at once ("n1: tasks 0-1: Exited with exit code 1"): the first is taken
DIED_RANK = (f'sed -n "/: Exited with exit code {REQUEUE}$/d; '
             's/^srun: error: \\([^ :]*\\): tasks\\{0,1\\} \\([0-9]*\\)[-,0-9]*: Exited with exit code '
             '\\([0-9]*\\)$/\\2 \\1 \\3/p; t; '
             's/^srun: error: \\([^ :]*\\): tasks\\{0,1\\} \\([0-9]*\\)[-,0-9]*: .*/\\2 \\1/p" '
             '"${ct_srun_said:-/dev/null}" 2>/dev/null | head -n 1')
# a rank exited with the requeue code, its save done: kill-on-bad-exit's SIGTERM then ended the ranks still exiting,
# so srun's worst code is 143 (a script's own save-and-exit, which cannot ignore that SIGTERM, is still a save)
RANK_SAVED = f'grep -qs ": Exited with exit code {REQUEUE}$" "${{ct_srun_said:-/dev/null}}"'
# ExcNodeList is taken from a pending job only
LEAVE_OUT_PENDING = 'scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="${ct_left_out// /,}"'

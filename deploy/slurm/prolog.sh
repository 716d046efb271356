#!/bin/sh
# CODA: slurmd runs this as Prolog (as root, before the job's first task on a node)
# and as Epilog (after its last). The Prolog makes the job's progress file, owned by
# the job's user and readable by the node agent; nobody else can create or replace it
# (the directory is root's, mode 0755). The Epilog removes it.
dir=@PROGRESS_DIR@
f="$dir/job_${SLURM_JOB_ID:?}"
rm -f "$f"
if [ "${SLURM_SCRIPT_CONTEXT:-prolog_slurmd}" = "prolog_slurmd" ]; then
    install -m 0644 -o "${SLURM_JOB_UID:?}" -g "${SLURM_JOB_GID:-${SLURM_JOB_UID}}" /dev/null "$f"
fi
exit 0

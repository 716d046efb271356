#!/bin/sh
# CODA: slurmd runs this as Prolog (as root, before the job's first task on a node)
# and as Epilog (after its last). The Prolog makes the job's progress file, owned by
# the job's user and readable by the node agent; nobody else can create or replace it
# (the directory is root's, mode 0755). It also makes the job's record on the node's
# board for emulated jobs (coda.runtime.board), owned by the job's user in the same
# way. The Epilog removes both, and the grant the agent wrote there.
dir=@PROGRESS_DIR@
f="$dir/job_${SLURM_JOB_ID:?}"
rm -f "$f"
board=""
case "${SLURMD_NODENAME:-}" in
    "" | *[!A-Za-z0-9_-]*) ;; # no node name, or not one to make a path of
    *) board="@BOARD_DIR@/$SLURMD_NODENAME" ;;
esac
[ -n "$board" ] && rm -f "$board/job_${SLURM_JOB_ID}.use" "$board/job_${SLURM_JOB_ID}.grant"
if [ "${SLURM_SCRIPT_CONTEXT:-prolog_slurmd}" = "prolog_slurmd" ]; then
    owner="${SLURM_JOB_UID:?}"
    group="${SLURM_JOB_GID:-${SLURM_JOB_UID}}"
    install -m 0644 -o "$owner" -g "$group" /dev/null "$f"
    if [ -n "$board" ]; then
        install -d -m 0755 "$board"
        install -m 0644 -o "$owner" -g "$group" /dev/null "$board/job_${SLURM_JOB_ID}.use"
    fi
fi
exit 0

#!/bin/sh
# CODA: slurmstepd runs this before each task (the batch script included) as the
# job's user; lines "export NAME=VALUE" become the task's environment. A training
# script using coda.runtime.progress then reports its progress where the node's
# CODA agent reads it: the file prolog.sh made for this job, owned by its user (the
# directory is root's; the agent trusts a file only if the job's user owns it).
# Emulated jobs find their node's board (coda.runtime.board) in CODA_BOARD_DIR.
# Its settings: coda-slurm.conf beside it, as prolog.sh's.
conf="${0%/*}/coda-slurm.conf"
[ "$conf" = "$0/coda-slurm.conf" ] && conf=/etc/slurm/coda-slurm.conf
PROGRESS_DIR=""
BOARD_DIR=""
if [ -r "$conf" ]; then
    while IFS='=' read -r key value || [ -n "$key" ]; do
        case $key in
            PROGRESS_DIR) PROGRESS_DIR=$value ;;
            BOARD_DIR) BOARD_DIR=$value ;;
        esac
    done <"$conf"
fi
case $PROGRESS_DIR in
    /?*) case $PROGRESS_DIR in *[!A-Za-z0-9_./-]*) PROGRESS_DIR="" ;; esac ;;
    *) PROGRESS_DIR="" ;;
esac
case $PROGRESS_DIR/ in *//* | */../* | */./*) PROGRESS_DIR="" ;; esac
if [ -z "$PROGRESS_DIR" ]; then
    echo "CODA task_prolog: $conf has no PROGRESS_DIR=/absolute/path" >&2
    exit 1
fi
case ${SLURM_JOB_ID:-} in
    "" | *[!0-9]*)
        echo "CODA task_prolog: SLURM_JOB_ID is not a job id" >&2
        exit 1
        ;;
esac
echo "export CODA_PROGRESS_FILE=$PROGRESS_DIR/job_${SLURM_JOB_ID}"
case $BOARD_DIR in /?*) case $BOARD_DIR in *[!A-Za-z0-9_./-]*) BOARD_DIR="" ;; esac ;; *) BOARD_DIR="" ;; esac
case $BOARD_DIR/ in *//* | */../* | */./*) BOARD_DIR="" ;; esac
case "${SLURMD_NODENAME:-}" in
    "" | *[!A-Za-z0-9_-]*) ;;
    *) [ -n "$BOARD_DIR" ] && echo "export CODA_BOARD_DIR=$BOARD_DIR/${SLURMD_NODENAME}" ;;
esac
exit 0

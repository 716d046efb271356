#!/bin/sh
# CODA: slurmstepd runs this before each task (the batch script included) as the
# job's user; lines "export NAME=VALUE" become the task's environment. A training
# script using coda.runtime.progress then reports its progress where the node's
# CODA agent reads it: the file prolog.sh made for this job, owned by its user (the
# directory is root's; the agent trusts a file only if the job's user owns it).
# Emulated jobs find their node's board (coda.runtime.board) in CODA_BOARD_DIR.
echo "export CODA_PROGRESS_FILE=@PROGRESS_DIR@/job_${SLURM_JOB_ID}"
case "${SLURMD_NODENAME:-}" in
    "" | *[!A-Za-z0-9_-]*) ;;
    *) echo "export CODA_BOARD_DIR=@BOARD_DIR@/${SLURMD_NODENAME}" ;;
esac

#!/bin/sh
# CODA: slurmd runs this as Prolog (as root, before the job's first task on a node)
# and as Epilog (after its last). The Prolog makes the job's progress file, owned by
# the job's user and readable by the node agent; nobody else can create or replace it
# (the directory is root's, mode 0755). It also makes the job's record on the node's
# board for emulated jobs (coda.runtime.board), owned by the job's user in the same
# way. The Epilog removes both, and the grant the agent wrote there.
#
# Its settings are in coda-slurm.conf beside it (PROGRESS_DIR=, BOARD_DIR=;
# docs/operator.md). Without them, or on any failure, it refuses in one line: slurmd
# then drains the node and says why, instead of every job silently going unslimmed.
conf="${0%/*}/coda-slurm.conf"
[ "$conf" = "$0/coda-slurm.conf" ] && conf=/etc/slurm/coda-slurm.conf
fail() {
    echo "CODA prolog: $*" >&2
    exit 1
}
PROGRESS_DIR=""
BOARD_DIR=""
seen=""
[ -r "$conf" ] || fail "$conf: not there (docs/operator.md: configuring CODA's Slurm scripts)"
while IFS='=' read -r key value || [ -n "$key" ]; do
    case $key in
        PROGRESS_DIR | BOARD_DIR)
            case " $seen " in *" $key "*) fail "$conf: $key given twice" ;; esac
            seen="$seen $key"
            ;;
    esac
    case $key in
        PROGRESS_DIR) PROGRESS_DIR=$value ;;
        BOARD_DIR) BOARD_DIR=$value ;;
    esac
done <"$conf"
# A directory of root's: absolute, plain characters, no '..', no empty component.
check_dir() { # check_dir NAME VALUE
    case $2 in /?*) ;; *) fail "$conf: $1 is not an absolute path" ;; esac
    case $2 in *[!A-Za-z0-9_./-]*) fail "$conf: $1: a directory of letters, digits and _./- only" ;; esac
    case $2/ in *//* | */../* | */./*) fail "$conf: $1: no '..', '.' or empty part" ;; esac
    [ -d "$2" ] || fail "$conf: $1=$2 is not a directory"
}
check_dir PROGRESS_DIR "$PROGRESS_DIR"
[ -z "$BOARD_DIR" ] || check_dir BOARD_DIR "$BOARD_DIR"
case ${SLURM_JOB_ID:-} in "" | *[!0-9]*) fail "SLURM_JOB_ID '${SLURM_JOB_ID:-}' is not a job id" ;; esac

f="$PROGRESS_DIR/job_$SLURM_JOB_ID"
rm -f "$f" || fail "cannot remove $f"
board=""
case "${SLURMD_NODENAME:-}" in
    "" | *[!A-Za-z0-9_-]*) ;; # no node name, or not one to make a path of
    *) [ -n "$BOARD_DIR" ] && board="$BOARD_DIR/$SLURMD_NODENAME" ;;
esac
if [ -n "$board" ]; then
    rm -f "$board/job_$SLURM_JOB_ID.use" "$board/job_$SLURM_JOB_ID.grant" || fail "cannot clean $board"
fi
if [ "${SLURM_SCRIPT_CONTEXT:-prolog_slurmd}" = "prolog_slurmd" ]; then
    owner="${SLURM_JOB_UID:-}"
    group="${SLURM_JOB_GID:-$owner}"
    case $owner in "" | *[!0-9]*) fail "SLURM_JOB_UID '$owner' is not a uid" ;; esac
    case $group in "" | *[!0-9]*) fail "SLURM_JOB_GID '$group' is not a gid" ;; esac
    install -m 0644 -o "$owner" -g "$group" /dev/null "$f" 2>/dev/null || fail "cannot make $f"
    if [ -n "$board" ]; then
        install -d -m 0755 "$board" 2>/dev/null || fail "cannot make $board"
        install -m 0644 -o "$owner" -g "$group" /dev/null "$board/job_$SLURM_JOB_ID.use" 2>/dev/null ||
            fail "cannot make $board/job_$SLURM_JOB_ID.use"
    fi
fi
exit 0

# Progress for the set-up scripts, sourced by them: a line per phase with the time since the start, and a line after
# PROGRESS_EVERY seconds (8 unless set) of silence from a long command, so that a CI log, a pipe or a terminal never
# goes 10 s without a line, and never shows a quiet minute that looks like a hang.

PROGRESS_EVERY=${PROGRESS_EVERY:-8}
PROGRESS_START=${PROGRESS_START:-$SECONDS}

# say MESSAGE...: one line headed by the seconds since the set-up started.
say() {
    printf '[%4ss] %s\n' "$((SECONDS - PROGRESS_START))" "$*"
}

# run_step LABEL COMMAND...: run COMMAND, pass on its lines (both streams, indented) as they come, and while it prints
# nothing say "LABEL: still working" every PROGRESS_EVERY seconds. Lines matching PROGRESS_HIDE (an extended regular
# expression, none unless set) are left out: an installer's list of every package it added. Returns COMMAND's status.
run_step() {
    local label=$1 status=0
    shift
    # the status of COMMAND, not of the relay, whether or not the caller set pipefail or errexit
    "$@" 2>&1 | _progress_relay "$label" && status=${PIPESTATUS[0]} || status=${PIPESTATUS[0]}
    return "$status"
}

_progress_relay() {
    local label=$1 started=$SECONDS line="" pending=""
    while :; do
        if IFS= read -r -t "$PROGRESS_EVERY" line; then
            _progress_pass "$pending$line"
            pending=""
        elif (($? > 128)); then
            pending+=$line  # a partial line read before the timeout: finish it with the next read
            say "$label: still working ($((SECONDS - started)) s)"
        else
            [[ -z $pending$line ]] || _progress_pass "$pending$line"
            return 0
        fi
    done
}

_progress_pass() {
    [[ -z ${PROGRESS_HIDE:-} || ! $1 =~ $PROGRESS_HIDE ]] || return 0
    printf '    %s\n' "$1"
}

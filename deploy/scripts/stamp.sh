# Sourced by the setup scripts that install pinned tools under .cache/: one lock and one stamp per install dir.
#
#   source deploy/scripts/stamp.sh
#   stamp_lock DIR SCRIPT   # waits for DIR's lock (held until the script exits); true when DIR's stamp says
#                           # SCRIPT (whose text holds the pins) already finished an install there
#   stamp_done DIR SCRIPT   # records that finished install
#
# Why a stamp of the script's own hash: changing a pin changes the script, so the next run reinstalls; and a run
# killed half-way leaves no stamp, so the next run starts over instead of trusting a half-made venv.

stamp_lock() {
    mkdir -p "$1"
    exec 9>"$1.setup.lock"
    flock 9
    local want
    want="$(sha256sum "$2" | cut -d' ' -f1)"
    if [ -f "$1/.toolfleet-setup-stamp" ] && [ "$(cat "$1/.toolfleet-setup-stamp")" = "$want" ]; then
        return 0
    fi
    rm -f "$1/.toolfleet-setup-stamp"
    return 1
}

stamp_done() {
    sha256sum "$2" | cut -d' ' -f1 > "$1/.toolfleet-setup-stamp"
}

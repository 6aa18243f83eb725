# Copyright 2026 The GMLake Authors.
#
# Sourced by tests/gpu/colocate_bench.sh. workloads/colocate.py (kept
# unedited) hangs when one role ends early, as native PyTorch's inference
# engine does when it runs out of memory building its model: the role
# marks itself "done-", its partner finishes its turn, writes the turn
# over that mark and waits for a turn that never comes, until the pair's
# limit (160 s a run, twice in the ninth session's three calls). This
# watcher ends the wait: once the turn has belonged for GRACE seconds to a
# role with no process left, it ends the partner, so the pair prints both
# roles' RESULT lines (the early one's error included) and its PAIR line.
#
# watch_pair DIR PID [GRACE]: watches the pair run in DIR until PID ends;
# prints a WATCH line for each partner it ends.
watch_pair() {
  local d="$1" pid="$2" grace="${3:-3}" gone=0 turn
  while kill -0 "${pid}" 2> /dev/null; do
    sleep 1
    turn="$(cat "${d}/turn" 2> /dev/null)"
    # The roles run as `python .../colocate.py ROLE --dir DIR ...`.
    if [[ "${turn}" == train || "${turn}" == infer ]] &&
      ! pgrep -f "colocate\.py ${turn} --dir ${d}( |$)" > /dev/null; then
      gone=$((gone + 1))
    else
      gone=0
    fi
    if ((gone >= grace)); then
      echo "WATCH the ${turn} role ended while the turn was its own;" \
        "ending its partner, which waits for it"
      pkill -f "colocate\.py (train|infer) --dir ${d}( |$)"
      gone=0
    fi
  done
}

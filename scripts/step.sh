#!/bin/sh
# The steps of `make test`, timed, so that every run (CI's too) says where its time went and
# what the whole took on this machine (issue #42 asks for 45 minutes at most):
#   scripts/step.sh start        notes the start
#   scripts/step.sh CMD ARGS...  runs one step (echoed as make echoes a command), then prints
#                                its time; fails as the step does, saying after how long
#   scripts/step.sh end          prints each step's time and the wall time since `start`
# The times are kept in target/make-test.times between the calls.
set -u
times="$(dirname "$0")/../target/make-test.times"
now() { date +%s; }
mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
since_start() { echo $(($(now) - $(sed -n 's/^start //p' "$times"))); }

case "${1:-}" in
start)
    mkdir -p "$(dirname "$times")"
    echo "start $(now)" >"$times"
    exit 0
    ;;
end)
    total=$(since_start)
    echo "make test: every step passed; the time of each:"
    grep -v '^start ' "$times" | while IFS="	" read -r s cmd; do
        printf '  %6s  %s\n' "$(mmss "$s")" "$cmd"
    done
    echo "make test: wall time $(mmss "$total") ($total s)"
    exit 0
    ;;
esac

echo "$*"
t0=$(now)
"$@"
rc=$?
took=$(($(now) - t0))
printf '%s\t%s\n' "$took" "$*" >>"$times"
if [ $rc -eq 0 ]; then
    echo "make test: $(mmss "$took") for: $*"
else
    echo "make test: FAILED after $(mmss "$took") (exit $rc; $(mmss "$(since_start)") since the start): $*"
fi
exit $rc

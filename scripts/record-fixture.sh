#!/usr/bin/env bash
# Records the dashboard test fixtures: CUBIC and BBR sharing a 20 Mbit/s drop-tail bottleneck
# (tbf, 60 KB queue) between two throwaway network namespaces, captured with `bbrscope stream`.
# Usage (root): scripts/record-fixture.sh OUT.ndjson SECONDS ALGO [ALGO...]
# (each ALGO gets one bulk flow, all at once, e.g. `cubic` or `cubic bbr`)
set -euo pipefail
out=${1:?output file}; secs=${2:?seconds}; shift 2; algos=("${@:?at least one algorithm}")
bin=${BBRSCOPE:-target/release/bbrscope}
a=bbrs-rec-a-$$; b=bbrs-rec-b-$$; port=$((20000 + RANDOM % 20000))
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add va netns "$a" type veth peer name vb netns "$b"
ip -n "$a" addr add 10.198.0.1/24 dev va; ip -n "$b" addr add 10.198.0.2/24 dev vb
ip -n "$a" link set va up; ip -n "$b" link set vb up; ip -n "$a" link set lo up; ip -n "$b" link set lo up
# The bottleneck: the sender's egress, drop-tail.
ip netns exec "$a" tc qdisc add dev va root tbf rate 20mbit burst 8kb limit 60kb
sink='import socket,threading
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("10.198.0.2", '"$port"')); s.listen()
def rd(c):
    while c.recv(1<<20): pass
while True:
    c,_=s.accept(); threading.Thread(target=rd,args=(c,),daemon=True).start()'
send='import socket,sys,time
s=socket.socket(); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, sys.argv[1].encode())
s.connect(("10.198.0.2", '"$port"')); end=time.time()+float(sys.argv[2]); b=b"x"*65536
while time.time()<end: s.sendall(b)
s.close()'
ip netns exec "$b" python3 -c "$sink" & sink_pid=$!
"$bin" stream --port "$port" --stats-interval 1 --duration $((secs + 3)) > "$out" & rec=$!
sleep 1
for cc in "${algos[@]}"; do ip netns exec "$a" python3 -c "$send" "$cc" "$secs" & done
wait $rec; kill $sink_pid; wait 2>/dev/null || true
echo "recorded $(grep -c '"sample"' "$out") samples in $out" >&2

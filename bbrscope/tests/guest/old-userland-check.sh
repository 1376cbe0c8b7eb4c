#!/bin/bash
# The checks of bbrscope/tests/export.rs's old-userland test, run at boot by
# bbrscope-old-userland-check.service: the static package on Debian 11 (glibc 2.31, systemd 247)
# under Debian 11's own 5.10 kernel (cargo xtask boot), as an admin there would use it — dpkg,
# stream, top on a terminal, apply and revert — then powered off. One boot. Each check is one
# JSON line on /dev/ttyS1 with its evidence; the references are the kernel's (sysctl,
# getsockopt) and the traffic this script makes, never bbrscope's own account.
set -u
. /usr/local/lib/bbrscope-check.sh
PORT=5201
CC=net.ipv4.tcp_congestion_control
SIZE=262144

. /etc/os-release
glibc=$(ldd --version 2>&1 | head -1)
if [ "$VERSION_ID" = 11 ] && [[ $(uname -r) == 5.10.* ]]; then
  pass old_userland "$PRETTY_NAME; $glibc; kernel $(uname -r)"
else
  fail old_userland "$PRETTY_NAME; $glibc; kernel $(uname -r)"
fi
check dpkg_install dpkg -i /root/bbrscope.deb

st=$(bbrscope status --json 2>&1)
if grep -Eq '"path": *"(sockops|tracepoint)"' <<<"$st"; then
  pass status_reads_kernel "$(grep -E '"(path|reason|bbr_version)"' <<<"$st" | tr -s ' \n' ' ')"
else
  fail status_reads_kernel "$st"
fi

# Real traffic while `stream` watches: 2 cubic and 1 bbr flow of SIZE bytes, each summarised
# once with its algorithm and every byte acked (+1 for the FIN, +1 where the SYN is counted).
modprobe tcp_bbr
start_sink
bbrscope stream --port $PORT --duration 15 >/tmp/stream.ndjson 2>/tmp/stream.err &
stream_pid=$!
sleep 4
made=$( (flows cubic 2 $SIZE && flows bbr 1 $SIZE) 2>&1) || made="traffic failed: $made"
wait $stream_pid
code=$?
summaries=$(grep '"type":"flow_summary"' /tmp/stream.ndjson | grep "\"dst\":\"127.0.0.1:$PORT\"")
counts="cubic $(grep -c '"cc":"cubic"' <<<"$summaries"), bbr $(grep -c '"cc":"bbr"' <<<"$summaries")"
acked=$(grep -o '"bytes_acked":[0-9]*' <<<"$summaries" | cut -d: -f2 | sort -u | tr '\n' ' ')
bytes_ok=yes
for b in $acked; do [ "$b" -ge $SIZE ] && [ "$b" -le $((SIZE + 2)) ] || bytes_ok=no; done
if [ $code = 0 ] && [ "$counts" = "cubic 2, bbr 1" ] && [ -n "$acked" ] && [ $bytes_ok = yes ] && [ -z "${made}" ]; then
  pass stream_counts_flows "$counts; bytes acked: $acked; $(head -3 /tmp/stream.err | tr '\n' ' ')"
else
  fail stream_counts_flows "exit $code; $counts; bytes acked: $acked; $made; $(head -5 /tmp/stream.err); $(head -c 1500 /tmp/stream.ndjson)"
fi
kill $SINK

# The dashboard on a terminal (script(1)'s pty, 80x24): it draws, ends after its duration
# and gives the terminal back.
# Its input stays open (a unit's stdin is /dev/null, whose end would end script at once).
tty_out=$(sleep 8 | script -qec "stty rows 24 cols 80; bbrscope top --duration 3; echo top-exit=\$?; stty -a" /dev/null 2>&1)
if grep -q 'top-exit=0' <<<"$tty_out" && grep -q 'bbrscope' <<<"$tty_out" && grep -Eq '(^|[ ;])icanon' <<<"$tty_out" &&
  grep -Eq '(^|[ ;])echo' <<<"$tty_out"; then
  pass top_in_a_pty "$(grep -o 'bbrscope [^[:cntrl:]]\{0,60\}' <<<"$tty_out" | head -2 | tr '\n' ' '); top-exit=0; terminal back in canonical mode with echo"
else
  fail top_in_a_pty "$(tr -d '\033' <<<"$tty_out" | tail -c 2000)"
fi

# apply and revert, the system's default and a named namespace's, read back from the kernel.
before=$(sysctl -n $CC)
o=$(bbrscope apply bbr --no-persist 2>&1)
during=$(sysctl -n $CC)
r=$(bbrscope revert 2>&1)
after=$(sysctl -n $CC)
if [ "$during" = bbr ] && [ "$after" = "$before" ]; then
  pass apply_system_and_revert "$CC: $before, bbr after apply, $after after revert"
else
  fail apply_system_and_revert "$CC: $before, $during after apply ($o), $after after revert ($r)"
fi
ip netns add old
before=$(ip netns exec old sysctl -n $CC)
o=$(bbrscope apply reno --netns old 2>&1)
during=$(ip netns exec old sysctl -n $CC)
r=$(bbrscope revert --netns old 2>&1)
after=$(ip netns exec old sysctl -n $CC)
if [ "$during" = reno ] && [ "$after" = "$before" ] && [ "$(sysctl -n $CC)" = "$before" ]; then
  pass apply_netns_and_revert "netns old: $before, reno after apply, $after after revert; the system's stays $(sysctl -n $CC)"
else
  fail apply_netns_and_revert "netns old: $before, $during after apply ($o), $after after revert ($r); system $(sysctl -n $CC)"
fi
ip netns del old

o=$(dpkg --purge bbrscope 2>&1)
if [ ! -e /usr/bin/bbrscope ] && ! dpkg -s bbrscope >/dev/null 2>&1; then
  pass purge_is_clean "$(tail -1 <<<"$o")"
else
  fail purge_is_clean "$o; $(ls -l /usr/bin/bbrscope 2>&1)"
fi
finish 1
systemctl poweroff

#!/bin/bash
# The checks of bbrscope/tests/export.rs's whole-system test, run inside a Debian guest whose PID 1 is
# systemd (cargo xtask boot), by bbrscope-check.service, as an admin would run things:
# dpkg, systemctl, man, the shells. Three boots: the first installs the package, enables the
# exporter and a cgroup pin, applies bbr system-wide and upgrades the package, then reboots; the
# second checks what came back by itself at boot, removes the package keeping the change when
# asked, reinstalls it and purges it (which undoes the change), then reboots; the third checks
# the change stays undone, and powers off. Each check is one JSON line on /dev/ttyS1, with its
# evidence; the references are the kernel's (/proc, cgroupfs, bpftool, getsockopt) and the
# traffic this script makes, never bbrscope's own account.
set -u
. /usr/local/lib/bbrscope-check.sh
STATE=/var/lib/bbrscope-check
PHASE_FILE=$STATE/phase
UNIT=bbrscope-exporter.service
METRICS=http://127.0.0.1:9580/metrics
# The port the test's traffic uses; the exporter counts only it (BBRSCOPE_ARGS), so the scrapes
# themselves are not counted.
PORT=5201
SLICE=bbrchk.slice
PIN_UNIT=bbrscope-cgroup-pin@$SLICE.service
CC=net.ipv4.tcp_congestion_control
DROPIN=/etc/sysctl.d/99-zz-bbrscope.conf
RECORD=/var/lib/bbrscope/state.json
# What `bbrscope apply` makes the system default: not the pin's bbr, so that a connection from
# the pinned slice and one from outside it still tell the pin apart.
SYSTEM_CC=reno
mkdir -p $STATE

metrics() { curl -sf --max-time 5 "$METRICS"; }
# wait_metric LINE SECONDS: until /metrics has the exact line.
wait_metric() {
  local i
  for ((i = 0; i < $2 * 2; i++)); do
    metrics | grep -qxF "$1" && return 0
    sleep 0.5
  done
  return 1
}

# The algorithm a new connection from this process gets (no setsockopt: the default, or what a
# sock_ops program of its cgroup sets when it is established).
probe_cc() {
  perl -MIO::Socket::INET -MSocket=IPPROTO_TCP -e '
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:'$PORT'") or die "connect: $!";
    print unpack("Z*", getsockopt($s, IPPROTO_TCP, 13)), "\n";'
}
# probe_in_slice: probe_cc from a scope in $SLICE (where the pin applies). A scope, not a
# service: systemd-run --wait/--pipe need D-Bus, which this system does not run.
probe_in_slice() {
  systemd-run --quiet --scope --slice=$SLICE perl -MIO::Socket::INET -MSocket=IPPROTO_TCP -e '
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:'$PORT'") or die "connect: $!";
    print unpack("Z*", getsockopt($s, IPPROTO_TCP, 13)), "\n";'
}

# bbrscope's BPF programs and links now: "prog ID NAME" / "link ID prog ID" lines. Programs of
# systemd's own (sd_*: device and firewall filters of sandboxed units) are left out.
bpf_objects() {
  bpftool prog show | sed -nE 's/^([0-9]+): [a-z_]+ +name ([^ ]+).*/prog \1 \2/p' | grep -v ' sd_'
  bpftool link show | sed -nE 's/^([0-9]+): [a-z_]+ +prog ([0-9]+).*/link \1 prog \2/p'
}

# The capability names a unit's CapabilityBoundingSet= lists, as the kernel's bit mask (hex).
cap_mask() {
  local names=(chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap
    linux_immutable net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner sys_module
    sys_rawio sys_chroot sys_ptrace sys_pacct sys_admin sys_boot sys_nice sys_resource sys_time
    sys_tty_config mknod lease audit_write audit_control setfcap mac_override mac_admin syslog
    wake_alarm block_suspend audit_read perfmon bpf checkpoint_restore)
  local mask=0 c i
  for c in $(sed -n 's/^CapabilityBoundingSet=//p' "$1" | tr 'A-Z' 'a-z'); do
    for i in "${!names[@]}"; do [ "cap_${names[$i]}" = "$c" ] && mask=$((mask | (1 << i))); done
  done
  printf '%016x' $mask
}

phase1() {
  cat /proc/sys/kernel/random/boot_id >$STATE/boot1
  if [[ $(readlink /proc/1/exe) == */systemd ]]; then
    pass pid1_is_systemd "$(readlink /proc/1/exe); $(systemctl is-system-running 2>&1); kernel $(uname -r)"
  else
    fail pid1_is_systemd "$(readlink /proc/1/exe)"
  fi
  check dpkg_install dpkg -i /root/bbrscope.deb
  # postinst told systemd about the units: it knows them without a daemon-reload of ours.
  check units_known systemctl show -p LoadState --value $UNIT bbrscope-cgroup-pin@x.service

  # The exporter as an admin runs it: settings in /etc/default, enabled and started.
  sed -i "s/^BBRSCOPE_ARGS=.*/BBRSCOPE_ARGS=--port $PORT/" /etc/default/bbrscope-exporter
  local before
  before=$(bpf_objects)
  systemctl enable --now $UNIT
  local i ok=false
  for ((i = 0; i < 120; i++)); do
    metrics | grep -q '^bbrscope_observer_info' && { ok=true; break; }
    systemctl is-failed -q $UNIT && break
    sleep 0.5
  done
  if $ok; then
    pass service_serves_metrics "$(systemctl show -p ActiveState,SubState,MainPID $UNIT | tr '\n' ' '); $(metrics | grep -E '^bbrscope_(observer|build)_info')"
  else
    fail service_serves_metrics "$(systemctl status --no-pager $UNIT 2>&1; journalctl -b -u $UNIT --no-pager | tail -20)"
  fi

  # The sandbox the kernel applies to the running process, against what the unit file asks.
  local pid unitfile want st
  pid=$(systemctl show -p MainPID --value $UNIT)
  unitfile=/lib/systemd/system/$UNIT
  want=$(cap_mask $unitfile)
  st=$(grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/$pid/status 2>&1)
  if grep -qx "CapEff:	$want" <<<"$st" && grep -qx "CapPrm:	$want" <<<"$st" &&
    grep -qx "CapBnd:	$want" <<<"$st" && grep -qx "NoNewPrivs:	1" <<<"$st" && grep -qx "Seccomp:	2" <<<"$st"; then
    pass sandbox_capabilities "unit's set $want; /proc/$pid/status: $st"
  else
    fail sandbox_capabilities "unit's set $want; /proc/$pid/status: $st"
  fi
  # ProtectSystem=strict: its / and /usr are read-only mounts in its own mount namespace;
  # ProtectHome: /root is not the real one; PrivateTmp: its own /tmp.
  local mi root_opts
  mi=$(cat /proc/$pid/mountinfo)
  root_opts=$(awk '$5 == "/" {print $6}' <<<"$mi" | tail -1)
  local cg mem cpu
  cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/$pid/cgroup)
  mem=$(cat $cg/memory.max)
  cpu=$(cat $cg/cpu.max)
  if [ "$(readlink /proc/$pid/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ] && [[ $root_opts == ro* ]] &&
    awk '$5 == "/tmp" || $5 == "/root" {n++} END {exit n < 2}' <<<"$mi" &&
    [ "$mem" = 536870912 ] && [ "$cpu" = "50000 100000" ]; then
    pass sandbox_mounts_and_limits "/ mounted $root_opts; $(awk '$5 ~ /^\/(tmp|root|usr|sys\/fs\/bpf)$/ {print $5, $6}' <<<"$mi" | tr '\n' ';'); memory.max $mem; cpu.max $cpu"
  else
    fail sandbox_mounts_and_limits "ns $(readlink /proc/$pid/ns/mnt) vs $(readlink /proc/1/ns/mnt); / $root_opts; memory.max $mem; cpu.max $cpu; $mi"
  fi

  # Real traffic: 3 cubic and 2 bbr flows of 256 KiB to the port the exporter counts.
  modprobe tcp_bbr
  start_sink
  local fl
  fl=$(flows cubic 3 262144 2>&1 && flows bbr 2 262144 2>&1)
  if [ $? -ne 0 ]; then fail traffic_made "$fl"; else pass traffic_made "3 cubic + 2 bbr flows of 262144 bytes to 127.0.0.1:$PORT; getsockopt read each algorithm back"; fi
  if wait_metric 'bbrscope_flows_closed_total{cc="cubic"} 3' 60 && wait_metric 'bbrscope_flows_closed_total{cc="bbr"} 2' 10; then
    local m opened bytes_ok
    m=$(metrics)
    opened=$(grep '^bbrscope_flows_opened_total' <<<"$m" | sort)
    # Bytes acked per algorithm within 5% of what was sent.
    bytes_ok=$(awk -F'[ "]' '/^bbrscope_acked_bytes_total/ {want = ($2 == "cubic") ? 3 * 262144 : 2 * 262144; d = $NF - want; if (d < 0) d = -d; if (d > 0.05 * want) bad = 1; n++} END {print (n == 2 && !bad) ? "yes" : "no"}' <<<"$m")
    if [ "$opened" = $'bbrscope_flows_opened_total{cc="bbr"} 2\nbbrscope_flows_opened_total{cc="cubic"} 3' ] &&
      [ "$bytes_ok" = yes ]; then
      pass flows_counted_per_cc "$opened; $(grep '^bbrscope_acked_bytes_total' <<<"$m" | tr '\n' ';')"
    else
      fail flows_counted_per_cc "bytes within 5%: $bytes_ok; $opened; $(grep -E '^bbrscope_(acked_bytes|flows_closed)_total' <<<"$m")"
    fi
  else
    fail flows_counted_per_cc "$(metrics | grep -E '^bbrscope_flows_(opened|closed)_total|observer_info|ring_drops')"
  fi

  # The default algorithm per network namespace. Under the unit: its own namespace only, named
  # "self" (ProtectProc=invisible hides PID 1's, so it cannot tell it is the initial one); a
  # named namespace's needs setns, which CAP_SYS_ADMIN and RestrictNamespaces= deny it
  # (docs/export.md). The same binary run by root outside the unit reports the named one.
  ip netns add chk && ip netns exec chk sysctl -qw net.ipv4.tcp_congestion_control=reno
  local own named plain
  if wait_metric 'bbrscope_default_cc_info{netns="self",cc="cubic"} 1' 15; then own=yes; else own=no; fi
  sleep 3
  named=$(metrics | grep -c 'netns="chk"')
  /usr/bin/bbrscope export --listen 127.0.0.1:9581 --port 9 2>/dev/null &
  local plain_pid=$!
  for ((i = 0; i < 60; i++)); do
    plain=$(curl -sf --max-time 5 http://127.0.0.1:9581/metrics | grep '^bbrscope_default_cc_info')
    grep -q 'netns="chk",cc="reno"' <<<"$plain" && break
    sleep 0.5
  done
  kill $plain_pid
  wait $plain_pid 2>/dev/null
  if [ $own = yes ] && [ "$named" = 0 ] && grep -qF 'bbrscope_default_cc_info{netns="chk",cc="reno"} 1' <<<"$plain"; then
    pass default_cc_under_the_unit "unit: $(metrics | grep '^bbrscope_default_cc_info'); root outside the unit: $(tr '\n' ' ' <<<"$plain")"
  else
    fail default_cc_under_the_unit "own reported: $own; chk series under the unit: $named; unit: $(metrics | grep '^bbrscope_default_cc_info'); outside: $plain"
  fi
  ip netns del chk

  # Stopping the service leaves none of its BPF programs or links behind.
  local during after new
  during=$(bpf_objects)
  new=$(comm -13 <(sort <<<"$before") <(sort <<<"$during"))
  systemctl stop $UNIT
  sleep 1
  after=$(bpf_objects)
  local left
  left=$(comm -12 <(sort <<<"$new") <(sort <<<"$after"))
  if grep -q '^prog .* bbrscope' <<<"$new" && grep -q '^link' <<<"$new" && [ -z "$left" ]; then
    pass stop_detaches "while running: $(tr '\n' ';' <<<"$new"); after stop: none of them"
  else
    fail stop_detaches "while running (new): $(tr '\n' ';' <<<"$new"); left after stop: $(tr '\n' ';' <<<"$left")"
  fi
  systemctl start $UNIT

  # man and the three shells' completions, loaded the way each shell loads them.
  local man
  man=$(MANWIDTH=100 man -P cat bbrscope 2>&1)
  if grep -q 'bbrscope-apply' <<<"$man" && grep -q 'export' <<<"$man" && MANWIDTH=100 man -P cat bbrscope-export | grep -q -- '--listen'; then
    pass man_renders "$(head -12 <<<"$man")"
  else
    fail man_renders "$man"
  fi
  local c
  c=$(bash -c '. /usr/share/bash-completion/bash_completion; __load_completion bbrscope || exit 1
    spec=$(complete -p bbrscope) || exit 1; fn=${spec##*-F }; fn=${fn%% *}
    COMP_WORDS=(bbrscope ap); COMP_CWORD=1; COMP_LINE="bbrscope ap"; COMP_POINT=${#COMP_LINE}
    "$fn" bbrscope ap bbrscope; echo "$spec => ${COMPREPLY[*]}"' 2>&1)
  if [[ $c == *"=> apply" ]]; then pass bash_completes "$c"; else fail bash_completes "$c"; fi
  # zsh: an interactive zsh on a pseudo-terminal (zpty), compinit, then "bbrscope ap" TAB and a
  # key bound to a widget that writes the edited line out. Each step waits for the shell's
  # answer (compinit alone takes seconds under TCG).
  rm -f /tmp/zsh-buffer
  c=$(zsh -f -c '
    zmodload zsh/zpty
    zpty z zsh -f -i
    upto() { local out chunk i; for i in {1..600}; do zpty -rt z chunk && out+=$chunk; [[ $out == *$1* ]] && return 0; sleep 0.1; done; print -r -- "no $1 in: $out"; return 1 }
    zpty -w z "autoload -Uz compinit && compinit -u; print RE\"\"ADY1"
    upto READY1 || exit 1
    zpty -w z "show() { print -r -- \"<\$BUFFER>\" > /tmp/zsh-buffer }; zle -N show; bindkey \"^T\" show; print RE\"\"ADY2"
    upto READY2 || exit 1
    zpty -w -n z $'"'"'bbrscope ap\t\x14'"'"'
    for i in {1..300}; do [[ -s /tmp/zsh-buffer ]] && break; sleep 0.1; done
    zpty -d z
    cat /tmp/zsh-buffer; print -r -- "(_comps[bbrscope]: $(zsh -f -c "autoload -Uz compinit && compinit -u && print \$_comps[bbrscope]"))"' 2>&1)
  if [[ $c == "<bbrscope apply >"* ]]; then pass zsh_completes "$c"; else fail zsh_completes "$c"; fi
  c=$(fish -c 'complete -C "bbrscope ap"' 2>&1)
  if [[ $c == apply* ]] && [ "$(wc -l <<<"$c")" = 1 ]; then pass fish_completes "$c"; else fail fish_completes "$c"; fi

  # A congestion-control pin on a slice, by the template unit: applied now, and after a reboot.
  mkdir -p /etc/bbrscope/cgroup-pin
  echo ALGORITHM=bbr >/etc/bbrscope/cgroup-pin/$SLICE.conf
  if systemctl enable --now $PIN_UNIT 2>&1; then
    local in out
    in=$(probe_in_slice 2>&1)
    out=$(probe_cc 2>&1)
    if [ "$in" = bbr ] && [ "$out" = cubic ]; then
      pass cgroup_pin_applies "in $SLICE: $in; outside: $out; $(ls /sys/fs/bpf/bbrscope)"
    else
      fail cgroup_pin_applies "in $SLICE: $in; outside: $out; $(systemctl status --no-pager $PIN_UNIT 2>&1 | tail -8)"
    fi
  else
    fail cgroup_pin_applies "$(systemctl status --no-pager $PIN_UNIT 2>&1 | tail -12)"
  fi

  # apply system-wide (persisted by its sysctl.d drop-in), then an upgrade: the running exporter
  # is restarted (a new main pid) and the change and its record stay.
  local o
  o=$(bbrscope apply $SYSTEM_CC 2>&1)
  if [ "$(sysctl -n $CC)" = $SYSTEM_CC ] && [ -f $DROPIN ] && [ -f $RECORD ]; then
    pass apply_system "$CC = $(sysctl -n $CC); $(cat $DROPIN | grep -v '^#')"
  else
    fail apply_system "$o; $CC = $(sysctl -n $CC); $(ls $DROPIN $RECORD 2>&1)"
  fi
  local pid_before pid_after version
  pid_before=$(systemctl show -p MainPID --value $UNIT)
  rm -rf /tmp/up
  dpkg-deb -R /root/bbrscope.deb /tmp/up
  sed -i 's/^Version: .*/&.1/' /tmp/up/DEBIAN/control
  dpkg-deb -b /tmp/up /root/bbrscope-up.deb >/dev/null
  o=$(dpkg -i /root/bbrscope-up.deb 2>&1)
  version=$(dpkg-query -W -f='${Version}' bbrscope)
  for ((i = 0; i < 120; i++)); do metrics | grep -q '^bbrscope_observer_info' && break; sleep 0.5; done
  pid_after=$(systemctl show -p MainPID --value $UNIT)
  if [[ $version == *.1 ]] && systemctl is-active -q $UNIT && [ "$pid_after" != "$pid_before" ] && [ "$pid_after" != 0 ] &&
    metrics | grep -q '^bbrscope_observer_info' && [ "$(sysctl -n $CC)" = $SYSTEM_CC ] && [ -f $RECORD ]; then
    pass upgrade_restarts_exporter "version $version; exporter pid $pid_before then $pid_after; $CC = $(sysctl -n $CC)"
  else
    fail upgrade_restarts_exporter "$o; version $version; exporter pid $pid_before then $pid_after ($(systemctl is-active $UNIT)); $CC = $(sysctl -n $CC); $(ls $RECORD 2>&1)"
  fi
  kill $SINK
  echo 2 >$PHASE_FILE
  finish 1
  systemctl reboot
}

phase2() {
  echo 3 >$PHASE_FILE
  sync
  local now
  now=$(cat /proc/sys/kernel/random/boot_id)
  if [ "$now" != "$(cat $STATE/boot1)" ]; then
    pass rebooted "boot id $(cat $STATE/boot1) then $now; $(systemctl is-system-running 2>&1)"
  else
    fail rebooted "the same boot id $now"
  fi
  # Enabled units came back by themselves.
  local i ok=false
  for ((i = 0; i < 120; i++)); do
    metrics | grep -q '^bbrscope_observer_info' && { ok=true; break; }
    sleep 0.5
  done
  if $ok; then pass exporter_started_at_boot "$(systemctl show -p ActiveState,ActiveEnterTimestamp $UNIT | tr '\n' ' ')"; else fail exporter_started_at_boot "$(systemctl status --no-pager $UNIT 2>&1 | tail -12)"; fi
  start_sink
  local in out
  in=$(probe_in_slice 2>&1)
  out=$(probe_cc 2>&1)
  if systemctl is-active -q $PIN_UNIT && [ "$in" = bbr ] && [ "$out" = $SYSTEM_CC ]; then
    pass cgroup_pin_restored_at_boot "in $SLICE: $in; outside: $out; $(ls /sys/fs/bpf/bbrscope)"
  else
    fail cgroup_pin_restored_at_boot "in $SLICE: $in; outside: $out; $(systemctl status --no-pager $PIN_UNIT 2>&1 | tail -12)"
  fi
  systemctl disable --now $PIN_UNIT 2>&1
  in=$(probe_in_slice 2>&1)
  if [ "$in" = $SYSTEM_CC ] && [ -z "$(ls -A /sys/fs/bpf/bbrscope 2>/dev/null)" ]; then
    pass cgroup_pin_reverted "in $SLICE after disable --now: $in; /sys/fs/bpf/bbrscope: $(ls -A /sys/fs/bpf/bbrscope 2>&1)"
  else
    fail cgroup_pin_reverted "in $SLICE: $in; $(ls -A /sys/fs/bpf/bbrscope 2>&1); $(systemctl status --no-pager $PIN_UNIT 2>&1 | tail -8)"
  fi

  # The drop-in set the system default at boot.
  if [ "$(sysctl -n $CC)" = $SYSTEM_CC ]; then pass apply_persisted_at_boot "$CC = $SYSTEM_CC after the reboot"; else fail apply_persisted_at_boot "$CC = $(sysctl -n $CC); $(ls $DROPIN 2>&1)"; fi

  # Removed and purged with the admin keeping the change: it stays in force, reported, and so
  # does its record.
  local keep purge
  keep=$(BBRSCOPE_KEEP_CHANGES=yes dpkg -r bbrscope 2>&1)
  purge=$(dpkg --purge bbrscope 2>&1)
  if [ "$(sysctl -n $CC)" = $SYSTEM_CC ] && [ -f $DROPIN ] && [ -f $RECORD ] && grep -q 'keeping what bbrscope apply changed' <<<"$keep" &&
    grep -q "$SYSTEM_CC" <<<"$keep" && grep -q '/var/lib/bbrscope is kept' <<<"$purge"; then
    pass remove_keeps_when_asked "$CC = $SYSTEM_CC; $keep; $purge"
  else
    fail remove_keeps_when_asked "$CC = $(sysctl -n $CC); $(ls $DROPIN $RECORD 2>&1); remove: $keep; purge: $purge"
  fi
  dpkg -i /root/bbrscope.deb >/dev/null 2>&1
  systemctl enable --now $UNIT 2>&1

  # Purge with the exporter and the pin running and enabled: both stopped (the pin reverted),
  # what apply changed undone (reno back to cubic, the drop-in gone), their enable links and
  # bbrscope's records gone, and no file dpkg owned left.
  systemctl enable --now $PIN_UNIT
  local owned out left links
  owned=$(dpkg -L bbrscope | while read -r f; do [ -d "$f" ] || echo "$f"; done)
  out=$(dpkg --purge bbrscope 2>&1)
  left=$(while read -r f; do if [ -e "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done <<<"$owned")
  links=$(find /etc/systemd/system -name 'bbrscope-exporter*' -o -name 'bbrscope-cgroup-pin*' 2>/dev/null)
  in=$(probe_in_slice 2>&1)
  if ! systemctl is-active -q $UNIT && ! pgrep -x bbrscope >/dev/null && [ -z "$left" ] && [ -z "$links" ] &&
    ! dpkg-query -W -f='${Status}' bbrscope 2>/dev/null | grep -q installed && ! bpf_objects | grep -q bbrscope &&
    [ "$in" = cubic ] && [ -z "$(ls -A /sys/fs/bpf/bbrscope 2>/dev/null)" ] && [ ! -e /var/lib/bbrscope ] &&
    [ "$(sysctl -n $CC)" = cubic ] && [ ! -e $DROPIN ]; then
    pass purge_is_clean "$(wc -l <<<"$owned") files removed; exporter $(systemctl is-active $UNIT); in $SLICE: $in; $CC = cubic; $out; left: $(ls -d /etc/bbrscope/cgroup-pin/* 2>&1 | tr '\n' ' ')(the admin's)"
  else
    fail purge_is_clean "$out; still there: $left; enable links: $links; exporter $(systemctl is-active $UNIT); in $SLICE: $in; $CC = $(sysctl -n $CC); $(pgrep -a bbrscope); $(bpf_objects); $(ls -A /sys/fs/bpf/bbrscope /var/lib/bbrscope $DROPIN 2>&1)"
  fi
  kill $SINK
  echo 4 >$PHASE_FILE
  finish 2
  systemctl reboot
}

phase3() {
  echo 5 >$PHASE_FILE
  sync
  # After the purge and a reboot the system default is the kernel's again: nothing persisted.
  if [ "$(sysctl -n $CC)" = cubic ] && [ ! -e $DROPIN ] && [ ! -e /var/lib/bbrscope ] && [ ! -e /usr/bin/bbrscope ]; then
    pass purge_survives_reboot "$CC = cubic; $(ls /etc/sysctl.d)"
  else
    fail purge_survives_reboot "$CC = $(sysctl -n $CC); $(ls $DROPIN /var/lib/bbrscope 2>&1); $(grep -rs congestion /etc/sysctl.d /etc/sysctl.conf)"
  fi
  finish 3
  systemctl poweroff
}

case $(cat $PHASE_FILE 2>/dev/null || echo 1) in
  1) phase1 ;;
  2) phase2 ;;
  4) phase3 ;;
  *)
    # Another boot means a phase crashed the guest: stop here.
    fail boot_loop "booted again after phase $(cat $PHASE_FILE)"
    systemctl poweroff
    ;;
esac

# Helpers of the guest checks of bbrscope/tests/export.rs (system-check.sh, old-userland-check.sh),
# sourced by each: results as JSON lines on the guest's second serial port, and traffic made
# with perl (perl-base is Essential in Debian, so every root has it). The caller sets PORT.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=xterm
OUT=/dev/ttyS1
stty -F $OUT raw -echo 2>/dev/null

json_str() { printf '%s' "$1" | head -c 4000 | perl -0777 -pe 's/\\/\\\\/g; s/"/\\"/g; s/\n/\\n/g; s/[\x00-\x1f]/ /g'; }
# send KIND NAME PASS DETAIL
result() {
  printf '{"kind":"test","name":"%s","pass":%s,"detail":"%s"}\n' "$1" "$2" "$(json_str "$3")" >"$OUT"
}
pass() { result "$1" true "$2"; }
fail() { result "$1" false "$2"; }
# check NAME COMMAND...: passes when the command does; its output is the detail.
check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then pass "$name" "$out"; else fail "$name" "$out"; fi
}
finish() {
  printf '{"kind":"done","phase":"%s"}\n' "$1" >"$OUT"
  sync
}

# A listener on 127.0.0.1:PORT that reads each connection to its end (perl: Essential in Debian).
start_sink() {
  perl -MIO::Socket::INET -e '
    $SIG{CHLD} = "IGNORE";
    my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => '$PORT', Listen => 64, ReuseAddr => 1) or die "listen: $!";
    while (my $c = $l->accept) { if (!fork) { my $b; 1 while sysread($c, $b, 65536); exit 0 } close $c }' &
  SINK=$!
  sleep 1
}
# flows CC N BYTES: N connections to the sink with TCP_CONGESTION=CC, each sending BYTES and
# waiting for the peer's close. Fails unless getsockopt reads CC back on each.
flows() {
  perl -MIO::Socket::INET -MSocket=IPPROTO_TCP -e '
    my ($cc, $n, $bytes) = @ARGV;
    for (1 .. $n) {
      my $s = IO::Socket::INET->new(Proto => "tcp") or die "socket: $!";
      setsockopt($s, IPPROTO_TCP, 13, $cc) or die "TCP_CONGESTION $cc: $!";
      connect($s, pack_sockaddr_in('$PORT', inet_aton("127.0.0.1"))) or die "connect: $!";
      my $got = unpack("Z*", getsockopt($s, IPPROTO_TCP, 13));
      die "asked for $cc, socket has $got\n" unless $got eq $cc;
      my $left = $bytes;
      while ($left > 0) { my $w = syswrite($s, "x" x ($left < 65536 ? $left : 65536)) or die "write: $!"; $left -= $w }
      shutdown($s, 1); my $b; 1 while sysread($s, $b, 4096);
    }' "$@"
}

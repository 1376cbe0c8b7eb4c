#!/bin/sh
# PID 1 of the kernel-matrix guest (cargo xtask kernels): mounts what bbrscope needs, loads the
# modules the tests need, runs the test driver (results on /dev/ttyS1), then powers off. Tools are
# called by path where busybox has a weaker applet of the same name (tc cannot do netem).
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# `ip netns add` keeps its namespaces here.
mkdir -p /run/netns /var && ln -s /run /var/run
/usr/sbin/ip link set lo up
rel=$(uname -r)
for m in $(cat "/lib/modules/$rel/preload"); do
  insmod "/lib/modules/$rel/$m" || echo "guest: insmod $m failed"
done
/usr/bin/xtask kernel-guest
echo "guest: driver exited with status $?"
poweroff -f

#!/bin/sh
# PID 1 of the initramfs that boots a whole Debian system (cargo xtask boot): loads the modules
# its root file system needs (an ext4 image on a virtio disk), mounts it and hands over to the
# system's own init (systemd).
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev
rel=$(uname -r)
for m in $(cat "/lib/modules/$rel/boot"); do
  insmod "/lib/modules/$rel/$m" || echo "boot: insmod $m failed"
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mkdir -p /newroot
if ! mount -t ext4 -o rw /dev/vda /newroot; then
  echo "boot: cannot mount /dev/vda"; poweroff -f
fi
mount --move /dev /newroot/dev
umount /proc
exec switch_root /newroot /lib/systemd/systemd

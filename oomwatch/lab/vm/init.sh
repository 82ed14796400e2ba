#!/bin/busybox sh
# PID 1 of the oomwatch lab VM (see oomwatch/lab/vm/__init__.py).
# Loads the virtio/9p modules, mounts the host's / read-only at /host and the session's
# writable share at /host/run/oomwatch-vm, gives the guest what the host's programs expect to
# write to (tmpfs on /tmp, /run, /dev/shm; host directories under /tmp the session names in
# its share's `keep` are bound back), mounts cgroup v2 with the memory controller
# enabled, then runs the session's run.sh chrooted into the host's root and powers off.
/bin/busybox --install -s /bin
export PATH=/bin

say() { echo "oomwatch-vm: $*"; }
fail() {
    say "FAILED: $*"
    poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for module in $(cat /modules/order); do
    insmod "/modules/$module.ko" || fail "insmod $module"
done

P9="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o "$P9,ro,cache=loose" host /host || fail "mounting the host's / over 9p"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/shm
ln -sf /proc/self/fd /host/dev/fd
mount -t tmpfs -o mode=1777 tmpfs /host/dev/shm
mount -t tmpfs -o mode=755 tmpfs /host/run
# The guest's /tmp is its own tmpfs; the host's stays reachable for the directories the
# session names in `keep` (a checkout under /tmp), bound back at their own paths.
mkdir -p /hosttmp
mount -o bind /host/tmp /hosttmp || fail "keeping the host's /tmp"
mount -t tmpfs -o mode=1777 tmpfs /host/tmp
mkdir -p /host/run/oomwatch-vm /host/run/lock
mount -t 9p -o "$P9" out /host/run/oomwatch-vm || fail "mounting the session share"
if [ -f /host/run/oomwatch-vm/keep ]; then
    while read -r kept; do
        case "$kept" in
            /tmp/?*)
                mkdir -p "/host$kept"
                mount -o bind "/hosttmp/${kept#/tmp/}" "/host$kept" || fail "binding $kept"
                ;;
        esac
    done < /host/run/oomwatch-vm/keep
fi
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup || fail "mounting cgroup2"
echo +memory > /host/sys/fs/cgroup/cgroup.subtree_control || fail "enabling memory"
hostname oomwatch-vm
ifconfig lo 127.0.0.1 up

say "kernel $(uname -r) up, running the session"
chroot /host /bin/sh /run/oomwatch-vm/run.sh
echo $? > /host/run/oomwatch-vm/rc
sync
poweroff -f

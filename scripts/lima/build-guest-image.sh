#!/usr/bin/env bash
# Build a bootable Debian 12 guest image for lever's Lima backend from Debian's packages only:
# debootstrap (minbase + systemd) with the cloud kernel, openssh, sudo, iptables, sshfs (for
# Lima's reverse-sshfs mount) and rootless podman. The result is a direct-kernel-boot disk:
# disk.qcow2 + vmlinuz + initrd.img, no bootloader.
#
# The image is cut for boot time under TCG (no KVM: every guest instruction is emulated,
# docs/bringup.md "Boot time"): Lima's cidata seed is read by lever-cidata (guest/), not
# cloud-init; units the jail never uses are masked; the initrd carries only the drivers the
# root disk needs.
#
# Usage (root): scripts/lima/build-guest-image.sh [cache-dir]
#   cache-dir defaults to $LEVER_LIMA_CACHE or ./.cache/lima. Output goes to
#   <cache-dir>/image-<hash of this script and guest/*>/, so a second run with the same
#   files is instant.
#   The last line printed is that directory.
set -euo pipefail

CACHE=${1:-${LEVER_LIMA_CACHE:-./.cache/lima}}
MIRROR=${LEVER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
self=$(readlink -f "$0")
guestdir=$(dirname "$self")/guest
key=$(cat "$self" "$guestdir"/* | sha256sum | cut -c1-12)
mkdir -p "$CACHE"
CACHE=$(readlink -f "$CACHE")
OUT=$CACHE/image-$key

if [ -f "$OUT/.done" ]; then
	echo "guest image cached: $OUT" >&2
	echo "$OUT"
	exit 0
fi
[ "$(id -u)" = 0 ] || { echo "build-guest-image.sh: debootstrap needs root" >&2; exit 1; }

WORK=$CACHE/image-$key.tmp
R=$WORK/rootfs
cleanup() {
	for m in dev/pts dev sys proc; do mountpoint -q "$R/$m" 2>/dev/null && umount "$R/$m"; done
	return 0
}
trap cleanup EXIT
rm -rf "$WORK"; mkdir -p "$WORK" "$CACHE/debs"
s=$(date +%s)

# Packages the guest needs offline: Lima's boot scripts (bash, sudo, systemd, iproute2),
# reverse-sshfs (sshfs), lever's egress engine (iptables, and nftables: iptables-nft does not
# pull in the nft binary verification reads the chain with), rootless podman (podman, uidmap,
# slirp4netns/passt, fuse-overlayfs, crun, dbus-user-session). No cloud-init: lever-cidata
# reads Lima's seed. git, make, diffutils, findutils, xz-utils, python3: the workbench's
# userland, which lever builds from the guest's own packages (the agent's tools run there:
# nothing is downloaded in the jail).
base=systemd-sysv,udev,dbus,linux-image-cloud-amd64,initramfs-tools,python3
base+=,openssh-server,sudo,bash,iproute2,ifupdown,isc-dhcp-client,iptables,ca-certificates
base+=,netbase,kmod,e2fsprogs,procps,less,sshfs,fuse3,nftables
base+=,git,make,diffutils,findutils,xz-utils
debootstrap --variant=minbase --cache-dir="$CACHE/debs" --include="$base" bookworm "$R" "$MIRROR"
echo "debootstrap: $(( $(date +%s) - s ))s" >&2

mount -t proc proc "$R/proc"; mount -t sysfs sys "$R/sys"
mount --bind /dev "$R/dev"; mount --bind /dev/pts "$R/dev/pts"
s1=$(date +%s)
chroot "$R" apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive chroot "$R" apt-get install -y -q --no-install-recommends \
	podman uidmap slirp4netns passt crun fuse-overlayfs libpam-systemd dbus-user-session \
	containernetworking-plugins >"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log" >&2; exit 1; }
chroot "$R" apt-get clean
rm -rf "$R"/var/lib/apt/lists/*
echo "podman packages: $(( $(date +%s) - s1 ))s" >&2

# A small initrd: the root disk is virtio-blk with ext4 (built in); list the virtio drivers
# instead of initramfs-tools' "most" (every storage driver, probed by udev under emulation).
printf 'MODULES=list\n' >"$R/etc/initramfs-tools/conf.d/lever.conf"
printf '%s\n' virtio_pci virtio_blk >>"$R/etc/initramfs-tools/modules"
chroot "$R" update-initramfs -u -k all >"$WORK/initramfs.log" 2>&1 || { tail -20 "$WORK/initramfs.log" >&2; exit 1; }
cleanup

# Guest configuration. Lima's seed (the cidata ISO: user, ssh keys, hostname, boot scripts)
# is read only from that local disk, by lever-cidata; nothing probes a metadata service.
echo lever-guest >"$R/etc/hostname"
printf '/dev/vda1  /  ext4  defaults,discard,errors=remount-ro  0 1\n' >"$R/etc/fstab"
install -m 0755 "$guestdir/lever-cidata" "$R/usr/local/sbin/lever-cidata"
cat >"$R/etc/systemd/system/lever-cidata.service" <<'EOT'
[Unit]
Description=lever: Lima's cidata seed (user, ssh keys, hostname)
# the script waits for the seed's device itself (no device unit: its 90 s timeout is too
# short for a TCG guest on a busy host)
Wants=systemd-udev-trigger.service
After=systemd-udev-trigger.service local-fs.target
Before=ssh.service systemd-user-sessions.service

[Service]
Type=oneshot
RemainAfterExit=yes
TimeoutStartSec=16min
ExecStart=/usr/local/sbin/lever-cidata seed
# a refused seed is named on the serial console, which Lima keeps (serial*.log)
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
EOT
cat >"$R/etc/systemd/system/lever-cidata-boot.service" <<'EOT'
[Unit]
Description=lever: Lima's boot scripts from the cidata seed
Requires=lever-cidata.service
After=lever-cidata.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/lever-cidata boot
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOT
# sshd needs the seed's user and host keys, and starts after logind so the first login
# Lima makes gets its user session at once (instead of a retry).
mkdir -p "$R/etc/systemd/system/ssh.service.d"
printf '[Unit]\nRequires=lever-cidata.service\nAfter=lever-cidata.service systemd-logind.service\n' \
	>"$R/etc/systemd/system/ssh.service.d/lever.conf"
chroot "$R" systemctl enable -q lever-cidata.service lever-cidata-boot.service
# The one NIC keeps the kernel's name, eth0 (what Lima's network-config names), and comes up
# by DHCP when udev sees it; no "udevadm settle" gate (ifupdown-pre) holds the boot.
ln -sf /dev/null "$R/etc/systemd/network/99-default.link"
grep -q interfaces.d "$R/etc/network/interfaces" 2>/dev/null ||
	printf 'source /etc/network/interfaces.d/*\nauto lo\niface lo inet loopback\n' >"$R/etc/network/interfaces"
printf 'allow-hotplug eth0\niface eth0 inet dhcp\n' >"$R/etc/network/interfaces.d/eth0"
# Units the jail never uses: package timers (the guest installs nothing after the build),
# maintenance timers, consoles with a login prompt, binfmt (no foreign binaries), and
# root's podman: its API service and socket (lever runs rootless podman as the run user),
# auto-update (measured: 2 min of a TCG boot) and restart units.
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
	e2scrub_reap.service fstrim.timer getty.target serial-getty@.service getty@.service \
	console-getty.service ifupdown-pre.service systemd-binfmt.service \
	podman.service podman.socket podman-auto-update.timer podman-auto-update.service \
	podman-restart.service podman-clean-transient.service systemd-pstore.service; do
	ln -sf /dev/null "$R/etc/systemd/system/$u"
done
# What Lima's boot scripts would otherwise write on the first boot, with the values they
# write, so they find it done: 11-colorterm-environment.sh then skips its "systemctl reload
# ssh", 20-rootless-base.sh its "sysctl --system", 35-setup-packages.sh its fuse.conf edit.
mkdir -p "$R/etc/ssh/sshd_config.d" "$R/etc/systemd/system/user@.service.d"
echo "AcceptEnv COLORTERM" >"$R/etc/ssh/sshd_config.d/10-acceptenv-colorterm.conf"
printf '[Service]\nDelegate=yes\n' >"$R/etc/systemd/system/user@.service.d/lima.conf"
printf '%s\n' kernel.unprivileged_userns_clone=1 'net.ipv4.ping_group_range = 0 2147483647' \
	net.ipv4.ip_unprivileged_port_start=0 >"$R/etc/sysctl.d/99-lima.conf"
grep -q '^user_allow_other' "$R/etc/fuse.conf" || echo user_allow_other >>"$R/etc/fuse.conf"
chroot "$R" passwd -l root >/dev/null
rm -f "$R"/etc/ssh/ssh_host_* # lever-cidata makes per-VM host keys on first boot

K=$(ls "$R"/boot/vmlinuz-*-cloud-amd64 | head -1)
I=$(ls "$R"/boot/initrd.img-*-cloud-amd64 | head -1)
cp "$K" "$WORK/vmlinuz"; cp "$I" "$WORK/initrd.img"

# ext4 populated from the directory (no loop mounts), at 1 MiB in a one-partition MBR disk.
s2=$(date +%s)
truncate -s 3G "$WORK/rootfs.ext4"
mkfs.ext4 -q -L lever-root -d "$R" "$WORK/rootfs.ext4"
truncate -s 3073M "$WORK/disk.raw"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$WORK/disk.raw"
dd if="$WORK/rootfs.ext4" of="$WORK/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
rm -f "$WORK/rootfs.ext4"
qemu-img convert -c -O qcow2 "$WORK/disk.raw" "$WORK/disk.qcow2"
rm -f "$WORK/disk.raw"
echo "disk: $(( $(date +%s) - s2 ))s" >&2
rm -rf "$R" "$WORK/apt.log"

touch "$WORK/.done"
rm -rf "$OUT"; mv "$WORK" "$OUT"
trap - EXIT
ls -lh "$OUT" >&2
echo "guest image built in $(( $(date +%s) - s ))s" >&2
echo "$OUT"

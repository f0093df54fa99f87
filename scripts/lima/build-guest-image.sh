#!/usr/bin/env bash
# Build a bootable Debian 12 guest image for lever's Lima backend from Debian's packages only:
# debootstrap (minbase + systemd) with the cloud kernel, cloud-init restricted to local seeds,
# openssh, sudo, iptables, sshfs (for Lima's reverse-sshfs mount) and rootless podman. The
# result is a direct-kernel-boot disk: disk.qcow2 + vmlinuz + initrd.img, no bootloader.
#
# Usage (root): scripts/lima/build-guest-image.sh [cache-dir]
#   cache-dir defaults to $LEVER_LIMA_CACHE or ./.cache/lima. Output goes to
#   <cache-dir>/image-<hash of this script>/, so a second run with the same script is instant.
#   The last line printed is that directory.
set -euo pipefail

CACHE=${1:-${LEVER_LIMA_CACHE:-./.cache/lima}}
MIRROR=${LEVER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
self=$(readlink -f "$0")
key=$(sha256sum "$self" | cut -c1-12)
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

# Packages the guest needs offline: Lima's boot scripts (bash, sudo, systemd, iproute2,
# cloud-init for the cidata seed), reverse-sshfs (sshfs), lever's egress engine (iptables,
# and nftables: iptables-nft does not pull in the nft binary verification reads the chain with),
# rootless podman (podman, uidmap, slirp4netns/passt, fuse-overlayfs, crun, dbus-user-session).
# python3-cffi-backend: cloud-init's crypto dependency is not pulled in by minbase.
# git, make, diffutils, findutils, xz-utils: the workbench's userland, which lever builds from
# the guest's own packages (the agent's tools run there: nothing is downloaded in the jail).
base=systemd-sysv,udev,dbus,linux-image-cloud-amd64,initramfs-tools,cloud-init,python3-cffi-backend
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
cleanup

# Guest configuration. cloud-init may only read the local NoCloud seed Lima attaches: it must
# never probe a cloud metadata service on the network.
echo lever-guest >"$R/etc/hostname"
printf '/dev/vda1  /  ext4  defaults,discard,errors=remount-ro  0 1\n' >"$R/etc/fstab"
mkdir -p "$R/etc/cloud/cloud.cfg.d"
cat >"$R/etc/cloud/cloud.cfg.d/90-lever.cfg" <<'EOT'
datasource_list: [ NoCloud, None ]
locale: C.UTF-8
manage_etc_hosts: localhost
EOT
grep -q interfaces.d "$R/etc/network/interfaces" 2>/dev/null ||
	printf 'source /etc/network/interfaces.d/*\nauto lo\niface lo inet loopback\n' >"$R/etc/network/interfaces"
chroot "$R" passwd -l root >/dev/null
rm -f "$R"/etc/ssh/ssh_host_* # cloud-init makes per-VM host keys on first boot

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

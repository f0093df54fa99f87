#!/usr/bin/env bash
# qemu-system-<arch> wrapper for hosts where KVM cannot be used (the VM owner cannot open
# /dev/kvm, or it is PVM): Lima v1.x always chooses accel=kvm on Linux for the native
# architecture, so rewrite the accelerator to TCG and "-cpu host" to "-cpu max". lever points
# QEMU_SYSTEM_<ARCH> at this file when the accelerator is tcg (lima.accel tcg, or auto
# without usable KVM) and sets LEVER_QEMU_SYSTEM to the real qemu-system-<arch>.
real=${LEVER_QEMU_SYSTEM:-$(command -v qemu-system-x86_64 || echo /usr/bin/qemu-system-x86_64)}
args=()
prev=
for a in "$@"; do
	a=${a//accel=kvm/accel=tcg}
	if [ "$prev" = -cpu ] && [ "$a" = host ]; then a=max; fi
	args+=("$a")
	prev=$a
done
exec "$real" "${args[@]}"

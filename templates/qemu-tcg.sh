#!/usr/bin/env bash
# qemu-system-x86_64 wrapper for hosts whose /dev/kvm cannot run a stock guest kernel (PVM
# here): Lima v1.x always chooses accel=kvm on Linux when /dev/kvm exists, so rewrite the
# accelerator to TCG and "-cpu host" to "-cpu max". lever points QEMU_SYSTEM_X86_64 at this
# file when lima.accel is tcg. The real binary: $LEVER_QEMU_SYSTEM or the one on PATH.
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

# shellcheck shell=sh
# Lima's bring-up facts (lima.GatherFacts), a part of a guest.Script after the sections
# prelude and the containment part (scripts/containment.sh, which says what is mounted at
# /lever, /dev/kvm and the userns sysctl): how the guest resolves the host alias, and the
# LIMADNS nat chain (root: the nat table needs it). Read-only. $1 is the host alias.
sec alias getent ahostsv4 "$1"
sec limadns iptables -w -t nat -S LIMADNS

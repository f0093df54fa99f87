# shellcheck shell=sh
# containers.StartService: a part of a guest.Script after the sections prelude, run as root.
# Runs $LEVER_SERVICE (scripts/podman-service.sh) as the run user $1 in the guest init's
# mount namespace: `ip netns exec` (the netns substrate's Runner) gives each command a
# private mount namespace with a fresh /sys that has no cgroup mounts, under which the OCI
# runtime cannot create a container. nsenter --mount keeps the current network namespace,
# so the service and its host-network containers still live in the jail's; on a VM it is a
# no-op. Where PID 1's namespace is closed to root (a microVM init), the parent's (on the
# netns substrate lever itself, in the host's mount namespace) is used.
m=/proc/1/ns/mnt
if ! { [ -r "$m" ] && nsenter --mount="$m" true 2>/dev/null; }; then m=/proc/$PPID/ns/mnt; fi
# The service may be a unit of the run user's systemd manager only where that manager lives
# in this network namespace (a VM: both are init's). On the netns substrate a host's
# manager (lingering: provisioning enables it) is in the host's namespace, and a service
# it starts, with the host-network containers it creates, would be outside the jail.
# (test -ef compares the namespaces' inodes: no process. dash, bash and busybox have it; a
# shell without it fails the test, and the service is then the detached one: safe.)
LEVER_PODMAN_UNIT=0
# shellcheck disable=SC3013
if [ /proc/1/ns/net -ef /proc/self/ns/net ]; then LEVER_PODMAN_UNIT=1; fi
export LEVER_PODMAN_UNIT
sec service nsenter --mount="$m" -- runuser -u "$1" -- /bin/sh -c "$LEVER_SERVICE"

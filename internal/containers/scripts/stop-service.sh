# shellcheck shell=sh
# containers.StopService, run as the run user: stops a service podman-service.sh detached (a
# systemd socket is left to systemd). Succeeds when there is nothing to stop.
pidf=/run/user/$(id -u)/podman/lever-service.pid
[ -f "$pidf" ] || exit 0
kill "$(cat "$pidf")" 2>/dev/null || true
rm -f "$pidf"

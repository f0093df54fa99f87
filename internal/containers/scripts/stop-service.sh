# shellcheck shell=sh
# containers.StopService, run as the run user: stops the service podman-service.sh started (its
# pid, a detached process or a transient unit's main process; a podman.socket an earlier lever
# enabled is left to systemd). Succeeds when there is nothing to stop.
pidf=/run/user/$(id -u)/podman/lever-service.pid
[ -f "$pidf" ] || exit 0
kill "$(cat "$pidf")" 2>/dev/null || true
rm -f "$pidf"

# shellcheck shell=sh
# containers.StopService, run as the run user: stops the service podman-service.sh started (its
# pid, a detached process or a transient unit's main process; a podman.socket an earlier lever
# enabled is left to systemd). Succeeds when there is nothing to stop.
# It returns only once the service is gone and its socket removed: podman-service.sh takes a
# socket without a pid file for systemd's podman.socket ("ready"), so a socket the stopped
# service left behind (killed before it removed it, or still shutting down when this returned)
# would make the next start skip its launch, and the next `lever up` create containers through
# whatever answers there, or nothing.
uid=$(id -u)
# LEVER_RUNTIME_DIR: the tests' stand-in for /run/user/<uid> (lever never sets it)
dir=${LEVER_RUNTIME_DIR:-/run/user/$uid}/podman
pidf=$dir/lever-service.pid
[ -f "$pidf" ] || exit 0
pid=$(cat "$pidf")
# gone: no such process, or a zombie (a detached service's parent may not reap it at once)
gone() { st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null); [ -z "$st" ] || [ "$st" = Z ] || [ "$st" = X ]; }
case $pid in
'' | *[!0-9]*) ;; # an empty pid file: a start that never recorded its service
*)
	kill "$pid" 2>/dev/null || true
	# podman finishes its requests and exits within a second or two; after 10 s it is killed
	i=0; while ! gone && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
	gone || { kill -9 "$pid" 2>/dev/null || true; i=0; while ! gone && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; }
	gone || { echo "podman service $pid did not exit" >&2; exit 1; }
	;;
esac
rm -f "$dir/podman.sock" "$pidf"

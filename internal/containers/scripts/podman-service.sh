# shellcheck shell=sh
# The run user's podman REST service, started once (containers.StartService runs this as the run
# user, from scripts/start-service.sh): `podman system service --time=0`, which serves until it
# is stopped. Where the user's systemd manager runs in the jail's network namespace
# (LEVER_PODMAN_UNIT=1, set by start-service.sh: a VM) it is a transient unit of that
# manager, so it outlives the ssh session that started it; otherwise (the netns substrate) a
# detached process. Its pid is kept beside the socket either way (an empty pid file while it
# starts: a socket without a live pid is down). Not the
# socket-activated podman.socket Debian ships: `systemctl --user enable --now` reloads the
# user's manager (2.3 s under TCG), and the service it activates quits after 5 s idle, so
# the next call (the lev step's, a minute later `lever run`) pays a fresh start (~1 s of
# waiting, 3 s of CPU under TCG). Prints "ready" (already listening) or "started".
set -eu
uid=$(id -u)
HOME=$(getent passwd "$uid" | cut -d: -f6)
# LEVER_RUNTIME_DIR: the tests' stand-in for /run/user/<uid> (lever never sets it)
XDG_RUNTIME_DIR=${LEVER_RUNTIME_DIR:-/run/user/$uid}
export HOME XDG_RUNTIME_DIR
sock=$XDG_RUNTIME_DIR/podman/podman.sock; pidf=$XDG_RUNTIME_DIR/podman/lever-service.pid
cd "$HOME"
# alive: the recorded pid runs and is not a zombie (kill -0 succeeds on a zombie, and a
# killed service's zombie lingers where init does not reap)
alive() { [ -f "$1" ] || return 1; st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$(cat "$1")/status" 2>/dev/null); [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; }
# Listening already: a socket without a pid file of ours (systemd's podman.socket, which an
# earlier lever enabled) or our service alive. The observation's rule, checked first.
if [ -S "$sock" ] && { [ ! -f "$pidf" ] || alive "$pidf"; }; then echo ready; exit 0; fi
unit=
if [ "${LEVER_PODMAN_UNIT:-0}" = 1 ] && [ -S "$XDG_RUNTIME_DIR/systemd/private" ] && command -v systemd-run >/dev/null; then unit=1; fi
log=$XDG_RUNTIME_DIR/podman/lever-service.log
# launch starts the service and records its pid. The unit runs podman through sh only to
# send its output to the log (exec: the unit's main pid is podman's); Delegate and
# KillMode=process as in podman's own unit, so stopping the service leaves the containers
# (their conmon) running. Each launch is a unit of a new name: a unit whose service has
# gone but whose cgroup still holds a process (conmon, the rootless pause process, where
# podman manages cgroups itself) stays loaded, and its name cannot be used again.
# shellcheck disable=SC2016 # $0 and $1 are the inner shell's arguments
launch() {
	: >"$pidf"
	if [ -n "$unit" ]; then
		read -r id </proc/sys/kernel/random/uuid
		name=lever-podman-$id.service
		systemd-run --user --quiet --collect --unit="$name" -p Delegate=yes -p KillMode=process \
			/bin/sh -c 'exec podman system service --time=0 "unix://$0" >"$1" 2>&1' "$sock" "$log" ||
			{ echo "podman service: systemd-run refused the unit $name" >&2; return 1; }
		systemctl --user show -p MainPID --value "$name" >"$pidf" ||
			{ echo "podman service: no main pid for the unit $name" >&2; return 1; }
	else
		setsid podman system service --time=0 "unix://$sock" >"$log" 2>&1 </dev/null &
		echo $! >"$pidf"
	fi
}
# a guest "reboot" (the netns substrate's stop) kills the rootless pause process but leaves
# its pid file, which podman would then try to join
pause=$XDG_RUNTIME_DIR/libpod/tmp/pause.pid
if [ -f "$pause" ] && ! alive "$pause"; then rm -f "$pause"; podman system migrate >/dev/null 2>&1 || true; fi
mkdir -p "$XDG_RUNTIME_DIR/podman"; rm -f "$sock"
# Two attempts: a service that dies at once over a stale rootless namespace is retried
# after podman system migrate, which resets it.
for attempt in 1 2; do
	launch || exit 1
	i=0; while [ ! -S "$sock" ] && [ $i -lt 300 ] && alive "$pidf"; do sleep 0.1; i=$((i+1)); done
	[ -S "$sock" ] && { echo started; exit 0; }
	[ $attempt = 1 ] && { podman system migrate >/dev/null 2>&1 || true; }
done
echo "podman service did not create $sock:" >&2; cat "$log" >&2; exit 1

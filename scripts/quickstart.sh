#!/usr/bin/env bash
# lever quickstart: from a fresh Debian machine to a running jail with the example project
# (examples/hello), `lever acceptance` and its report, then a real task: `lever run` of the
# example agent (git and the build in its workbench, a file written and read back).
#
#   sudo scripts/quickstart.sh [workdir]
#
# Backend: the best one this machine has, in lever's order of preference: orbstack, then
# lima (built locally: scripts/lima/build-limactl.sh and build-guest-image.sh, no image
# download), then -- only if you opt in with LEVER_DEV_NETNS=1 -- the netns development
# substrate (no hypervisor boundary; for trying lever out and for CI). LEVER_DEV_NETNS=1
# also skips the Lima build. Your LLM API key is read from $LEVER_API_KEY_FILE (mode 0600,
# outside the tree); without one, a throwaway key and a local upstream are used so the
# whole flow still runs.
#
# limactl refuses root: run as root, the script creates an unprivileged owner for the VM
# ($LEVER_QUICKSTART_USER, default leverqs) and runs lever as that user; run as a user, it
# runs lever as you. Extra acceptance flags (targets standing for the LAN, the internet...)
# come from $LEVER_ACCEPTANCE_ARGS.
#
# On the netns substrate the acceptance targets that stand for the LAN, the metadata
# service and the internet are addresses in a namespace this script makes (lvqs-world):
# the jail has no route anywhere else.
set -euo pipefail
# Root installs the packages; a fresh Debian machine has no sudo, so as root this runs
# directly and as a user it asks sudo for root itself (one command either way).
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null || { echo "$0 installs Debian packages: run it as root (sudo is not installed here)" >&2; exit 2; }
	exec sudo --preserve-env=LEVER_API_KEY_FILE,LEVER_DEV_NETNS,LEVER_ACCEPTANCE_ARGS,LEVER_QUICKSTART_USER,LEVER_DEBIAN_MIRROR bash "$0" "$@"
fi
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WORK=${1:-/tmp/lever-quickstart}
export PATH=/usr/local/go/bin:$ROOT/bin:$PATH
t0=$(date +%s)
say() { echo "=== $* ($(( $(date +%s) - t0 ))s)"; }

say "packages"
export DEBIAN_FRONTEND=noninteractive
# The same list as .ci/run: podman and friends for the jail, qemu/debootstrap/ssh for Lima.
pkgs=(iptables nftables iproute2 podman uidmap slirp4netns passt fuse-overlayfs crun runc
	busybox-static ca-certificates make git procps python3
	qemu-system-x86 qemu-utils debootstrap fdisk openssh-client openssh-sftp-server)
if ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; then
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

say "build lever and lev"
make build >/dev/null

# Who runs lever: limactl refuses root, so as root the VM gets an unprivileged owner.
RUNAS=()
QS_USER=$(id -un)
if [ "$(id -u)" = 0 ] && [ "${LEVER_DEV_NETNS:-}" != 1 ]; then
	QS_USER=${LEVER_QUICKSTART_USER:-leverqs}
	id "$QS_USER" >/dev/null 2>&1 || useradd -m -s /bin/bash -c "lever quickstart" "$QS_USER"
	if [ -e /dev/kvm ] && getent group kvm >/dev/null; then usermod -aG kvm "$QS_USER"; fi
fi
QS_HOME=$(getent passwd "$QS_USER" | cut -d: -f6)
QS_UID=$(id -u "$QS_USER")
if [ "$QS_USER" != "$(id -un)" ]; then
	install -d -m 0700 -o "$QS_USER" -g "$QS_USER" "/run/user/$QS_UID"
	RUNAS=(runuser -u "$QS_USER" -- env -i HOME="$QS_HOME" USER="$QS_USER" LOGNAME="$QS_USER"
		XDG_RUNTIME_DIR="/run/user/$QS_UID" PATH="$PATH:/usr/sbin:/usr/bin:/sbin:/bin")
	[ $# -ge 1 ] || WORK=$QS_HOME/lever-quickstart
fi

limaprefix="" limaimage=""
if [ "${LEVER_DEV_NETNS:-}" != 1 ]; then
	say "lima: guest image and limactl (built locally, cached in .cache/lima)"
	limaimage=$(scripts/lima/build-guest-image.sh "$ROOT/.cache/lima" | tail -1)
	limaprefix=$(scripts/lima/build-limactl.sh "$ROOT/.cache/lima" | tail -1)
	export PATH=$limaprefix/bin:$PATH
	if [ ${#RUNAS[@]} -gt 0 ]; then
		RUNAS=(runuser -u "$QS_USER" -- env -i HOME="$QS_HOME" USER="$QS_USER" LOGNAME="$QS_USER"
			XDG_RUNTIME_DIR="/run/user/$QS_UID" PATH="$PATH:/usr/sbin:/usr/bin:/sbin:/bin")
	fi
fi
# lever and lev where the run user can read them
mkdir -p "$WORK.bin"; cp bin/lever bin/lev "$WORK.bin/"; chmod 755 "$WORK.bin" "$WORK.bin/lever" "$WORK.bin/lev"
lv() { "${RUNAS[@]}" env LEVER_STATE_DIR="$WORK/state" LEVER_LEV_BINARY="$WORK.bin/lev" "$WORK.bin/lever" "$@"; }

backend=""
probe() { lv backends --json | python3 -c "import json,sys; d={b['name']:b for b in json.load(sys.stdin)['backends']}; print('yes' if d.get('$1',{}).get('available',{}).get('usable') else 'no')" 2>/dev/null || echo no; }
if [ "${LEVER_DEV_NETNS:-}" = 1 ]; then backend=netns
elif [ "$(probe orbstack)" = yes ]; then backend=orbstack
elif [ "$(probe lima)" = yes ]; then backend=lima
else
	echo "no containment backend is usable here (lever backends says why); set LEVER_DEV_NETNS=1 to try the development substrate" >&2
	lv backends >&2 || true
	exit 2
fi
say "backend: $backend"

if [ -d "$WORK/state" ]; then lv destroy -c "$WORK/project/lever.yaml" >/dev/null 2>&1 || true; fi
rm -rf "$WORK"; mkdir -p "$WORK"
cp -r examples/hello "$WORK/project"
chmod -R a+rwX "$WORK/project"; chmod 755 "$WORK"
keyfile=${LEVER_API_KEY_FILE:-}
if [ -z "$keyfile" ]; then
	keyfile=$WORK/api-key
	echo "sk-quickstart-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$keyfile"
	chmod 600 "$keyfile"
	# A local OpenAI-compatible stand-in, so the flow runs without a real key: it plays the
	# agent's side of the task below (git and the build through the workbench's shell, a
	# file written and read back, then the summary), one tool call per model turn.
	python3 - <<'PY' >"$WORK/upstream.log" 2>&1 &
import http.server, json
STEPS = [
    ("shell", {"command": "git init -q . && git status --short | head -20"}),
    ("shell", {"command": "make build && cat build/SHA256SUMS"}),
    ("write_file", {"path": "NOTES.md", "content": "Built in the jail: build/hello-src.tar.gz (see build/SHA256SUMS).\n"}),
    ("read_file", {"path": "NOTES.md"}),
    ("submit_output", {"output": "git initialised, make build produced build/hello-src.tar.gz, NOTES.md written and read back"}),
]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))) or b"{}")
        n = sum(1 for m in req.get("messages", []) if m.get("role") == "tool")
        tool, args = STEPS[min(n, len(STEPS) - 1)]
        call = {"id": "call_%d" % n, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
        body = json.dumps({"id": "q%d" % n, "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 17999), H).serve_forever()
PY
	echo $! >"$WORK/upstream.pid"
	upstream=http://127.0.0.1:17999/v1
else
	upstream=$(sed -n 's/^  llm_upstream: //p' examples/hello/lever.yaml)
fi
sed -i "s|^backend: .*|backend: $backend|; s|^  api_key_file: .*|  api_key_file: $keyfile|; s|^  llm_upstream: .*|  llm_upstream: $upstream|" "$WORK/project/lever.yaml"
if [ "$backend" = lima ]; then
	cat >>"$WORK/project/lever.yaml" <<EOF_LIMA
lima:
  image: $limaimage/disk.qcow2
  kernel: $limaimage/vmlinuz
  initrd: $limaimage/initrd.img
  limactl: $limaprefix/bin/limactl
  accel: auto
  cpus: 2
  memory: 2GiB
EOF_LIMA
fi
if [ ${#RUNAS[@]} -gt 0 ]; then chown -R "$QS_USER:" "$WORK"; fi
export LEVER_STATE_DIR=$WORK/state LEVER_LEV_BINARY=$WORK.bin/lev
cfg=$WORK/project/lever.yaml

say "lever up"
# A script confirms the config's grants with --yes (a person at a terminal is asked);
# lever prints what it confirms.
lv up --yes -c "$cfg"

acc=()
if [ "$backend" = netns ]; then
	# the world the jail must not reach: one namespace, wired to the jail, listening
	ns=${LEVER_NETNS_PREFIX:-lever-}hello
	ip netns del lvqs-world 2>/dev/null || true
	ip netns add lvqs-world
	ip -n lvqs-world link set lo up
	ip link add lvqs-g netns "$ns" type veth peer name lvqs-w netns lvqs-world
	for a in 192.168.77.10/24 198.51.100.10/24 198.51.100.53/24 169.254.169.253/16 169.254.169.254/16; do ip -n lvqs-world addr add $a dev lvqs-w; done
	ip -n lvqs-world link set lvqs-w up
	ip -n "$ns" addr add 192.168.77.2/24 dev lvqs-g; ip -n "$ns" link set lvqs-g up
	ip -n "$ns" route add 169.254.0.0/16 dev lvqs-g; ip -n "$ns" route add 198.51.100.0/24 dev lvqs-g
	acc=(--lan 192.168.77.10:80 --internet 198.51.100.10:443 --dns 198.51.100.53:53 --link-local 169.254.169.253:80 --metadata 169.254.169.254:80)
fi

# shellcheck disable=SC2206
acc+=(${LEVER_ACCEPTANCE_ARGS:-})
say "lever acceptance"
set +e
lv acceptance "${acc[@]}" --out "$WORK/acceptance.md" -c "$cfg"
rc=$?
set -e
cat "$WORK/acceptance.md"

# A real task in the jail: the agent's tools run in its workbench (git and the project's
# build through the shell tool, a file written into the tree and read back), its model calls
# go through the broker's /llm/ route; the progress prints live, then the result.
say "lever run: a task in the jail"
set +e
lv run --allow shell -c "$cfg" --input "Initialise git, run make build, write NOTES.md and read it back."
runrc=$?
set -e
lv ps -c "$cfg" || true
if [ -f "$WORK/project/NOTES.md" ]; then say "the agent's NOTES.md, now in the host's tree:"; cat "$WORK/project/NOTES.md"; fi
[ $runrc -eq 0 ] || rc=$runrc
lvhint="${RUNAS[*]:+runuser -u $QS_USER -- }env LEVER_STATE_DIR=$WORK/state $WORK.bin/lever"
say "done: jail 'hello' on $backend (acceptance exit $rc, run exit $runrc)"
cat <<EOT
The daily loop from here (docs/daily.md):
  $lvhint run -c $cfg --input "..."     # give the agent a task; progress prints live
  $lvhint ps -c $cfg                    # the runs;  logs RUN [--follow], result RUN
  $lvhint shell -c $cfg manager         # a shell in the manager's workbench
  $lvhint stop -c $cfg                  # power off;  destroy tears everything down
EOT
exit $rc

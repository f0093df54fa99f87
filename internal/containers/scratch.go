package containers

import (
	"strconv"

	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// ScratchDir is every container's writable scratch space, and HOME in both of an agent's
// containers (levTreeEnv, bench): the root is read-only, so without it mktemp, a tool's
// cache or a shell's history have nowhere to go.
const ScratchDir = "/tmp"

// DefaultScratchBytes bounds the scratch tmpfs: it is memory (counted in the container's
// memory limit), so a runaway writer gets ENOSPC at 256 MiB instead of eating the
// container's whole 2 GiB.
const DefaultScratchBytes = 256 << 20

// scratchMount is the scratch tmpfs as an explicit mount. Not specgen's ReadWriteTmpfs:
// podman 4.3 (Debian 12's, the guests' and this host's) has no such field on the server
// side (`--read-only-tmpfs` is expanded by its CLI into mounts), so the REST service drops
// it unread and /tmp stayed part of the read-only root. An explicit tmpfs mount is honoured
// by every podman version. exec: builds and tests run what they compile under /tmp (go
// test, go run); the tree the agent writes is exec as well, so noexec here would stop
// nothing. U: the tmpfs belongs to the container's user (keep-id: the run user), who runs
// lev, the workbench's server and (in a user namespace of its own, mapped to that same
// uid) the shell tool's commands. Without it the tmpfs was container root's, and on the
// default workbench (a tree whose /tmp mount point is 0755: only root writes a tree,
// levimage) its root came out 0755, so mktemp in the shell tool got "Permission denied"
// (TestDailyLoopNetns), mode=1777 notwithstanding (it is still asked, for a runtime that
// honours it); notmpcopyup: the scratch starts empty, nothing of the image's /tmp copied.
func scratchMount(size int64) spec.Mount {
	return spec.Mount{
		Type: "tmpfs", Source: "tmpfs", Destination: ScratchDir,
		Options: []string{"rw", "nosuid", "nodev", "exec", "mode=1777", "notmpcopyup", "U", "size=" + strconv.FormatInt(size, 10)},
	}
}

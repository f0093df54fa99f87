package containers

import (
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/containers/podman/v5/pkg/specgen"
)

// Spec turns a planned container into podman's create request, with the hardening that is
// not negotiable: every capability dropped, no-new-privileges, pids and memory limits, the
// jail's own network namespace (the guest's "host" network), a read-only root with a
// size-limited writable tmpfs at /tmp (scratch.go), the run user kept as the container's
// user, and only the planned mounts.
func Spec(c Container) *specgen.SpecGenerator {
	s := specgen.NewSpecGenerator(c.Image, false)
	if c.Rootfs != "" {
		// The tree is root's and shared by every agent: each container gets its own
		// overlay on it, and its writes (there are none: the root is read-only) would go
		// to the container's upper dir, never into the tree.
		s = specgen.NewSpecGenerator(c.Rootfs, true)
		s.RootfsOverlay = &[]bool{true}[0]
	}
	s.Name = c.Name
	s.Labels = map[string]string{}
	for k, v := range c.Labels {
		s.Labels[k] = v
	}
	s.Entrypoint = c.Entrypoint
	s.Command = c.Command
	s.Env = c.Env
	t, f := true, false
	s.CapDrop = []string{"ALL"}
	s.NoNewPrivileges = &t
	s.Privileged = &f
	s.ReadOnlyFilesystem = &t
	s.NetNS = specgen.Namespace{NSMode: specgen.Host}
	s.UserNS = specgen.Namespace{NSMode: specgen.KeepID}
	s.OCIRuntime = c.Runtime
	s.WorkDir = c.WorkDir
	if s.WorkDir == "" {
		s.WorkDir = TreeDir
	}
	pids := c.PidsLimit
	mem := c.MemoryBytes
	s.ResourceLimits = &spec.LinuxResources{
		Pids:   &spec.LinuxPids{Limit: pids},
		Memory: &spec.LinuxMemory{Limit: &mem, Swap: &mem},
	}
	scratch := c.ScratchBytes
	if scratch <= 0 {
		scratch = DefaultScratchBytes
	}
	s.Mounts = append(s.Mounts, scratchMount(scratch))
	for _, m := range c.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: m.Source, Destination: m.Dest, Options: opts})
	}
	for _, d := range c.Devices {
		s.Devices = append(s.Devices, spec.LinuxDevice{Path: d})
	}
	return s
}

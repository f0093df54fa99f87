package bringup

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/mountcheck"
	"github.com/lever-jail/lever/internal/hosttrust"
	"github.com/lever-jail/lever/internal/levimage"
)

// managerKVM says whether the manager gets /dev/kvm: a backend that names the manager's
// devices (Lima: only under nested_virt) decides; otherwise nested_virt does. Devices are
// create-time only: a change shows as a new container hash and needs --fresh.
func (in *Instance) managerKVM() bool {
	if d, ok := in.b.(ManagerDeviceNamer); ok {
		for _, dev := range d.ManagerDevices() {
			if dev == "/dev/kvm" {
				return true
			}
		}
		return false
	}
	return in.cfg.NestedVirt
}

// Containers is the plan for this instance from the facts found so far: each agent's lev
// container and its bench.
func (in *Instance) Containers(f Facts) ([]containers.Container, error) {
	in.mustBePrepared("Containers")
	image := f.ImageRef
	if image == "" {
		image = in.imageRef
	}
	if in.source.Kind == levimage.Built {
		image = in.levTree() // lever's own lev runs as a tree
	}
	bench := f.BenchRef
	if bench == "" {
		// No workbench ref: a caller that never ran the image step (unit tests, which
		// build no workbench; a dry run before the workbench exists). The lev image
		// stands in; it has no userland.
		bench = image
	}
	return in.plan(f, image, bench)
}

// plan is Containers with the lev containers' image (or tree) and the workbench given.
func (in *Instance) plan(f Facts, image, bench string) ([]containers.Container, error) {
	protected, err := in.protected()
	if err != nil {
		return nil, err
	}
	p := containers.Params{
		Instance: in.cfg.Name, Image: image, BenchImage: bench, TreeSource: in.TreeSrc,
		ReadOnly: in.cfg.Manager.ReadOnly, Protected: protected, NestedVirt: in.managerKVM(),
		TicketRoot: agentsRoot(f.UID), LevHomeRoot: in.levHomeRoot(), BenchRoot: benchRoot(f.UID),
		Policy:  in.settings != nil && in.settings.HasPolicy,
		Command: []string{"serve", "--token-file", containers.TicketMount + "/" + FileToken},
		Env: map[string]string{
			"LEV_PROVIDER":          "openai",
			"LEV_PROVIDER_BASE_URL": in.brokerURL(f) + "/llm",
			"LEV_TLS_CA":            containers.TicketMount + "/" + FileCA,
			"LEV_TLS_CERT":          containers.TicketMount + "/" + FileCert,
			"LEV_TLS_KEY":           containers.TicketMount + "/" + FileKey,
			// lev reads its settings when it starts: a new hash here changes the lev
			// containers' spec, so the next up restarts them on the settings it pushed.
			"LEVER_SETTINGS": in.settingsHash,
		},
	}
	if rt := os.Getenv("LEVER_OCI_RUNTIME"); rt != "" {
		p.Runtime = rt
	}
	for _, w := range in.cfg.Workers {
		p.Workers = append(p.Workers, containers.WorkerSpec{Name: w.Name, Dir: w.Dir})
	}
	cs, err := containers.Plan(p)
	if err != nil {
		return nil, err
	}
	for i := range cs {
		if cs[i].Role == containers.Bench {
			continue
		}
		// An image of the user's choosing for a lev container (it must hold /lev and be
		// in the run user's podman already: no registry is used).
		if img := in.containerImage(cs[i]); img != "" {
			cs[i].UseImage(img)
		}
		if cs[i].Role == containers.Manager && in.cfg.Lev.Blueprint != "" {
			// lev.blueprint is a path in the tree; `lev run` with no agent runs it.
			cs[i].Env["LEV_BLUEPRINT"] = path.Join(containers.TreeDir, filepath.ToSlash(in.cfg.Lev.Blueprint))
		}
		cs[i].Rehash()
	}
	// No LEV_PROTECT: every lev home is outside the tree now, so the manager's tools
	// cannot reach a worker's lev state through the tree at all.
	return cs, nil
}

// containerImage is workers[].image (defaulting to manager.image) or manager.image for
// ct, or "" for lever's lev image.
func (in *Instance) containerImage(ct containers.Container) string {
	if ct.Role == containers.Manager {
		return in.cfg.Manager.Image
	}
	for _, w := range in.cfg.Workers {
		if ct.Env["LEVER_WORKER"] == w.Name && w.Image != "" {
			return w.Image
		}
	}
	return in.cfg.Manager.Image // a worker's image defaults to the manager's
}

// customImagesPresent checks the per-container images lever.yaml names, each by its key.
func (in *Instance) customImagesPresent(c Images) error {
	keys := map[string]string{}
	if in.cfg.Manager.Image != "" {
		keys[in.cfg.Manager.Image] = "manager.image"
	}
	for i, w := range in.cfg.Workers {
		if w.Image != "" {
			keys[w.Image] = fmt.Sprintf("workers[%d].image", i)
		}
	}
	for img, key := range keys {
		ok, err := c.ImageExists(img)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s %s is not in the run user's podman (no registry is used): load it there first", key, img)
		}
	}
	return nil
}

// checkMounts proves, in one guest call (lev's mounts helper, as root), that container
// ct, set up by podman init and not yet started (its process pid waiting), has at each
// of its in-tree mount points the very file or directory the tree holds at that path,
// reached with no symlink, mounted there (not seen through the writable tree above it),
// and read-only where planned so. The agents can write the tree: a manager that swaps a worker's
// dir, or a read_only or protected path, for a link to the run user's runtime dir would
// otherwise hand that directory (podman's socket included) to a container. Checking the
// sources before the start was not enough: the runtime resolves them again when it
// mounts, and a swap back and forth can fall between the two (internal/guestside/mountcheck).
// Made only when a container is about to start.
func (in *Instance) checkMounts(ctx context.Context, ct containers.Container, pid int) error {
	tree, ms := in.treeMountsOf(ct)
	req := mountcheck.Request{Pid: pid, Tree: tree, Mounts: ms}
	if len(req.Mounts) == 0 {
		return nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if in.levErr != nil {
		return in.levErr
	}
	if in.helper == nil {
		return fmt.Errorf("no guest helper (lev) chosen for this guest")
	}
	res, err := in.helper.Run(ctx, in.Runner, guestside.ModeMounts, body)
	if err != nil {
		return fmt.Errorf("checking the container's mounts of the tree: %w", err)
	}
	if res.ExitCode != 0 {
		// Quoted: the stderr names where a symlink the agent made resolves, any bytes
		// the agent chose, and the error reaches the host's terminal.
		return fmt.Errorf("refused: %q", strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(res.Stderr)), "lev: ")))
	}
	return nil
}

// protection is what in the tree the host trusts later, as bring-up found it: taken once
// by New and shared by the steps' copies of the Instance, so the trees' names and the
// containers' plans, each computed several times in a bring-up, see the same .git and
// read the host's tree once.
type protection struct {
	paths []string
	err   error
}

// protected is in's protection: New's snapshot, or (an Instance made without New, as in
// unit tests) taken now.
func (in *Instance) protected() ([]string, error) {
	if in.protection != nil {
		return in.protection.paths, in.protection.err
	}
	return protectedIn(in.cfg)
}

// protectedIn is what in the tree the host trusts later, read-only for the agents
// (internal/hosttrust): lever.yaml when it lies in the tree, and, unless lever.yaml says
// git: writable, the .git of the repositories at the tree's root and in the workers' dirs
// as they are now. Anything but an explicit writable protects .git: a Config made without
// Load (no defaults) fails safe.
func protectedIn(cfg *config.Config) ([]string, error) {
	var out []string
	if cfg.ConfigInTree != "" {
		out = append(out, cfg.ConfigInTree)
	}
	if cfg.Git == config.GitWritable || cfg.TreePath == "" {
		return out, nil
	}
	var dirs []string
	for _, w := range cfg.Workers {
		dirs = append(dirs, w.Dir)
	}
	git, err := hosttrust.Git(cfg.TreePath, dirs)
	if err != nil {
		return nil, fmt.Errorf("protecting the repositories' .git from the agents: %w", err)
	}
	return append(out, git...), nil
}

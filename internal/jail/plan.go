// Package jail runs lev's containers (the manager and the workers) in the guest run user's
// rootless podman, through the podman Go bindings. Plan is pure: it turns lever.yaml into
// the exact containers to run. Client executes that plan against a podman REST socket.
package jail

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
)

// Role is what a container is for.
type Role string

const (
	Manager Role = "manager"
	Worker  Role = "worker"
)

// Labels lever puts on every container it owns; status and destroy find them by these.
const (
	LabelInstance = "io.lever.instance"
	LabelRole     = "io.lever.role"
	LabelSpecHash = "io.lever.spec"
)

// TreeDir is where the project tree is mounted in the guest, and in the manager container.
const TreeDir = "/lever"

// TicketMount is where a worker sees its enrolment-ticket directory.
const TicketMount = "/run/lever"

// Mount is one bind mount from the guest into a container.
type Mount struct {
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	ReadOnly bool   `json:"read_only"`
}

// Container is one lev container, fully decided.
type Container struct {
	Name    string            `json:"name"`
	Role    Role              `json:"role"`
	Image   string            `json:"image"`
	Command []string          `json:"command"`
	Env     map[string]string `json:"env"`
	Mounts  []Mount           `json:"mounts"`
	// Devices are create-time only: a manager gains or loses /dev/kvm only at a fresh
	// create, so they are left out of the spec hash.
	Devices     []string          `json:"-"`
	PidsLimit   int64             `json:"pids_limit"`
	MemoryBytes int64             `json:"memory_bytes"`
	Runtime     string            `json:"runtime"`
	Labels      map[string]string `json:"-"`
}

// Hash identifies the container's settings; a running container whose label carries the
// same hash is left alone.
func (c Container) Hash() string {
	b, _ := json.Marshal(c)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// WorkerSpec is one worker from lever.yaml.
type WorkerSpec struct {
	Name string
	// Dir is relative to the tree.
	Dir string
}

// Params is everything Plan needs; the caller fills it from lever.yaml and the guest.
type Params struct {
	Instance string
	Image    string
	// TreeSource is the tree's path in the guest (default /lever; on the netns substrate,
	// whose guest shares the host's filesystem, the tree's host path). Containers always
	// see it at /lever.
	TreeSource string
	// ReadOnly are manager.read_only: paths inside the tree the manager sees read-only.
	ReadOnly   []string
	NestedVirt bool
	Workers    []WorkerSpec
	// TicketRoot is the run user's tmpfs directory holding one enrolment dir per agent
	// (AgentDir: "manager", "worker-<name>"), each mounted read-only at /run/lever in its
	// own container; never inside the tree.
	TicketRoot string
	// Env is lev's environment (provider base URL, cert paths): no secrets ever.
	Env         map[string]string
	Command     []string
	PidsLimit   int64
	MemoryBytes int64
	Runtime     string
}

// Defaults for the limits: enough for lev and its tools, small enough that a fork bomb or a
// runaway allocation stops at the container.
const (
	DefaultPidsLimit   = 512
	DefaultMemoryBytes = 2 << 30
)

// Plan decides the containers. It refuses a worker dir that escapes the tree and a
// ticket root inside the tree, the two ways a worker could end up seeing more than its own.
func Plan(p Params) ([]Container, error) {
	if p.Instance == "" || p.Image == "" {
		return nil, fmt.Errorf("jail plan: instance and image are required")
	}
	if p.PidsLimit == 0 {
		p.PidsLimit = DefaultPidsLimit
	}
	if p.MemoryBytes == 0 {
		p.MemoryBytes = DefaultMemoryBytes
	}
	if p.TreeSource == "" {
		p.TreeSource = TreeDir
	}
	if len(p.Workers) > 0 && p.TicketRoot == "" {
		return nil, fmt.Errorf("jail plan: workers need a ticket root")
	}
	if p.TicketRoot != "" {
		if !path.IsAbs(p.TicketRoot) {
			return nil, fmt.Errorf("jail plan: ticket root %q must be an absolute guest path", p.TicketRoot)
		}
		if within(TreeDir, path.Clean(p.TicketRoot)) || within(path.Clean(p.TreeSource), path.Clean(p.TicketRoot)) {
			return nil, fmt.Errorf("jail plan: ticket root %s is inside the tree; tickets must come from the run user's tmpfs", p.TicketRoot)
		}
	}
	base := func(name string, role Role) Container {
		env := map[string]string{}
		for k, v := range p.Env {
			env[k] = v
		}
		env["LEVER_ROLE"] = string(role)
		return Container{
			Name: name, Role: role, Image: p.Image,
			Command: append([]string(nil), p.Command...), Env: env,
			PidsLimit: p.PidsLimit, MemoryBytes: p.MemoryBytes, Runtime: p.Runtime,
			Labels: map[string]string{LabelInstance: p.Instance, LabelRole: string(role)},
		}
	}
	mgr := base(ContainerName(p.Instance, Manager, ""), Manager)
	mgr.Mounts = []Mount{{Source: p.TreeSource, Dest: TreeDir}}
	if p.TicketRoot != "" {
		mgr.Mounts = append(mgr.Mounts, Mount{Source: path.Join(p.TicketRoot, AgentDir(Manager, "")), Dest: TicketMount, ReadOnly: true})
	}
	ro := append([]string(nil), p.ReadOnly...)
	sort.Strings(ro)
	for _, r := range ro {
		// Paths inside the tree (relative, or under /lever), mounted read-only over the
		// manager's writable tree.
		rel := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r, TreeDir+"/")), "/")
		if r == "" || rel == "" || rel == "." || strings.HasPrefix(r, "..") || strings.Contains("/"+r+"/", "/../") || (path.IsAbs(r) && !within(TreeDir, path.Clean(r))) {
			return nil, fmt.Errorf("manager.read_only: %q must be a path inside the tree", r)
		}
		mgr.Mounts = append(mgr.Mounts, Mount{Source: path.Join(p.TreeSource, rel), Dest: path.Join(TreeDir, rel), ReadOnly: true})
	}
	if p.NestedVirt {
		mgr.Devices = []string{"/dev/kvm"}
	}
	out := []Container{mgr}
	seen := map[string]bool{}
	for _, w := range p.Workers {
		if w.Name == "" || strings.ContainsAny(w.Name, "/ \t") {
			return nil, fmt.Errorf("workers: bad worker name %q", w.Name)
		}
		if seen[w.Name] {
			return nil, fmt.Errorf("workers: %q appears twice", w.Name)
		}
		seen[w.Name] = true
		dir := path.Join(TreeDir, w.Dir)
		if path.IsAbs(w.Dir) || dir == TreeDir || !within(TreeDir, dir) {
			return nil, fmt.Errorf("workers.%s.dir: %q must be a subdirectory of the tree", w.Name, w.Dir)
		}
		c := base(ContainerName(p.Instance, Worker, w.Name), Worker)
		c.Mounts = []Mount{
			{Source: path.Join(p.TreeSource, strings.TrimPrefix(dir, TreeDir)), Dest: dir},
			{Source: path.Join(p.TicketRoot, AgentDir(Worker, w.Name)), Dest: TicketMount, ReadOnly: true},
		}
		c.Env["LEVER_WORKER"] = w.Name
		out = append(out, c)
	}
	for i := range out {
		out[i].Rehash()
	}
	return out, nil
}

// Rehash refreshes the spec-hash label after a caller adjusted the container.
func (c *Container) Rehash() { c.Labels[LabelSpecHash] = c.Hash() }

// AgentDir names an agent's enrolment directory under the ticket root.
func AgentDir(role Role, worker string) string {
	if role == Manager {
		return "manager"
	}
	return "worker-" + worker
}

// ContainerName is lever-<instance>-manager or lever-<instance>-worker-<name>.
func ContainerName(instance string, role Role, worker string) string {
	if role == Manager {
		return "lever-" + instance + "-manager"
	}
	return "lever-" + instance + "-worker-" + worker
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

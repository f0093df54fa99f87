// Package containers owns lev's podman containers (the manager and the workers, each with
// its workbench) in the guest run user's rootless podman, through the podman Go bindings.
// Plan is pure: it turns lever.yaml into the exact containers to run, with their hardened
// spec. Client executes that plan against a podman REST socket (create, start, inspect,
// exec, images, the REST service).
//
// It must not decide what the jail is: it takes the instance, paths and agents it is given
// (bring-up decides when to create, repair or start), never reads lever.yaml or the host,
// and never touches the firewall or the broker. "jail" names the whole product; this
// package holds only its containers.
package containers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
)

// Role is what a container is for.
type Role string

const (
	Manager Role = "manager"
	Worker  Role = "worker"
	// Bench is an agent's workbench container: where its tools' commands run, with the
	// agent's part of the tree and nothing of lev's (no token, no TLS files, no lev home).
	Bench Role = "bench"
)

// Labels lever puts on every container it owns; status and destroy find them by these.
const (
	LabelInstance = "io.lever.instance"
	LabelRole     = "io.lever.role"
	LabelSpecHash = "io.lever.spec"
)

// TreeDir is where the project tree is mounted in the guest, and in the manager container.
const TreeDir = "/lever"

// TicketMount is where an agent's lev container sees its enrolment dir (certificate, key,
// token, and the lev settings lever pushed).
const TicketMount = "/run/lever"

// Mount points and paths inside the containers (the contract between lever and lev).
const (
	// LevHomeMount is lev's home in the lev container: runs, labels, admitted blueprints,
	// the API socket. It is a guest dir outside the tree, so no agent tool can write it.
	LevHomeMount = "/var/lib/lev"
	// BenchMount holds the bench exec channel's socket, in both containers of an agent.
	BenchMount = "/run/lever-bench"
	// BenchSocket is the exec channel: lev dials it, `lev bench serve` listens on it.
	BenchSocket = BenchMount + "/exec.sock"
	// BenchPath is the workbench's PATH (a base image's own PATH is not inherited through
	// the bindings, and tools expect the usual one).
	BenchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// BenchGitEnv marks every directory safe for git in the workbench (see bench). lev's shell
// tool sends the same three variables with each command (internal/lev/sandbox benchEnv).
var BenchGitEnv = map[string]string{"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}

// LevEnv is the environment every lev container gets from the mounts Plan makes: lev finds
// its home, settings, token, API socket and workbench with no setup. policy says whether
// lever pushed a taint policy file (LEV_POLICY is set only then: an unset one falls back
// to lev's home, which no agent tool can write either).
func LevEnv(policy bool) map[string]string {
	env := map[string]string{
		"LEV_HOME":         LevHomeMount,
		"LEV_CONFIG":       TicketMount + "/config.toml",
		"LEV_AGENTS_DIR":   TicketMount + "/agents",
		"LEV_TOKEN_FILE":   TicketMount + "/token",
		"LEV_LISTEN":       "unix:" + LevHomeMount + "/api.sock",
		"LEV_BENCH_SOCKET": BenchSocket,
	}
	if policy {
		env["LEV_POLICY"] = TicketMount + "/policy.toml"
	}
	return env
}

// levTreeEnv is the lev image's environment (levimage.Build), set in a lev container
// that runs lev's tree instead.
var levTreeEnv = map[string]string{"PATH": "/", "HOME": "/tmp", "SSL_CERT_DIR": "/etc/ssl/certs"}

// UseImage makes c run img instead of lev's tree or image: an image of the user's
// choosing (manager.image, workers[].image) brings its own entrypoint and environment.
func (c *Container) UseImage(img string) {
	if c.Rootfs != "" {
		for k := range levTreeEnv {
			delete(c.Env, k)
		}
		c.Rootfs, c.Entrypoint = "", nil
	}
	c.Image = img
}

// Mount is one bind mount from the guest into a container.
type Mount struct {
	Source   string `json:"source"`
	Dest     string `json:"dest"`
	ReadOnly bool   `json:"read_only"`
}

// Container is one lev container, fully decided.
type Container struct {
	Name  string `json:"name"`
	Role  Role   `json:"role"`
	Image string `json:"image"`
	// Rootfs, instead of Image: a root-owned directory tree run as an overlaid root file
	// system (the default workbench, levimage.MakeRootDir).
	Rootfs string `json:"rootfs,omitempty"`
	// Entrypoint, when set, replaces the image's ENTRYPOINT (a user's base image must not
	// decide what the workbench runs).
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Command    []string          `json:"command"`
	WorkDir    string            `json:"workdir"`
	Env        map[string]string `json:"env"`
	Mounts     []Mount           `json:"mounts"`
	// Devices are create-time only: a manager gains or loses /dev/kvm only at a fresh
	// create, so they are left out of the spec hash.
	Devices     []string `json:"-"`
	PidsLimit   int64    `json:"pids_limit"`
	MemoryBytes int64    `json:"memory_bytes"`
	// ScratchBytes sizes the writable tmpfs at ScratchDir (scratch.go). In the hash, so
	// containers made before it (whose /tmp was read-only) are replaced.
	ScratchBytes int64             `json:"scratch_bytes"`
	Runtime      string            `json:"runtime"`
	Labels       map[string]string `json:"-"`
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
	// Image is what the lev containers run: an image, or the absolute path of lev's tree
	// (levimage.MakeLevRootDir), run as an overlaid root file system.
	Image string
	// BenchImage is the workbench every agent's bench container runs: an image, or the
	// absolute path of the default workbench's tree (levimage.MakeRootDir), which runs
	// as an overlaid root file system.
	BenchImage string
	// TreeSource is the tree's path in the guest (default /lever; on the netns substrate,
	// whose guest shares the host's filesystem, the tree's host path). Containers always
	// see it at /lever.
	TreeSource string
	// ReadOnly are manager.read_only: paths inside the tree the manager sees read-only.
	ReadOnly []string
	// Protected are paths inside the tree that something on the host trusts later
	// (internal/hosttrust: lever.yaml in the tree, the repositories' .git): read-only in
	// every container that sees them, a worker's included when they lie in its dir.
	Protected  []string
	NestedVirt bool
	Workers    []WorkerSpec
	// TicketRoot is the run user's tmpfs directory holding one enrolment dir per agent
	// (AgentDir: "manager", "worker-<name>"), each mounted read-only at /run/lever in its
	// own container; never inside the tree.
	TicketRoot string
	// LevHomeRoot holds one lev home per agent (AgentDir), mounted read-write at
	// LevHomeMount in that agent's lev container only; never inside the tree.
	LevHomeRoot string
	// BenchRoot holds one exec-channel dir per agent (AgentDir), mounted at BenchMount in
	// both of that agent's containers; never inside the tree.
	BenchRoot string
	// Policy: lever pushed a taint policy file into the agents' enrolment dirs.
	Policy bool
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

// Plan decides the containers: for each agent, its lev container and its workbench
// (`<lev container>-bench`). It refuses a worker dir that escapes the tree and any guest
// root (tickets, lev homes, bench dirs) inside the tree, the ways an agent could end up
// seeing more than its own or writing lev's state.
func Plan(p Params) ([]Container, error) {
	if p.Instance == "" || p.Image == "" || p.BenchImage == "" {
		return nil, fmt.Errorf("container plan: instance, image and bench image are required")
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
	for _, r := range []struct{ what, dir string }{{"ticket root", p.TicketRoot}, {"lev home root", p.LevHomeRoot}, {"bench root", p.BenchRoot}} {
		if r.dir == "" {
			return nil, fmt.Errorf("container plan: the %s is required", r.what)
		}
		if !path.IsAbs(r.dir) {
			return nil, fmt.Errorf("container plan: %s %q must be an absolute guest path", r.what, r.dir)
		}
		// Both spellings of the tree: where containers see it and where the guest has it.
		if fspath.Within(TreeDir, r.dir) || fspath.Within(p.TreeSource, r.dir) {
			return nil, fmt.Errorf("container plan: %s %s is inside the tree; the agents write the tree, so lev's files must come from outside it", r.what, r.dir)
		}
	}
	base := func(name string, role Role, worker string) Container {
		env := map[string]string{}
		for k, v := range p.Env {
			env[k] = v
		}
		for k, v := range LevEnv(p.Policy) {
			env[k] = v
		}
		env["LEVER_ROLE"] = string(role)
		if worker != "" {
			env["LEVER_WORKER"] = worker
		}
		c := Container{
			Name: name, Role: role, Image: p.Image,
			Command: append([]string(nil), p.Command...), Env: env, WorkDir: TreeDir,
			PidsLimit: p.PidsLimit, MemoryBytes: p.MemoryBytes, ScratchBytes: DefaultScratchBytes, Runtime: p.Runtime,
			Labels: map[string]string{LabelInstance: p.Instance, LabelRole: string(role)},
		}
		if path.IsAbs(p.Image) {
			// lever's lev as a tree (levimage.MakeLevRootDir): what the lev image's
			// config said is set here
			c.Image, c.Rootfs, c.Entrypoint = "", p.Image, []string{"/lev"}
			for k, v := range levTreeEnv {
				c.Env[k] = v
			}
		}
		return c
	}
	// levMounts: the agent's part of the tree first (the bench copies exactly these), then
	// lev's own dirs.
	levMounts := func(c *Container, agent string, tree []Mount) {
		c.Mounts = append(append([]Mount(nil), tree...),
			Mount{Source: path.Join(p.TicketRoot, agent), Dest: TicketMount, ReadOnly: true},
			Mount{Source: path.Join(p.LevHomeRoot, agent), Dest: LevHomeMount},
			Mount{Source: path.Join(p.BenchRoot, agent), Dest: BenchMount},
		)
	}
	mgrTree := []Mount{{Source: p.TreeSource, Dest: TreeDir}}
	// manager.read_only and what lever protects, mounted read-only over the manager's
	// writable tree, parents before children (sorted). A path named twice, in any
	// spelling (manager.read_only may name lever.yaml, which lever protects itself), is
	// one mount: podman refuses two mounts at one destination.
	var ro []string
	for _, r := range p.ReadOnly {
		rel, ok := treeRel(r)
		if !ok {
			return nil, fmt.Errorf("manager.read_only: %q must be a path inside the tree", r)
		}
		ro = append(ro, rel)
	}
	var protected []string
	for _, r := range p.Protected {
		rel, ok := treeRel(r)
		if !ok {
			return nil, fmt.Errorf("container plan: protected path %q is not inside the tree", r)
		}
		protected = append(protected, rel)
	}
	mgrTree = append(mgrTree, overTree(p.TreeSource, "", ro, protected)...)
	mgr := base(ContainerName(p.Instance, Manager, ""), Manager, "")
	levMounts(&mgr, AgentDir(Manager, ""), mgrTree)
	mgrBench := bench(mgr, p, mgrTree)
	if p.NestedVirt {
		// Tools run in the workbench, so that is where a VM a tool starts needs /dev/kvm;
		// lev's own container runs no tool and gets no device.
		mgrBench.Devices = []string{"/dev/kvm"}
	}
	out := []Container{mgr, mgrBench}
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
		if path.IsAbs(w.Dir) || dir == TreeDir || !fspath.Within(TreeDir, dir) {
			return nil, fmt.Errorf("workers.%s.dir: %q must be a subdirectory of the tree", w.Name, w.Dir)
		}
		tree := []Mount{{Source: path.Join(p.TreeSource, strings.TrimPrefix(dir, TreeDir)), Dest: dir}}
		// What lever protects inside the worker's own dir (its repository's .git) is
		// read-only there too; manager.read_only is the manager's alone.
		tree = append(tree, overTree(p.TreeSource, strings.TrimPrefix(dir, TreeDir+"/"), nil, protected)...)
		c := base(ContainerName(p.Instance, Worker, w.Name), Worker, w.Name)
		c.WorkDir = dir
		levMounts(&c, AgentDir(Worker, w.Name), tree)
		out = append(out, c, bench(c, p, tree))
	}
	for i := range out {
		out[i].Rehash()
	}
	return out, nil
}

// bench is the workbench beside lev container lev: the same tree mounts and working
// directory, the exec channel's dir, and nothing else of lev's. Its entrypoint is set in
// full, so a base image's ENTRYPOINT or CMD cannot change what it runs.
func bench(lev Container, p Params, tree []Mount) Container {
	agent := AgentDir(lev.Role, lev.Env["LEVER_WORKER"])
	env := map[string]string{"PATH": BenchPath, "HOME": "/tmp", "LEVER_ROLE": string(lev.Role)}
	// git refuses a repository owned by another uid ("dubious ownership"), and the tree's
	// owner on the host is rarely the container's keep-id uid. The check guards one user
	// against another's repository config; in the workbench the tree is the agent's own, so
	// every directory is safe (command-scope config, which git honours for safe.directory).
	for k, v := range BenchGitEnv {
		env[k] = v
	}
	if w := lev.Env["LEVER_WORKER"]; w != "" {
		env["LEVER_WORKER"] = w
	}
	image, rootfs := p.BenchImage, ""
	if path.IsAbs(p.BenchImage) {
		// a tree has no image config: what the workbench image's config said is set here
		image, rootfs = "", p.BenchImage
		env["SSL_CERT_DIR"] = "/etc/ssl/certs"
	}
	return Container{
		Name: BenchName(lev.Name), Role: Bench, Image: image, Rootfs: rootfs,
		Entrypoint: []string{"/lev"},
		Command:    []string{"bench", "serve", "--socket", BenchSocket},
		Env:        env, WorkDir: lev.WorkDir,
		Mounts:    append(append([]Mount(nil), tree...), Mount{Source: path.Join(p.BenchRoot, agent), Dest: BenchMount}),
		PidsLimit: p.PidsLimit, MemoryBytes: p.MemoryBytes, ScratchBytes: DefaultScratchBytes, Runtime: p.Runtime,
		Labels: map[string]string{LabelInstance: p.Instance, LabelRole: string(Bench)},
	}
}

// BenchName is the workbench container beside lev container name.
func BenchName(levContainer string) string { return levContainer + "-bench" }

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

// treeRel is r, a path inside the tree (relative to it, or absolute under /lever), as a
// clean path relative to the tree; false when r is empty, is the tree itself, climbs out
// (any ".." component, checked before cleaning) or is absolute elsewhere.
func treeRel(r string) (string, bool) {
	rel := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r, TreeDir+"/")), "/")
	if r == "" || r == TreeDir || rel == "" || rel == "." || strings.HasPrefix(r, "..") || strings.Contains("/"+r+"/", "/../") || (path.IsAbs(r) && !fspath.Within(TreeDir, r)) {
		return "", false
	}
	return rel, true
}

// overTree is what is mounted over a container's writable part of the tree, whose root is
// root (relative to the tree; "" for the whole tree): each of ro, and each of protected
// below root, read-only, with every directory between root and it bound onto itself
// (writable, its content unchanged). A directory holding a mount point can be
// renamed away, the read-only mount inside it, and a new one made in its place; a mount
// point cannot be renamed, so the protected path stays where the host will look for it.
// Paths are clean and relative to the tree; the mounts come parents first, one per
// destination, a read-only one winning over a self-bind.
func overTree(treeSource, root string, ro, protected []string) []Mount {
	ms := map[string]bool{} // relative path -> read-only
	var held []string       // read-only paths whose parents are bound onto themselves
	held = append(held, ro...)
	for _, r := range protected {
		if root != "" && !fspath.Within(root, r) || r == root {
			continue
		}
		held = append(held, r)
	}
	for _, r := range held {
		ms[r] = true
	}
	// manager.read_only's parents too: the manager could otherwise rename a/ away with
	// its read-only a/b/docs inside, and make a writable a/b/docs where the host finds it.
	for _, r := range held {
		for d := path.Dir(r); d != "." && d != root; d = path.Dir(d) {
			if _, ok := ms[d]; !ok {
				ms[d] = false
			}
		}
	}
	rels := make([]string, 0, len(ms))
	for r := range ms {
		rels = append(rels, r)
	}
	sort.Strings(rels)
	out := make([]Mount, 0, len(rels))
	for _, r := range rels {
		out = append(out, Mount{Source: path.Join(treeSource, r), Dest: path.Join(TreeDir, r), ReadOnly: ms[r]})
	}
	return out
}

// Package config owns lever.yaml: its schema, its defaults (applied here once; no
// consumer re-applies them), the resolution of its host paths and its validation. Load
// reads, decodes strictly, fills defaults, resolves paths (resolve.go, the only step that
// rewrites a value) and validates (validate.go, which only reads); the returned Config is
// ready to use, and a file with any problem returns no Config at all.
//
// It must not act on what it loads: it starts nothing, writes nothing and talks to no
// guest or broker. Its only side effects are reads of the file system (stat, symlinks).
package config

// Config is lever.yaml.
type Config struct {
	// Name names the instance; the guest machine is "lever-<name>".
	Name string `yaml:"name"`
	// Backend is orbstack, lima or netns (netns only with LEVER_DEV_NETNS=1).
	Backend string `yaml:"backend"`
	// Tree is the only host directory mounted into the jail, at /lever. Relative paths
	// resolve against the config file's directory.
	Tree string `yaml:"tree"`
	// Egress is the posture: open (default) or closed.
	Egress string `yaml:"egress"`
	// Git is what the agents may do to the repositories' .git: read-only (default) or
	// writable. git on the host runs what .git says (hooks, core.fsmonitor in config, a
	// config reached through commondir), so a writable .git is code the agents hand the
	// next git command run here.
	Git        string   `yaml:"git"`
	NestedVirt bool     `yaml:"nested_virt"`
	Disk       string   `yaml:"disk"`
	Manager    Manager  `yaml:"manager"`
	Workers    []Worker `yaml:"workers"`
	Broker     Broker   `yaml:"broker"`
	Lev        Lev      `yaml:"lev"`
	Lima       Lima     `yaml:"lima"`

	// Path is the absolute path of the file this was loaded from (not a YAML key).
	Path string `yaml:"-"`
	// Dir is the directory of Path; relative paths in the file resolve against it.
	Dir string `yaml:"-"`
	// TreePath is the tree's absolute, symlink-resolved path on the host (set by Load):
	// the one directory mounted into the jail.
	TreePath string `yaml:"-"`
	// ConfigInTree is this file's path inside the tree, slash-separated ("lever.yaml" in
	// the default layout, tree: .), or empty when the file is outside the tree (set by
	// Load). The agents write the tree and lever trusts this file on the host, so bring-up
	// mounts it read-only for every agent that sees the tree's root (internal/hosttrust).
	ConfigInTree string `yaml:"-"`
}

// Manager is the manager container's settings.
type Manager struct {
	// AllowPorts are the host loopback ports reachable on the host alias.
	AllowPorts []int    `yaml:"allow_ports"`
	ReadOnly   []string `yaml:"read_only"`
	Image      string   `yaml:"image"`
}

// Worker is one worker container, confined to its own dir inside the tree.
type Worker struct {
	Name    string `yaml:"name"`
	Dir     string `yaml:"dir"`
	Image   string `yaml:"image"`
	LLMAuth string `yaml:"llm_auth"`
}

// Broker is the host-side mTLS broker.
type Broker struct {
	LLMAuth     string `yaml:"llm_auth"` // api-key | subscription
	APIKeyFile  string `yaml:"api_key_file"`
	LLMUpstream string `yaml:"llm_upstream"`
	JailPort    int    `yaml:"jail_port"`
	AdminPort   int    `yaml:"admin_port"`
	// LLMRoutes are the only "METHOD /path" requests the broker's /llm/ route forwards
	// (paths relative to llm_upstream). Unset: the model-call routes of the upstream's
	// API kind (DefaultLLMRoutes).
	LLMRoutes []string `yaml:"llm_routes"`
	// LLMExtraHeaders are client request headers the /llm/ route forwards besides the
	// defaults of the upstream's API kind (DefaultLLMHeaders): names, or "prefix-*"
	// families. Every other header is dropped (its name audited).
	LLMExtraHeaders []string `yaml:"llm_extra_headers"`
}

// Lev is how lev is started inside the jail.
type Lev struct {
	Image        string `yaml:"image"`
	ImageTarball string `yaml:"image_tarball"`
	Blueprint    string `yaml:"blueprint"`
	// The user's lev settings, host paths outside the tree (lever pushes them into each
	// agent's enrolment dir; Load resolves them to absolute, symlink-free paths):
	// Config is lev's config.toml, Agents a directory of blueprints, Policy the taint
	// policy file.
	Config string `yaml:"config"`
	Agents string `yaml:"agents"`
	Policy string `yaml:"policy"`
	// BaseImage is the workbench's base: an image already in the guest's run-user podman
	// (the project's own toolchain); lever layers /lev on top. Empty: the guest's own
	// Debian packages.
	BaseImage string `yaml:"base_image"`
	// BaseTarball is the workbench's base as a docker-/oci-archive on the host, loaded
	// through the forwarded podman socket.
	BaseTarball string `yaml:"base_tarball"`
}

// Lima holds settings only the lima backend reads (a local guest image, for machines that
// cannot download one).
type Lima struct {
	Image  string `yaml:"image"`
	Kernel string `yaml:"kernel"`
	Initrd string `yaml:"initrd"`
	CPUs   int    `yaml:"cpus"`
	Memory string `yaml:"memory"`
	// Limactl is the limactl binary to drive (default: limactl on PATH).
	Limactl string `yaml:"limactl"`
	// Accel is the Linux host's accelerator: "auto" (the default) uses KVM only when this
	// user can open /dev/kvm and it answers, else TCG with a warning; "kvm" insists (and
	// fails before qemu starts when it cannot work); "tcg" forces qemu's software emulation
	// through lever's wrapper. On macOS only "auto" (Lima's vz or hvf) is accepted.
	Accel string `yaml:"accel"`
}

// MachineName is the guest's name: lever-<name>.
func (c *Config) MachineName() string { return "lever-" + c.Name }

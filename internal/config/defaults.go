package config

// Defaults, in one place so docs/config.md can list them and tests can refer to them.
const (
	DefaultEgress      = "open"
	DefaultGit         = "read-only"
	DefaultTree        = "."
	DefaultDisk        = "20GiB"
	DefaultLLMAuth     = "api-key"
	DefaultLLMUpstream = "https://api.anthropic.com"
	// DefaultJailPort is the broker's port on host loopback that the jail reaches through
	// the host alias; it must be in manager.allow_ports for egress to let it through.
	DefaultJailPort = 7443
	// DefaultAdminPort is the broker's admin listener, on host loopback only; it is never
	// allowlisted, so the jail cannot reach it.
	DefaultAdminPort = 7444
	DefaultLimaCPUs  = 2
	DefaultLimaMem   = "4GiB"
)

// Accepted values of the enumerated keys.
const (
	EgressOpen   = "open"
	EgressClosed = "closed"

	GitReadOnly = "read-only"
	GitWritable = "writable"

	AuthAPIKey       = "api-key"
	AuthSubscription = "subscription"
)

// Backends are the backend names lever.yaml accepts. Every one must be registered in
// internal/backend (a test in internal/cli ties the two lists together), so config can
// never accept a backend that does not exist.
var Backends = []string{"lima", "netns", "orbstack"}

// applyDefaults fills what the file left unset. It runs before validation, so a default
// is validated like any value the user wrote.
func applyDefaults(c *Config) {
	if c.Egress == "" {
		c.Egress = DefaultEgress
	}
	if c.Tree == "" {
		c.Tree = DefaultTree
	}
	if c.Git == "" {
		c.Git = DefaultGit
	}
	if c.Disk == "" {
		c.Disk = DefaultDisk
	}
	if c.Broker.LLMAuth == "" {
		c.Broker.LLMAuth = DefaultLLMAuth
	}
	if c.Broker.LLMUpstream == "" {
		c.Broker.LLMUpstream = DefaultLLMUpstream
	}
	if c.Broker.JailPort == 0 {
		c.Broker.JailPort = DefaultJailPort
	}
	if c.Broker.AdminPort == 0 {
		c.Broker.AdminPort = DefaultAdminPort
	}
	for i := range c.Workers {
		w := &c.Workers[i]
		if w.LLMAuth == "" {
			w.LLMAuth = c.Broker.LLMAuth
		}
		if w.Image == "" {
			w.Image = c.Manager.Image
		}
	}
	if c.Lima.CPUs == 0 {
		c.Lima.CPUs = DefaultLimaCPUs
	}
	if c.Lima.Memory == "" {
		c.Lima.Memory = DefaultLimaMem
	}
	if c.Lima.Accel == "" {
		c.Lima.Accel = "auto"
	}
}

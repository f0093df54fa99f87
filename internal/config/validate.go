package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
)

// hostPlatform is GOOS/GOARCH of the host lever runs on; nested_virt depends on it. A
// variable so tests can stand in for another host.
var hostPlatform = runtime.GOOS + "/" + runtime.GOARCH

// netnsEnv is the environment variable that admits the netns development substrate.
const netnsEnv = "LEVER_DEV_NETNS"

// The instance name becomes the DNS label lever-<name>: 63 characters at most, so the name
// may have 57.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,55}[a-z0-9])?$`)

var sizeRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?\s*(B|K|M|G|T|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$`)

// imageRefRE: a podman image name, name:tag, name@digest or ID (it reaches the podman
// API; no whitespace or control characters).
var imageRefRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$`)

type validator struct {
	file  string
	lines keyLines
	res   resolution
	probs Problems
	// treePath is the tree once it passed its checks; empty while the tree is wrong (and
	// already reported), so nothing else is checked against a tree lever will not use.
	treePath string
}

// lineOf finds the line for key, falling back to the nearest enclosing key the file set
// (a default has no line of its own), then to line 1.
func (v *validator) lineOf(key string) int {
	for k := key; k != ""; {
		if l, ok := v.lines[k]; ok {
			return l
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 1
}

func (v *validator) add(key, format string, args ...any) {
	v.probs = append(v.probs, &Problem{File: v.file, Line: v.lineOf(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// addTree adds a problem found in the tree's contents (Problem.Tree): what an agent can
// change by writing the tree, not what the person wrote in lever.yaml.
func (v *validator) addTree(key, format string, args ...any) {
	v.add(key, format, args...)
	v.probs[len(v.probs)-1].Tree = true
}

// validate checks c (defaults applied and host paths resolved, r says how) and reports
// every problem, not just the first. It only reads c: the paths it checks are the paths
// resolve wrote, which are the paths every consumer reads.
func validate(c *Config, file string, lines keyLines, r resolution) Problems {
	v := &validator{file: file, lines: lines, res: r}

	v.identity(c)
	v.tree(c)
	v.configFile(c)
	v.hostPATH()

	switch c.Egress {
	case EgressOpen:
	case EgressClosed:
		if who := nonAPIKey(c); who != "" {
			v.add("egress", "closed needs every llm_auth to be api-key, but %s uses subscription: a subscription agent needs direct internet to reach Anthropic", who)
		}
	default:
		v.add("egress", "%q is not a posture: use open or closed", c.Egress)
	}

	switch c.Git {
	case GitReadOnly, GitWritable:
	default:
		v.add("git", "%q is not a choice: use read-only or writable", c.Git)
	}

	if c.NestedVirt {
		if c.Backend != "lima" {
			v.add("nested_virt", "needs backend lima (backend is %s)", c.Backend)
		} else if hostPlatform != "linux/amd64" {
			v.add("nested_virt", "needs an x86_64 Linux host (the qemu driver); this host is %s", hostPlatform)
		}
	}
	if !sizeRE.MatchString(c.Disk) {
		v.add("disk", "%q is not a size: use a number with a unit, e.g. 20GiB", c.Disk)
	}

	v.ports("manager.allow_ports", c.Manager.AllowPorts)
	for i, ro := range c.Manager.ReadOnly {
		v.inTree(fmt.Sprintf("manager.read_only[%d]", i), ro)
	}
	v.workers(c)
	v.broker(c)
	v.lev(c)
	v.lima(c)
	return v.probs
}

// identity checks the keys that name the instance and its backend.
func (v *validator) identity(c *Config) {
	switch {
	case c.Name == "":
		v.add("name", "required: the instance name (the guest machine is lever-<name>)")
	case !nameRE.MatchString(c.Name):
		v.add("name", "%q is not a valid name: use 1 to 57 lowercase letters, digits and hyphens, starting and ending with a letter or digit (it becomes the DNS label lever-<name>)", c.Name)
	}

	switch {
	case c.Backend == "":
		v.add("backend", "required: one of %s (lever never picks one for you)", strings.Join(Backends, ", "))
	case !slices.Contains(Backends, c.Backend):
		v.add("backend", "%q is not a backend lever implements (one of %s); lever never substitutes another", c.Backend, strings.Join(Backends, ", "))
	case c.Backend == "netns" && os.Getenv(netnsEnv) != "1":
		v.add("backend", "netns is a development substrate with no hypervisor boundary (it fails guarantee 0); it is accepted only when %s=1 is set", netnsEnv)
	}

}

// nonAPIKey names the first party whose llm_auth is not api-key, or "".
func nonAPIKey(c *Config) string {
	if c.Broker.LLMAuth != AuthAPIKey {
		return "broker.llm_auth"
	}
	for i, w := range c.Workers {
		if w.LLMAuth != AuthAPIKey {
			return fmt.Sprintf("workers[%d] (%s)", i, w.Name)
		}
	}
	return ""
}

// cleanRelative refuses absolute paths and any ".." component, before cleaning could hide
// one ("a/../b").
func cleanRelative(p string) (string, string) {
	if filepath.IsAbs(p) {
		return "", fmt.Sprintf("%q must be a relative path", p)
	}
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if part == ".." {
			return "", fmt.Sprintf("%q must not contain \"..\"", p)
		}
	}
	return filepath.Clean(p), ""
}

// realPath resolves p through symlinks as far as it exists; a missing tail is appended
// as written. It is how a path that does not exist yet (a worker dir lever will create)
// is still checked for a symlinked parent that leads out.
func realPath(p string) (string, error) {
	var rest []string
	cur := p
	for {
		if _, err := os.Lstat(cur); err == nil {
			break
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			break
		}
		rest = append([]string{filepath.Base(cur)}, rest...)
		cur = parent
	}
	real, err := filepath.EvalSymlinks(cur)
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{real}, rest...)...), nil
}

func (v *validator) tree(c *Config) {
	rel, why := cleanRelative(c.Tree)
	if why != "" {
		v.add("tree", "%s to the directory of lever.yaml (the tree is the only directory the jail sees)", why)
		return
	}
	base, err := filepath.EvalSymlinks(c.Dir)
	if err != nil {
		v.add("tree", "cannot resolve the directory of lever.yaml %s: %v", c.Dir, err)
		return
	}
	want := filepath.Join(c.Dir, rel)
	st, err := os.Stat(want)
	if err != nil {
		v.add("tree", "%q does not exist (looked for %s)", c.Tree, want)
		return
	}
	if !st.IsDir() {
		v.add("tree", "%q is not a directory (%s)", c.Tree, want)
		return
	}
	real := c.TreePath // resolve followed the symlinks of the same path
	if real == "" {
		v.add("tree", "cannot resolve %s: %v", want, v.res.treeErr)
		return
	}
	if !fspath.Within(base, real) {
		v.add("tree", "%q resolves to %s, outside the directory of lever.yaml (%s)", c.Tree, real, base)
		return
	}
	// The tree is the jail's whole view of the host: a tree that holds the home directory
	// would put ~/.ssh and every credential under it in the jail (docs/config.md, tree).
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		if realHome, err := filepath.EvalSymlinks(home); err == nil && fspath.Within(real, realHome) {
			v.add("tree", "%s contains your home directory %s; the jail would see ~/.ssh and every credential there: point tree at the project directory", real, realHome)
			return
		}
	}
	if real == "/" {
		v.add("tree", "%q is the root directory; the jail would see the whole host", c.Tree)
		return
	}
	// lever's host state (CA keys, broker state) must never be visible in the jail.
	if state, err := realPath(StateRoot()); err == nil && fspath.Within(real, state) {
		v.add("tree", "%s contains lever's state directory %s, which holds keys the jail must never see; move the state (LEVER_STATE_DIR) or the tree", real, state)
		return
	}
	v.treePath = real
}

// configFile checks where lever.yaml itself lies. In the tree (the default layout, tree:
// .) the agents could rewrite what lever trusts on the host (the upstream the API key is
// sent to, limactl, the egress posture), so bring-up mounts it read-only over the
// manager's writable tree (Config.ConfigInTree). That holds only for the file itself at
// the tree's root: the root is the mount and cannot be renamed, but a directory under it
// could be renamed away with the read-only file inside and a new one put in its place,
// and a symlink at the root could be swapped. A second name for the file (a hard link, or
// the tree mounted at another path) would stay writable. All of those are refused.
func (v *validator) configFile(c *Config) {
	if v.treePath == "" {
		return
	}
	real := v.res.configReal
	switch {
	case v.res.configAtRoot != "":
		v.add("tree", "the config file's name %s is at the tree's root but is not the file itself (a symlink to %s): the agents could replace it with their own; put the file itself there, or keep it outside the tree", v.res.configAtRoot, real)
	case c.ConfigInTree != "":
		if st, err := os.Stat(real); err == nil {
			if n := linkCount(st); n > 1 {
				v.add("tree", "the config file %s is in the tree (%s) and has %d hard links: the other names would stay writable by the agents; keep one name (copy the file, then remove the others)", real, v.treePath, n)
			}
		}
	case real != "":
		if in, why := inTreeAnySpelling(v.treePath, real); in {
			v.add("tree", "the config file resolves to %s, in the tree (%s)%s, where the agents could rewrite it or rename the directory holding it: keep the file itself at the tree's root (which lever mounts read-only for the agents) or outside the tree", real, v.treePath, why)
		}
	}
}

// inTree checks that rel names a place inside the (valid) tree, through symlinks, and
// returns its real path.
func (v *validator) inTree(key, rel string) (string, bool) {
	tree := v.treePath
	if rel == "" {
		v.add(key, "must not be empty")
		return "", false
	}
	clean, why := cleanRelative(rel)
	if why != "" {
		v.add(key, "%s to the tree", why)
		return "", false
	}
	if tree == "" {
		return "", false // the tree itself is wrong and already reported
	}
	real, err := realPath(filepath.Join(tree, clean))
	if err != nil {
		v.addTree(key, "cannot resolve %q: %v", rel, err)
		return "", false
	}
	if !fspath.Within(tree, real) {
		v.addTree(key, "%q resolves to %s, outside the tree (%s)", rel, real, tree)
		return "", false
	}
	return real, true
}

func (v *validator) ports(key string, ports []int) {
	first := map[int]int{}
	for i, p := range ports {
		k := fmt.Sprintf("%s[%d]", key, i)
		if p < 1 || p > 65535 {
			v.add(k, "%d is not a port (1..65535)", p)
			continue
		}
		if j, dup := first[p]; dup {
			v.add(k, "%d is listed twice (also %s[%d])", p, key, j)
			continue
		}
		first[p] = i
	}
}

func (v *validator) port(key string, p int) bool {
	if p < 1 || p > 65535 {
		v.add(key, "%d is not a port (1..65535)", p)
		return false
	}
	return true
}

func validAuth(a string) bool { return a == AuthAPIKey || a == AuthSubscription }

func (v *validator) workers(c *Config) {
	names := map[string]int{}
	type placed struct {
		i    int
		real string
	}
	var dirs []placed
	for i, w := range c.Workers {
		p := fmt.Sprintf("workers[%d]", i)
		switch {
		case w.Name == "":
			v.add(p+".name", "required")
		case !nameRE.MatchString(w.Name):
			v.add(p+".name", "%q is not a valid name: use lowercase letters, digits and hyphens, starting and ending with a letter or digit", w.Name)
		default:
			if j, dup := names[w.Name]; dup {
				v.add(p+".name", "%q is used twice (also workers[%d])", w.Name, j)
			} else {
				names[w.Name] = i
			}
		}
		if w.Dir == "" {
			v.add(p+".dir", "required: the worker's own directory inside the tree")
		} else if real, ok := v.inTree(p+".dir", w.Dir); ok {
			if real == v.treePath {
				v.addTree(p+".dir", "%q is the whole tree; a worker gets a subdirectory of it", w.Dir)
			} else {
				for _, d := range dirs {
					if fspath.Within(d.real, real) || fspath.Within(real, d.real) {
						v.addTree(p+".dir", "%q overlaps workers[%d].dir; a worker must not see another worker's directory", w.Dir, d.i)
					}
				}
				dirs = append(dirs, placed{i, real})
			}
		}
		if !validAuth(w.LLMAuth) {
			v.add(p+".llm_auth", "%q is not an llm_auth: use api-key or subscription", w.LLMAuth)
		}
	}
}

func (v *validator) broker(c *Config) {
	b := &c.Broker
	if !validAuth(b.LLMAuth) {
		v.add("broker.llm_auth", "%q is not an llm_auth: use api-key or subscription", b.LLMAuth)
	}
	switch {
	case b.APIKeyFile != "":
		v.secretFile("broker.api_key_file", b.APIKeyFile)
	case b.LLMAuth == AuthAPIKey:
		v.add("broker.api_key_file", "required when broker.llm_auth is api-key: a file (mode 0600) holding the API key, which stays on the host")
	}
	if u, err := url.Parse(b.LLMUpstream); err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		v.add("broker.llm_upstream", "%q is not an http(s) URL", b.LLMUpstream)
	} else if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		v.add("broker.llm_upstream", "%q is plain http to a non-loopback host; the API key would cross the network unencrypted (use https)", b.LLMUpstream)
	}
	v.llmRoutes(b.LLMRoutes)
	v.llmHeaders(b.LLMExtraHeaders)
	okJ := v.port("broker.jail_port", b.JailPort)
	okA := v.port("broker.admin_port", b.AdminPort)
	if okJ && okA && b.JailPort == b.AdminPort {
		v.add("broker.admin_port", "%d is also broker.jail_port; the admin listener needs its own port", b.AdminPort)
	}
	if okA {
		for i, p := range c.Manager.AllowPorts {
			if p == b.AdminPort {
				v.add("broker.admin_port", "%d is also manager.allow_ports[%d]; the broker's admin port must never be reachable from the jail", p, i)
			}
		}
	}
}

func (v *validator) llmRoutes(routes []string) {
	if routes != nil && len(routes) == 0 {
		v.add("broker.llm_routes", "an empty list would refuse every model call; remove the key for the defaults of the upstream's API kind")
		return
	}
	seen := map[string]int{}
	for i, r := range routes {
		k := fmt.Sprintf("broker.llm_routes[%d]", i)
		method, path, err := ParseLLMRoute(r)
		if err != nil {
			v.add(k, "%v", err)
			continue
		}
		if j, dup := seen[method+" "+path]; dup {
			v.add(k, "%q is also broker.llm_routes[%d]", r, j)
			continue
		}
		seen[method+" "+path] = i
	}
}

func (v *validator) llmHeaders(headers []string) {
	seen := map[string]int{}
	for i, h := range headers {
		k := fmt.Sprintf("broker.llm_extra_headers[%d]", i)
		if err := CheckLLMHeader(h); err != nil {
			v.add(k, "%v", err)
			continue
		}
		if j, dup := seen[strings.ToLower(h)]; dup {
			v.add(k, "%q is also broker.llm_extra_headers[%d]", h, j)
			continue
		}
		seen[strings.ToLower(h)] = i
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// base is a valid lever.yaml; cases append to it or replace it.
const base = `name: demo
backend: lima
tree: proj
broker:
  api_key_file: key
`

// fixture makes the directory a case's lever.yaml lives in: proj/ (the tree) with a few
// subdirectories, and key (mode 0600) outside the tree. It returns the resolved dir.
func fixture(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"proj/a", "proj/b", "proj/a/inner", "outside"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "key"), []byte("sk-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LEVER_STATE_DIR", filepath.Join(t.TempDir(), "state"))
	t.Setenv("LEVER_DEV_NETNS", "")
	t.Setenv("HOME", t.TempDir())
	return dir
}

func load(t *testing.T, dir, body string) (*Config, error) {
	t.Helper()
	p := filepath.Join(dir, "lever.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(p)
}

func TestLoadRejects(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		setup func(t *testing.T, dir string)
		want  string // {f} is the file, {d} its directory
	}{
		// --- decoding: unknown keys, types, YAML itself ---
		{name: "unknown top-level key", body: base + "egres: open\n",
			want: `{f}:6: egres: unknown key (known keys at the top level: backend, broker, disk, egress, git, lev, lima, manager, name, nested_virt, tree, workers)`},
		{name: "unknown nested key", body: base + "manager:\n  imgae: x\n",
			want: `{f}:7: manager.imgae: unknown key (known keys in manager: allow_ports, image, read_only)`},
		{name: "unknown key in a list item", body: base + "workers:\n  - name: a\n    dri: a\n",
			want: `{f}:8: workers[0].dri: unknown key (known keys in workers[0]: dir, image, llm_auth, name)`},
		{name: "unknown key three deep", body: base + "  extra:\n    x: 1\n",
			want: `{f}:6: broker.extra: unknown key (known keys in broker: admin_port, api_key_file, jail_port, llm_auth, llm_extra_headers, llm_routes, llm_upstream)`},
		{name: "string where integer", body: base + "manager:\n  allow_ports: [80, http]\n",
			want: `{f}:7: manager.allow_ports[1]: expected an integer, got the string "http"`},
		{name: "list where mapping", body: base + "manager: [1]\n",
			want: `{f}:6: manager: expected a mapping, got a list`},
		{name: "string where boolean", body: base + "nested_virt: \"yes\"\n",
			want: `{f}:6: nested_virt: expected a boolean (true or false), got the string "yes"`},
		{name: "integer where string", body: "name: 123\nbackend: lima\n",
			want: `{f}:1: name: expected a string, got the integer 123`},
		{name: "scalar where list", body: base + "workers: docs\n",
			want: `{f}:6: workers: expected a list of mappings, got the string "docs"`},
		{name: "float where integer", body: base + "  jail_port: 1e3\n",
			want: `{f}:6: broker.jail_port: expected an integer, got the number 1e3`},
		{name: "mapping where string", body: "name: {a: 1}\n",
			want: `{f}:1: name: expected a string, got a mapping`},
		{name: "duplicate key", body: base + "name: other\n",
			want: `{f}:6: name: duplicate key (first set on line 1)`},
		{name: "several problems at once", body: base + "egres: open\nmanager:\n  allow_ports: x\n",
			want: "{f}:6: egres: unknown key (known keys at the top level: backend, broker, disk, egress, git, lev, lima, manager, name, nested_virt, tree, workers)\n{f}:8: manager.allow_ports: expected a list of integers, got the string \"x\""},
		// yaml.v3 reports a parser error at its context mark, which is 0-based: the flow
		// sequence opens on line 2 and yaml.v3 says "line 1". lever passes yaml's line on
		// rather than guess at a correction; docs/config.md says so.
		{name: "syntax error", body: "name: demo\nbackend: [lima\n",
			want: `{f}:1: invalid YAML: line 1: did not find expected ',' or ']'`},
		{name: "tab indentation", body: "name: demo\nmanager:\n\timage: x\n",
			want: `{f}:3: invalid YAML: line 3: found character that cannot start any token`},
		{name: "control character", body: "name: demo\nbackend: li\x01ma\n",
			want: `{f}:2: invalid YAML: control characters are not allowed`},
		{name: "empty file", body: "",
			want: `{f}:1: file is empty; expected a mapping of lever settings (name, backend, tree, ...)`},
		{name: "comments only", body: "# nothing\n",
			want: `{f}:1: file is empty; expected a mapping of lever settings (name, backend, tree, ...)`},
		{name: "two documents", body: base + "---\nname: other\n",
			want: `{f}:6: only one YAML document is allowed; a second one starts here`},
		{name: "top level is a list", body: "- name: demo\n",
			want: `{f}:1: expected a mapping of lever settings at the top level, got a list`},
		{name: "anchor", body: base + "manager: &m\n  image: x\nlev: *m\n",
			want: "{f}:6: manager: YAML anchors and aliases are not allowed in lever.yaml\n{f}:8: lev: YAML anchors and aliases are not allowed in lever.yaml"},
		{name: "non-string key", body: base + "1: x\n",
			want: `{f}:6: keys must be plain names, got the integer 1`},

		// --- name ---
		{name: "name missing", body: "backend: lima\ntree: proj\nbroker:\n  api_key_file: key\n",
			want: `{f}:1: name: required: the instance name (the guest machine is lever-<name>)`},
		{name: "name not a DNS label", body: strings.Replace(base, "name: demo", "name: My_Jail", 1),
			want: `{f}:1: name: "My_Jail" is not a valid name: use 1 to 57 lowercase letters, digits and hyphens, starting and ending with a letter or digit (it becomes the DNS label lever-<name>)`},
		{name: "name too long for lever-<name>", body: strings.Replace(base, "name: demo", "name: "+strings.Repeat("a", 58), 1),
			want: `{f}:1: name: "` + strings.Repeat("a", 58) + `" is not a valid name: use 1 to 57 lowercase letters, digits and hyphens, starting and ending with a letter or digit (it becomes the DNS label lever-<name>)`},

		// --- backend ---
		{name: "backend missing", body: "name: demo\ntree: proj\nbroker:\n  api_key_file: key\n",
			want: `{f}:1: backend: required: one of lima, netns, orbstack (lever never picks one for you)`},
		{name: "backend unknown, never substituted", body: strings.Replace(base, "backend: lima", "backend: docker", 1),
			want: `{f}:2: backend: "docker" is not a backend lever implements (one of lima, netns, orbstack); lever never substitutes another`},
		{name: "netns without LEVER_DEV_NETNS", body: strings.Replace(base, "backend: lima", "backend: netns", 1),
			want: `{f}:2: backend: netns is a development substrate with no hypervisor boundary (it fails guarantee 0); it is accepted only when LEVER_DEV_NETNS=1 is set`},
		{name: "netns with LEVER_DEV_NETNS=true is still refused", body: strings.Replace(base, "backend: lima", "backend: netns", 1),
			setup: func(t *testing.T, _ string) { t.Setenv("LEVER_DEV_NETNS", "true") },
			want:  `{f}:2: backend: netns is a development substrate with no hypervisor boundary (it fails guarantee 0); it is accepted only when LEVER_DEV_NETNS=1 is set`},

		// --- tree ---
		{name: "tree absolute", body: strings.Replace(base, "tree: proj", "tree: /etc", 1),
			want: `{f}:3: tree: "/etc" must be a relative path to the directory of lever.yaml (the tree is the only directory the jail sees)`},
		{name: "tree with ..", body: strings.Replace(base, "tree: proj", "tree: proj/../outside", 1),
			want: `{f}:3: tree: "proj/../outside" must not contain ".." to the directory of lever.yaml (the tree is the only directory the jail sees)`},
		{name: "tree missing", body: strings.Replace(base, "tree: proj", "tree: nope", 1),
			want: `{f}:3: tree: "nope" does not exist (looked for {d}/nope)`},
		{name: "tree is a file", body: strings.Replace(base, "tree: proj", "tree: key", 1),
			want: `{f}:3: tree: "key" is not a directory ({d}/key)`},
		{name: "tree symlink leads out", body: strings.Replace(base, "tree: proj", "tree: escape", 1),
			setup: func(t *testing.T, dir string) { symlink(t, "/usr", filepath.Join(dir, "escape")) },
			want:  `{f}:3: tree: "escape" resolves to /usr, outside the directory of lever.yaml ({d})`},
		{name: "tree holds lever's state", body: base,
			setup: func(t *testing.T, dir string) {
				t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "proj", ".lever-state"))
			},
			want: `{f}:3: tree: {d}/proj contains lever's state directory {d}/proj/.lever-state, which holds keys the jail must never see; move the state (LEVER_STATE_DIR) or the tree`},

		{name: "tree is the home directory", body: strings.Replace(base, "tree: proj", "tree: .", 1),
			setup: func(t *testing.T, dir string) { t.Setenv("HOME", dir) },
			want:  `{f}:3: tree: {d} contains your home directory {d}; the jail would see ~/.ssh and every credential there: point tree at the project directory`},
		{name: "tree contains the home directory", body: strings.Replace(base, "tree: proj", "tree: proj", 1),
			setup: func(t *testing.T, dir string) { t.Setenv("HOME", filepath.Join(dir, "proj", "a")) },
			want:  `{f}:3: tree: {d}/proj contains your home directory {d}/proj/a; the jail would see ~/.ssh and every credential there: point tree at the project directory`},

		// --- egress ---
		{name: "egress unknown", body: base + "egress: half\n",
			want: `{f}:6: egress: "half" is not a posture: use open or closed`},
		{name: "closed with a subscription broker", body: "name: demo\nbackend: lima\ntree: proj\negress: closed\nbroker:\n  llm_auth: subscription\n",
			want: `{f}:4: egress: closed needs every llm_auth to be api-key, but broker.llm_auth uses subscription: a subscription agent needs direct internet to reach Anthropic`},
		{name: "closed with a subscription worker", body: base + "egress: closed\nworkers:\n  - name: w1\n    dir: a\n  - name: w2\n    dir: b\n    llm_auth: subscription\n",
			want: `{f}:6: egress: closed needs every llm_auth to be api-key, but workers[1] (w2) uses subscription: a subscription agent needs direct internet to reach Anthropic`},

		// --- nested_virt ---
		{name: "nested_virt on orbstack", body: strings.Replace(base, "backend: lima", "backend: orbstack", 1) + "nested_virt: true\n",
			want: `{f}:6: nested_virt: needs backend lima (backend is orbstack)`},
		{name: "nested_virt on a mac", body: base + "nested_virt: true\n",
			setup: func(t *testing.T, _ string) { setPlatform(t, "darwin/arm64") },
			want:  `{f}:6: nested_virt: needs an x86_64 Linux host (the qemu driver); this host is darwin/arm64`},
		{name: "nested_virt on arm64 linux", body: base + "nested_virt: true\n",
			setup: func(t *testing.T, _ string) { setPlatform(t, "linux/arm64") },
			want:  `{f}:6: nested_virt: needs an x86_64 Linux host (the qemu driver); this host is linux/arm64`},

		// --- disk ---
		{name: "disk not a size", body: base + "disk: lots\n",
			want: `{f}:6: disk: "lots" is not a size: use a number with a unit, e.g. 20GiB`},

		// --- ports ---
		{name: "allow port zero", body: base + "manager:\n  allow_ports: [0]\n",
			want: `{f}:7: manager.allow_ports[0]: 0 is not a port (1..65535)`},
		{name: "allow port too high", body: base + "manager:\n  allow_ports:\n    - 80\n    - 65536\n",
			want: `{f}:9: manager.allow_ports[1]: 65536 is not a port (1..65535)`},
		{name: "allow port twice", body: base + "manager:\n  allow_ports: [8080, 9000, 8080]\n",
			want: `{f}:7: manager.allow_ports[2]: 8080 is listed twice (also manager.allow_ports[0])`},
		{name: "admin port allowlisted", body: base + "manager:\n  allow_ports: [8080, 7444]\n",
			want: `{f}:4: broker.admin_port: 7444 is also manager.allow_ports[1]; the broker's admin port must never be reachable from the jail`},
		{name: "explicit admin port allowlisted", body: base + "  admin_port: 9001\nmanager:\n  allow_ports: [9001]\n",
			want: `{f}:6: broker.admin_port: 9001 is also manager.allow_ports[0]; the broker's admin port must never be reachable from the jail`},
		{name: "admin port equals jail port", body: base + "  jail_port: 9000\n  admin_port: 9000\n",
			want: `{f}:7: broker.admin_port: 9000 is also broker.jail_port; the admin listener needs its own port`},
		{name: "jail port out of range", body: base + "  jail_port: 70000\n",
			want: `{f}:6: broker.jail_port: 70000 is not a port (1..65535)`},
		{name: "admin port negative", body: base + "  admin_port: -1\n",
			want: `{f}:6: broker.admin_port: -1 is not a port (1..65535)`},

		// --- broker.llm_routes ---
		{name: "llm route empty list", body: base + "  llm_routes: []\n",
			want: `{f}:6: broker.llm_routes: an empty list would refuse every model call; remove the key for the defaults of the upstream's API kind`},
		{name: "llm route no path", body: base + "  llm_routes: [POST]\n",
			want: `{f}:6: broker.llm_routes[0]: "POST" is not "METHOD /path" (e.g. "POST /v1/messages")`},
		{name: "llm route lower-case method", body: base + "  llm_routes: [post /v1/messages]\n",
			want: `{f}:6: broker.llm_routes[0]: "post /v1/messages": method "post" is not one of GET, POST`},
		{name: "llm route dot segment", body: base + "  llm_routes: [POST /v1/../files]\n",
			want: `{f}:6: broker.llm_routes[0]: "POST /v1/../files": path "/v1/../files" has a dot segment ".."`},
		{name: "llm route percent-encoded", body: base + "  llm_routes: [POST /v1/%2e%2e/files]\n",
			want: `{f}:6: broker.llm_routes[0]: "POST /v1/%2e%2e/files": path "/v1/%2e%2e/files" has "%"; only letters, digits and . _ ~ : - are allowed (nothing percent-encoded)`},
		{name: "llm route trailing slash", body: base + "  llm_routes: [GET /v1/models/]\n",
			want: `{f}:6: broker.llm_routes[0]: "GET /v1/models/": path "/v1/models/" has an empty segment (// or a trailing /)`},
		{name: "llm route twice", body: base + "  llm_routes: [POST /v1/messages, GET /v1/models, POST /v1/messages]\n",
			want: `{f}:6: broker.llm_routes[2]: "POST /v1/messages" is also broker.llm_routes[0]`},
		{name: "llm route not a list", body: base + "  llm_routes: POST /v1/messages\n",
			want: `{f}:6: broker.llm_routes: expected a list of strings, got the string "POST /v1/messages"`},

		// --- broker.llm_extra_headers (issue 27 item 13) ---
		{name: "extra header: a gateway's routing header", body: base + "  llm_extra_headers: [X-Title, Helicone-Target-Url]\n",
			want: `{f}:6: broker.llm_extra_headers[1]: "Helicone-Target-Url" could choose where a gateway sends the request (and the key); it is never forwarded`},
		{name: "extra header: an api base", body: base + "  llm_extra_headers: [X-Litellm-Api-Base]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "X-Litellm-Api-Base" could choose where a gateway sends the request (and the key); it is never forwarded`},
		{name: "extra header: fallbacks", body: base + "  llm_extra_headers: [helicone-fallbacks]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "helicone-fallbacks" could choose where a gateway sends the request (and the key); it is never forwarded`},
		{name: "extra header: a credential", body: base + "  llm_extra_headers: [OpenAI-Organization]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "OpenAI-Organization" names a credential or account; the broker's key is the only one upstream sees; it is never forwarded`},
		{name: "extra header: framing", body: base + "  llm_extra_headers: [Accept-Encoding]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "Accept-Encoding" belongs to the connection or the body's framing, which the broker sets itself; it is never forwarded`},
		{name: "extra header: a range", body: base + "  llm_extra_headers: [Range]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "Range" could change the method, the route, or how the response is encoded or sliced; it is never forwarded`},
		{name: "extra header: a conditional", body: base + "  llm_extra_headers: [If-None-Match]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "If-None-Match" is one of the if-* headers; it is never forwarded`},
		{name: "extra header: underscore", body: base + "  llm_extra_headers: [X_Title]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "X_Title" has "_"; only letters, digits and '-' are forwarded (some servers read '_' as '-'); it is never forwarded`},
		{name: "extra header: too broad a family", body: base + "  llm_extra_headers: [\"x-*\"]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "x-*": a family of headers is written "prefix-*", with at least two characters before the '-'`},
		{name: "extra header: everything", body: base + "  llm_extra_headers: [\"*\"]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "*" is not a header name`},
		{name: "extra header: the conditionals' family", body: base + "  llm_extra_headers: [\"if-*\"]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "if-*" would take in the if-* headers, which are never forwarded`},
		{name: "extra header: a trailing dash", body: base + "  llm_extra_headers: [X-Title-]\n",
			want: `{f}:6: broker.llm_extra_headers[0]: "X-Title-" is not a header name`},
		{name: "extra header: twice", body: base + "  llm_extra_headers: [X-Title, x-title]\n",
			want: `{f}:6: broker.llm_extra_headers[1]: "x-title" is also broker.llm_extra_headers[0]`},

		// --- manager.read_only ---
		{name: "read_only outside the tree", body: base + "manager:\n  read_only: [../key]\n",
			want: `{f}:7: manager.read_only[0]: "../key" must not contain ".." to the tree`},
		{name: "read_only symlink out", body: base + "manager:\n  read_only: [link]\n",
			setup: func(t *testing.T, dir string) {
				symlink(t, filepath.Join(dir, "outside"), filepath.Join(dir, "proj", "link"))
			},
			want: `{f}:7: manager.read_only[0]: "link" resolves to {d}/outside, outside the tree ({d}/proj)`},

		// --- workers ---
		{name: "worker name missing", body: base + "workers:\n  - dir: a\n",
			want: `{f}:7: workers[0].name: required`},
		{name: "worker name invalid", body: base + "workers:\n  - name: Docs!\n    dir: a\n",
			want: `{f}:7: workers[0].name: "Docs!" is not a valid name: use lowercase letters, digits and hyphens, starting and ending with a letter or digit`},
		{name: "worker name twice", body: base + "workers:\n  - name: w\n    dir: a\n  - name: w\n    dir: b\n",
			want: `{f}:9: workers[1].name: "w" is used twice (also workers[0])`},
		{name: "worker dir missing", body: base + "workers:\n  - name: w\n",
			want: `{f}:7: workers[0].dir: required: the worker's own directory inside the tree`},
		{name: "worker dir absolute", body: base + "workers:\n  - name: w\n    dir: /home\n",
			want: `{f}:8: workers[0].dir: "/home" must be a relative path to the tree`},
		{name: "worker dir with ..", body: base + "workers:\n  - name: w\n    dir: a/../../outside\n",
			want: `{f}:8: workers[0].dir: "a/../../outside" must not contain ".." to the tree`},
		{name: "worker dir symlinked out", body: base + "workers:\n  - name: w\n    dir: sneaky/sub\n",
			setup: func(t *testing.T, dir string) {
				symlink(t, filepath.Join(dir, "outside"), filepath.Join(dir, "proj", "sneaky"))
			},
			want: `{f}:8: workers[0].dir: "sneaky/sub" resolves to {d}/outside/sub, outside the tree ({d}/proj)`},
		{name: "worker dir is the tree", body: base + "workers:\n  - name: w\n    dir: .\n",
			want: `{f}:8: workers[0].dir: "." is the whole tree; a worker gets a subdirectory of it`},
		{name: "worker dirs overlap", body: base + "workers:\n  - name: w1\n    dir: a\n  - name: w2\n    dir: a/inner\n",
			want: `{f}:10: workers[1].dir: "a/inner" overlaps workers[0].dir; a worker must not see another worker's directory`},
		{name: "worker llm_auth unknown", body: base + "workers:\n  - name: w\n    dir: a\n    llm_auth: oauth\n",
			want: `{f}:9: workers[0].llm_auth: "oauth" is not an llm_auth: use api-key or subscription`},

		// --- broker ---
		{name: "broker llm_auth unknown", body: base + "  llm_auth: token\n",
			want: `{f}:6: broker.llm_auth: "token" is not an llm_auth: use api-key or subscription`},
		{name: "api key file required", body: "name: demo\nbackend: lima\ntree: proj\n",
			want: `{f}:1: broker.api_key_file: required when broker.llm_auth is api-key: a file (mode 0600) holding the API key, which stays on the host`},
		{name: "api key file missing", body: strings.Replace(base, "api_key_file: key", "api_key_file: nokey", 1),
			want: `{f}:5: broker.api_key_file: {d}/nokey does not exist`},
		{name: "api key file readable by others", body: base,
			setup: func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, "key"), 0o644) },
			want:  `{f}:5: broker.api_key_file: {d}/key has mode 0644; a file holding a secret must be mode 0600 (chmod 600 {d}/key)`},
		{name: "api key file owner read-only is not 0600", body: base,
			setup: func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, "key"), 0o400) },
			want:  `{f}:5: broker.api_key_file: {d}/key has mode 0400; a file holding a secret must be mode 0600 (chmod 600 {d}/key)`},
		{name: "api key file inside the tree", body: strings.Replace(base, "api_key_file: key", "api_key_file: proj/key", 1),
			setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "proj", "key"), 0o600) },
			want:  `{f}:5: broker.api_key_file: {d}/proj/key is inside the tree ({d}/proj), which the jail can read; keep secrets outside the tree`},
		{name: "api key file symlinked into the tree", body: strings.Replace(base, "api_key_file: key", "api_key_file: keylink", 1),
			setup: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, "proj", "key"), 0o600)
				symlink(t, filepath.Join(dir, "proj", "key"), filepath.Join(dir, "keylink"))
			},
			want: `{f}:5: broker.api_key_file: {d}/proj/key is inside the tree ({d}/proj), which the jail can read; keep secrets outside the tree`},
		{name: "api key file is a directory", body: strings.Replace(base, "api_key_file: key", "api_key_file: outside", 1),
			want: `{f}:5: broker.api_key_file: {d}/outside is not a regular file`},
		{name: "upstream not a URL", body: base + "  llm_upstream: api.anthropic.com\n",
			want: `{f}:6: broker.llm_upstream: "api.anthropic.com" is not an http(s) URL`},
		{name: "upstream plain http off-host", body: base + "  llm_upstream: http://api.example.com\n",
			want: `{f}:6: broker.llm_upstream: "http://api.example.com" is plain http to a non-loopback host; the API key would cross the network unencrypted (use https)`},

		{name: "git not a choice", body: base + "git: readonly\n",
			want: `{f}:6: git: "readonly" is not a choice: use read-only or writable`},

		// --- lev ---
		{name: "lev image and tarball", body: base + "lev:\n  image: x\n  image_tarball: key\n",
			want: `{f}:8: lev.image_tarball: set lev.image or lev.image_tarball, not both`},
		{name: "lev tarball missing", body: base + "lev:\n  image_tarball: lev.tar\n",
			want: `{f}:7: lev.image_tarball: {d}/lev.tar is not a file`},
		{name: "lev base image and base tarball", body: base + "lev:\n  base_image: x\n  base_tarball: key\n",
			want: `{f}:8: lev.base_tarball: set lev.base_image or lev.base_tarball, not both`},
		{name: "lev base tarball missing", body: base + "lev:\n  base_tarball: base.tar\n",
			want: `{f}:7: lev.base_tarball: {d}/base.tar is not a file`},
		{name: "lev base tarball inside the tree", body: base + "lev:\n  base_tarball: proj/base.tar\n",
			setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "proj", "base.tar"), 0o644) },
			want:  `{f}:7: lev.base_tarball: {d}/proj/base.tar is inside the tree ({d}/proj), which the agents can write; keep the base image outside the tree`},
		{name: "lev base image with a newline", body: base + "lev:\n  base_image: \"debian\\nRUN x\"\n",
			want: `{f}:7: lev.base_image: "debian\nRUN x" is not an image reference or ID`},
		{name: "lev blueprint outside the tree", body: base + "lev:\n  blueprint: /etc/blueprint.yaml\n",
			want: `{f}:7: lev.blueprint: "/etc/blueprint.yaml" must be a relative path to the tree`},

		// --- lima ---
		{name: "lima cpus negative", body: base + "lima:\n  cpus: -2\n",
			want: `{f}:7: lima.cpus: -2 is not a CPU count (at least 1)`},
		{name: "lima memory not a size", body: base + "lima:\n  memory: big\n",
			want: `{f}:7: lima.memory: "big" is not a size: use a number with a unit, e.g. 4GiB`},
		{name: "lima image missing", body: base + "lima:\n  image: debian.qcow2\n",
			want: `{f}:7: lima.image: {d}/debian.qcow2 is not a file`},
		{name: "lima kernel without initrd", body: base + "lima:\n  kernel: key\n",
			want: `{f}:7: lima.kernel: lima.kernel and lima.initrd go together (direct kernel boot needs both)`},
		{name: "lima accel unknown", body: base + "lima:\n  accel: hvf\n",
			want: `{f}:7: lima.accel: "hvf" is not an accelerator: use auto, kvm or tcg`},
		// Strict spelling: the value is compared as written, not folded.
		{name: "lima accel case", body: base + "lima:\n  accel: KVM\n",
			want: `{f}:7: lima.accel: "KVM" is not an accelerator: use auto, kvm or tcg`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := fixture(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			f := filepath.Join(dir, "lever.yaml")
			cfg, err := load(t, dir, tc.body)
			if err == nil {
				t.Fatalf("loaded %+v, want error", cfg)
			}
			if cfg != nil {
				t.Errorf("a failed load returned a config")
			}
			want := strings.NewReplacer("{f}", f, "{d}", dir).Replace(tc.want)
			if diff := cmp.Diff(want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			var p *Problem
			if !errors.As(err, &p) || p.Line < 1 {
				t.Errorf("error %v carries no line", err)
			}
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		setup func(t *testing.T, dir string)
		check func(t *testing.T, c *Config)
	}{
		{name: "minimal, defaults filled", body: base, check: func(t *testing.T, c *Config) {
			want := Config{
				Name: "demo", Backend: "lima", Tree: "proj", Egress: "open", Git: "read-only", Disk: "20GiB",
				Broker: Broker{LLMAuth: "api-key", APIKeyFile: filepath.Join(c.Dir, "key"), LLMUpstream: "https://api.anthropic.com",
					JailPort: 7443, AdminPort: 7444},
				Lima: Lima{CPUs: 2, Memory: "4GiB", Accel: "auto"},
				Path: filepath.Join(c.Dir, "lever.yaml"), Dir: c.Dir, TreePath: filepath.Join(c.Dir, "proj"),
			}
			if diff := cmp.Diff(want, *c); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if c.MachineName() != "lever-demo" {
				t.Errorf("machine name %q", c.MachineName())
			}
		}},
		{name: "llm_routes listed", body: base + "  llm_routes: [POST /v1/messages, GET /v1/models]\n", check: func(t *testing.T, c *Config) {
			if strings.Join(c.Broker.LLMRoutes, ",") != "POST /v1/messages,GET /v1/models" {
				t.Errorf("llm_routes %q", c.Broker.LLMRoutes)
			}
		}},
		{name: "llm_extra_headers listed", body: base + "  llm_extra_headers: [X-Title, \"x-myco-*\"]\n", check: func(t *testing.T, c *Config) {
			if strings.Join(c.Broker.LLMExtraHeaders, ",") != "X-Title,x-myco-*" {
				t.Errorf("llm_extra_headers %q", c.Broker.LLMExtraHeaders)
			}
		}},
		{name: "netns with LEVER_DEV_NETNS=1", body: strings.Replace(base, "backend: lima", "backend: netns", 1),
			setup: func(t *testing.T, _ string) { t.Setenv("LEVER_DEV_NETNS", "1") },
			check: func(t *testing.T, c *Config) {
				if c.Backend != "netns" {
					t.Errorf("backend %q", c.Backend)
				}
			}},
		{name: "closed, uniformly api-key; workers inherit auth and image", body: base + "egress: closed\nmanager:\n  image: agent:1\n  allow_ports: [8080]\n  read_only: [a]\nworkers:\n  - name: w1\n    dir: a\n  - name: w2\n    dir: b/new\n",
			check: func(t *testing.T, c *Config) {
				for _, w := range c.Workers {
					if w.LLMAuth != "api-key" || w.Image != "agent:1" {
						t.Errorf("worker %+v did not inherit", w)
					}
				}
			}},
		{name: "nested_virt with lima on linux/amd64", body: base + "nested_virt: true\n",
			setup: func(t *testing.T, _ string) { setPlatform(t, "linux/amd64") },
			check: func(t *testing.T, c *Config) {
				if !c.NestedVirt {
					t.Error("nested_virt lost")
				}
			}},
		{name: "subscription without a key file, open egress", body: "name: demo\nbackend: orbstack\nbroker:\n  llm_auth: subscription\n",
			check: func(t *testing.T, c *Config) {
				if c.Tree != "." || c.TreePath != c.Dir {
					t.Errorf("tree %q -> %q, want the config dir", c.Tree, c.TreePath)
				}
			}},
		{name: "plain http upstream on loopback (tests, a local proxy)", body: base + "  llm_upstream: http://127.0.0.1:9999/v1\n",
			check: func(t *testing.T, c *Config) {}},
		{name: "tree through a symlink that stays inside", body: strings.Replace(base, "tree: proj", "tree: here", 1),
			setup: func(t *testing.T, dir string) { symlink(t, filepath.Join(dir, "proj"), filepath.Join(dir, "here")) },
			check: func(t *testing.T, c *Config) {
				if c.TreePath != filepath.Join(c.Dir, "proj") {
					t.Errorf("TreePath %q", c.TreePath)
				}
			}},
		{name: "host paths become absolute", body: base + "lev:\n  image_tarball: key\n  base_tarball: key\nlima:\n  image: key\n  kernel: ~/vmlinuz\n  initrd: key\n  limactl: bin/limactl\n  accel: tcg\n",
			setup: func(t *testing.T, dir string) {
				home := t.TempDir()
				t.Setenv("HOME", home)
				writeFile(t, filepath.Join(home, "vmlinuz"), 0o644)
			},
			check: func(t *testing.T, c *Config) {
				home, _ := os.UserHomeDir()
				want := Lima{Image: filepath.Join(c.Dir, "key"), Kernel: filepath.Join(home, "vmlinuz"), Initrd: filepath.Join(c.Dir, "key"),
					CPUs: 2, Memory: "4GiB", Limactl: filepath.Join(c.Dir, "bin/limactl"), Accel: "tcg"}
				if diff := cmp.Diff(want, c.Lima); diff != "" {
					t.Errorf("lima (-want +got):\n%s", diff)
				}
				if c.Lev.ImageTarball != filepath.Join(c.Dir, "key") || c.Lev.BaseTarball != filepath.Join(c.Dir, "key") || c.Broker.APIKeyFile != filepath.Join(c.Dir, "key") {
					t.Errorf("lev %+v broker %+v", c.Lev, c.Broker)
				}
			}},
		{name: "lev base image reference", body: base + "lev:\n  base_image: localhost/proj/toolchain:1.2\n",
			check: func(t *testing.T, c *Config) {
				if c.Lev.BaseImage != "localhost/proj/toolchain:1.2" {
					t.Errorf("base_image %q", c.Lev.BaseImage)
				}
			}},
		{name: "null values are unset", body: base + "manager:\nworkers:\negress:\n",
			check: func(t *testing.T, c *Config) {
				if c.Egress != "open" {
					t.Errorf("egress %q", c.Egress)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := fixture(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			c, err := load(t, dir, tc.body)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			tc.check(t, c)
		})
	}
}

// The embedded example loads as it stands once its key file exists.
func TestDefaultLoads(t *testing.T) {
	dir := fixture(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	if err := os.MkdirAll(filepath.Join(home, ".config", "lever"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, ".config", "lever", "api-key"), 0o600)
	c, err := Parse(filepath.Join(dir, "lever.yaml"), Default)
	if err != nil {
		t.Fatalf("the embedded default does not load: %v", err)
	}
	if c.Egress != DefaultEgress || c.Broker.JailPort != DefaultJailPort || c.Broker.AdminPort != DefaultAdminPort || c.Backend != "lima" {
		t.Errorf("default config %+v", c)
	}
	if c.APIKeyPath() != filepath.Join(home, ".config", "lever", "api-key") {
		t.Errorf("api key path %q", c.APIKeyPath())
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.HasPrefix(err.Error(), "reading config: ") {
		t.Fatalf("err = %v", err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte("secret\n"), m); err != nil {
		t.Fatal(err)
	}
}

func setPlatform(t *testing.T, p string) {
	old := hostPlatform
	hostPlatform = p
	t.Cleanup(func() { hostPlatform = old })
}

// Teardown needs only the instance's identity: a config whose key file and tree are gone
// still loads, but an unknown key, an unknown backend or netns without its variable are
// refused as strictly as by Load.
func TestLoadIdentity(t *testing.T) {
	dir := fixture(t)
	p := filepath.Join(dir, "lever.yaml")
	cases := []struct{ body, want string }{
		{"name: demo\nbackend: lima\ntree: gone\nbroker:\n  api_key_file: gone\n", ""},
		{"name: demo\nbackend: lima\nextra: 1\n", p + `:3: extra: unknown key (known keys at the top level: backend, broker, disk, egress, git, lev, lima, manager, name, nested_virt, tree, workers)`},
		{"name: demo\nbackend: docker\n", p + `:2: backend: "docker" is not a backend lever implements (one of lima, netns, orbstack); lever never substitutes another`},
		{"name: demo\nbackend: netns\n", p + `:2: backend: netns is a development substrate with no hypervisor boundary (it fails guarantee 0); it is accepted only when LEVER_DEV_NETNS=1 is set`},
		{"backend: lima\n", p + `:1: name: required: the instance name (the guest machine is lever-<name>)`},
	}
	for _, tc := range cases {
		os.WriteFile(p, []byte(tc.body), 0o644)
		c, err := LoadIdentity(p)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%q: err %q, want %q", tc.body, got, tc.want)
		}
		if err == nil && (c.Name != "demo" || c.TreePath != "") {
			t.Errorf("%q: %+v", tc.body, c)
		}
	}
}

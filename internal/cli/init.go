package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/beneath"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/exitcode"
)

// The files lever init writes, relative to DIR.
const (
	initConfigFile    = "lever.yaml"
	initBlueprintFile = ".lev/agents/starter.toml"
)

type initOptions struct {
	dir  string
	json bool
}

// initOut is lever init --json.
type initOut struct {
	Dir     string   `json:"dir"`
	Backend string   `json:"backend"`
	Name    string   `json:"name"`
	Written []string `json:"written"`
}

// initDescriptors is the backends init chooses among (tests narrow it).
var initDescriptors = backend.All

func newInitCmd() *cobra.Command {
	o := &initOptions{dir: "."}
	c := &cobra.Command{
		Use:   "init [DIR]",
		Short: "Write a commented lever.yaml and a starter blueprint for the project in DIR",
		Long: `Write DIR/lever.yaml (commented, egress closed, the broker holding your API key) choosing
the backend that lever backends says is usable on this host (one with a hypervisor
boundary first), and a starter blueprint DIR/.lev/agents/starter.toml that lever run runs
by default. An existing file is never overwritten: lever init refuses, naming it, and
writes nothing; it writes nothing on any other error either.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.dir = args[0]
			}
			return o.run(cmd)
		},
	}
	c.Flags().BoolVar(&o.json, "json", false, "print what was written as JSON")
	return c
}

func (o *initOptions) run(cmd *cobra.Command) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return usageErr("%s: %v", o.dir, err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageErr("%s is not a directory: create the project directory first", dir)
	}
	// Everything below is made beneath DIR with no symlink followed (internal/beneath): a
	// .lev or lever.yaml planted as a link out of DIR is refused, never written through.
	d, err := beneath.Open(dir)
	if err != nil {
		return usageErr("%s: %v", dir, err)
	}
	defer d.Close()
	// Refuse before anything else, so nothing is probed or written over an existing file
	// (a symlink counts as existing: writing through it would land somewhere else).
	for _, f := range []string{initConfigFile, initBlueprintFile} {
		if err := initFree(d, f); err != nil {
			return err
		}
	}
	chosen, why, err := chooseBackend(ctx(cmd))
	if err != nil {
		return err
	}
	name := instanceName(dir)
	yaml := renderInitConfig(name, chosen, why)
	if err := checkInitConfig(yaml); err != nil {
		return exitcode.New(1, fmt.Errorf("the lever.yaml it would write does not load (a lever bug): %w", err))
	}
	files := []struct {
		rel  string
		data string
	}{{initBlueprintFile, starterBlueprint}, {initConfigFile, yaml}}
	var made []string // what to undo on failure, in creation order, relative to DIR
	undo := func() {
		for i := len(made) - 1; i >= 0; i-- {
			d.Remove(made[i])
		}
	}
	for _, f := range files {
		p := filepath.Join(dir, f.rel)
		created, err := d.MkdirAll(path.Dir(f.rel), 0o755)
		made = append(made, created...)
		if err != nil {
			undo()
			return initErr(err, p)
		}
		// Create never opens what is there: a file that appeared since the check is
		// refused, never overwritten.
		if err := d.Create(f.rel, []byte(f.data), 0o644); err != nil {
			undo()
			if errors.Is(err, fs.ErrExist) {
				return usageErr("%s already exists: lever init never overwrites a file; nothing was written", p)
			}
			return initErr(err, p)
		}
		made = append(made, f.rel)
	}
	out := initOut{Dir: dir, Backend: chosen, Name: name, Written: []string{initConfigFile, initBlueprintFile}}
	if o.json {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "wrote %s (instance %s, backend %s: %s)\n", filepath.Join(dir, initConfigFile), name, chosen, why)
	fmt.Fprintf(w, "wrote %s\n", filepath.Join(dir, initBlueprintFile))
	fmt.Fprintln(w, "next: put your API key in ~/.config/lever/api-key (mode 0600), then lever up, then lever run --input \"...\"")
	return nil
}

// initFree refuses rel when anything is at it already, or when a symlink is on its path
// (it would lead out of DIR), naming the path.
func initFree(d *beneath.Dir, rel string) error {
	p := filepath.Join(d.Path(), rel)
	_, err := d.Kind(rel)
	switch {
	case err == nil:
		return usageErr("%s already exists: lever init never overwrites a file (move it away, or edit it)", p)
	case errors.Is(err, beneath.ErrSymlink):
		return usageErr("%s: a symlink is on its path, which could lead out of %s: lever init follows none (remove the link); nothing was written", p, d.Path())
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return usageErr("%s: %v", p, err)
}

// initErr is a failure to write p: a symlink planted since the check is the usage error
// initFree gives; anything else a failure (1). Nothing was written either way.
func initErr(err error, p string) error {
	if errors.Is(err, beneath.ErrSymlink) {
		return usageErr("%s: a symlink is on its path: lever init follows none (remove the link); nothing was written", p)
	}
	return exitcode.New(1, fmt.Errorf("%w; nothing was written", err))
}

// chooseBackend probes every backend as lever backends does: the first usable one with a
// hypervisor boundary, else the first usable one. None usable is an error listing why.
func chooseBackend(ctx context.Context) (string, string, error) {
	m := buildMatrix(ctx, initDescriptors())
	var pick *matrixRow
	for i, r := range m.Backends {
		if r.Available.Usable && (pick == nil || (r.HypervisorBoundary && !pick.HypervisorBoundary)) {
			pick = &m.Backends[i]
		}
	}
	if pick == nil {
		var why []string
		for _, r := range m.Backends {
			why = append(why, r.Name+": "+r.Available.Reason)
		}
		return "", "", fmt.Errorf("no backend is usable on this host (%s): lever backends says what each needs; nothing was written", strings.Join(why, "; "))
	}
	why := "usable"
	if pick.Available.Tool != "" {
		why = "usable with " + pick.Available.Tool
	}
	if !pick.HypervisorBoundary {
		why += ", NO hypervisor boundary: development only"
	}
	return pick.Name, why, nil
}

var nonLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// instanceName makes lever.yaml's name from the directory's: a DNS label of at most 57
// characters (config's rule), "project" when nothing is left.
func instanceName(dir string) string {
	n := nonLabel.ReplaceAllString(strings.ToLower(filepath.Base(dir)), "-")
	if len(n) > 57 {
		n = n[:57]
	}
	n = strings.Trim(n, "-")
	if n == "" {
		return "project"
	}
	return n
}

// checkInitConfig loads the rendered file as lever does for teardown (strict decode,
// name and backend validated), from a scratch copy outside DIR.
func checkInitConfig(yaml string) error {
	tmp, err := os.MkdirTemp("", "lever-init-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, initConfigFile)
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		return err
	}
	_, err = config.LoadIdentity(p)
	return err
}

func renderInitConfig(name, backendName, why string) string {
	return fmt.Sprintf(`# lever.yaml: one jail for this project, written by lever init.
# Every key: docs/config.md. The daily loop (up, run, logs, shell, stop): docs/daily.md.

# The instance name; the guest machine is lever-<name>.
name: %[1]s
# The containment backend, chosen by lever init from what lever backends found here:
# %[3]s, %[2]s.
# lima and orbstack put a hypervisor boundary between the agents and this host; netns does
# not (development only, and only with LEVER_DEV_NETNS=1).
backend: %[3]s
# The only host directory the jail sees, mounted writable at /lever.
tree: .
# closed: the jail reaches only the broker, which holds your API key on the host.
# open: the public internet too (the agents could then send the tree anywhere).
egress: closed
# read-only: the repositories' .git (here and in the workers' dirs) cannot be changed by
# the agents, so nothing they write there (a hook, a config line) runs at your next git
# command on this host; they read history, you commit. writable: they commit too.
git: read-only

manager:
  # The broker's jail port: the only host port the jail reaches.
  allow_ports: [7443]
  # Paths of the tree the manager may read but not write, e.g. [docs].
  read_only: []

# Workers each see only their own directory of the tree, e.g.:
#  - name: docs
#    dir: docs
workers: []

broker:
  llm_auth: api-key
  # Your LLM API key. It stays on the host: mode 0600, outside the tree. Create it with
  #   install -D -m 600 /dev/null ~/.config/lever/api-key  and put the key in it.
  api_key_file: ~/.config/lever/api-key
  # The model API the broker forwards the agents' model calls to: an OpenAI-compatible
  # chat-completions API (lev in the jail speaks that protocol), ending in /v1.
  llm_upstream: https://api.openai.com/v1
  jail_port: 7443
  admin_port: 7444

lev:
  # What lever run runs when given no AGENT: the starter blueprint lever init wrote.
  blueprint: %[4]s
`, name, why, backendName, initBlueprintFile)
}

// starterBlueprint is a first agent for the project: it works in the tree with the
// workbench's shell and submits a summary. A blueprint in the tree can only tighten the
// user's lev settings; grants come from the host side.
const starterBlueprint = `# A starter lev agent for this project, written by lever init.
# lever run --input "what to do" runs it (lever.yaml's lev.blueprint names it);
# every key: docs/lev.md. Being in the tree, it can only tighten your lev settings.
name = "starter"
version = "1"
description = "Works on a task in the project tree and reports what it did."
system_prompt = """
You are a careful coding agent working in this project's tree (your working directory).
Read before you change anything, keep changes small, run the project's checks with the
shell tool, and finish by submitting a short summary of what you did and what is left."""

[stages.work]
prompt = "Do the task below in this project."
tools = ["list_dir", "read_file", "write_file", "edit_file", "shell", "submit_output"]
max_turns = 40
`

package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/levstate"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/policy"
)

// Admission is what a run was admitted under, kept in its record: the blueprint's bytes
// (a run resumes from these, never from the file again: the file may sit in a workdir an
// agent writes, or be edited after the run began) and the config's hash at spawn and at
// each resume.
//
// The config is read live on resume, on purpose: a grant added to
// config.toml after a refusal applies when the refused run is resumed (docs/lev.md, "Resume"). That is safe only
// because config.toml is lev's own state: no tool reads or writes it (levstate), a shell
// never sees it (masked), and a run cannot work in a directory inside lev's home. So the
// config a resume reads was written by the user, not by an agent; the hashes in the
// record show which config each leg of the run ran under.
type Admission struct {
	BlueprintSHA256 string   `json:"blueprint_sha256"`
	Blueprint       []byte   `json:"blueprint_bytes"`
	ConfigSHA256    string   `json:"config_sha256"`
	ResumeConfigs   []string `json:"resume_config_sha256,omitempty"`
	// Origin is where the blueprint came from (blueprint.OriginAgents, OriginPath or
	// OriginTree). A resume applies the same restrictions: a tree blueprint stays foreign.
	Origin string `json:"origin,omitempty"`
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// configHash hashes the config file as it is now ("" for none).
func configHash(cfg *levconfig.Config) string {
	if cfg == nil || cfg.File == "" {
		return ""
	}
	b, err := os.ReadFile(cfg.File)
	if err != nil {
		return "missing"
	}
	return sha(b)
}

// loadBlueprint loads a new run's blueprint from its file and snapshots it, or a resumed
// run's from its snapshot (checking the hash it was admitted under).
func (e *Engine) loadBlueprint(rec *Record) (*blueprint.Blueprint, string, error) {
	if rec.Admission != nil {
		a := rec.Admission
		if sha(a.Blueprint) != a.BlueprintSHA256 {
			return nil, "", fmt.Errorf("run %s: its blueprint snapshot does not match the hash it was admitted under; refusing to resume", rec.ID)
		}
		bp, err := blueprint.Parse(rec.Blueprint, a.Blueprint, pipeline.Known)
		if err != nil {
			return nil, "", fmt.Errorf("run %s: its blueprint snapshot: %w", rec.ID, err)
		}
		if a.Origin == blueprint.OriginTree {
			e.foreign(rec, bp)
		}
		return bp, rec.Blueprint, nil
	}
	file, origin, data, err := e.findBlueprint(rec)
	if err != nil {
		return nil, "", err
	}
	bp, err := blueprint.Parse(file, data, pipeline.Known)
	if err != nil {
		return nil, "", err
	}
	if origin == blueprint.OriginTree {
		e.foreign(rec, bp)
	}
	rec.Admission = &Admission{BlueprintSHA256: sha(data), Blueprint: data, Origin: origin}
	return bp, file, nil
}

func (e *Engine) foreign(rec *Record, bp *blueprint.Blueprint) {
	for _, n := range blueprint.MakeForeign(bp) {
		e.logf("run %s: %s", rec.ID, n)
	}
}

// findBlueprint finds and reads a new run's blueprint: a path as given; a name in the
// agents directory (the user's settings), else in the workdir's .lev/agents (the tree).
// A file whose real path lies in the workdir, however it was named, is the tree's:
// somebody else's blueprint, read once, safely, and foreign (it can only tighten).
func (e *Engine) findBlueprint(rec *Record) (file, origin string, data []byte, err error) {
	pathLike := strings.HasSuffix(rec.Agent, ".toml") || strings.ContainsRune(rec.Agent, '/')
	file, err = blueprint.Find(e.AgentsDir, rec.Agent)
	origin = blueprint.OriginAgents
	if pathLike {
		origin = blueprint.OriginPath
	}
	if err != nil {
		if pathLike {
			return "", "", nil, err
		}
		tf, terr := blueprint.TreeFile(rec.Workdir, rec.Agent)
		if terr != nil {
			return "", "", nil, err
		}
		if _, lerr := os.Lstat(tf); lerr != nil {
			return "", "", nil, fmt.Errorf("%w, nor in the tree (%s)", err, tf)
		}
		file, origin = tf, blueprint.OriginTree
	}
	if origin != blueprint.OriginTree && inWorkdir(file, rec.Workdir) && !inWorkdir(file, e.AgentsDir) {
		origin = blueprint.OriginTree
	}
	if origin == blueprint.OriginTree {
		data, err = blueprint.ReadTree(rec.Workdir, file)
		return file, origin, data, err
	}
	data, err = os.ReadFile(file)
	if err != nil {
		return "", "", nil, fmt.Errorf("reading blueprint: %w", err)
	}
	return file, origin, data, nil
}

// inWorkdir: file lies in dir, as spelled or by its real path. As spelled matters too: a
// link in the tree to a file elsewhere was put there by whoever writes the tree.
//
// A workdir of "/" contains no blueprint: were it to, every blueprint (the user's own,
// $LEV_BLUEPRINT) would count as part of the tree and lose its protection from the run's
// own writes, so a run started from / could rewrite what later runs trust.
func inWorkdir(file, dir string) bool {
	if dir == "" || filepath.Clean(dir) == string(filepath.Separator) {
		return false
	}
	af, err1 := filepath.Abs(file)
	ad, err2 := filepath.Abs(dir)
	if err1 == nil && err2 == nil && fspath.Within(ad, af) {
		return true
	}
	rf, err := filepath.EvalSymlinks(file)
	if err != nil {
		return false
	}
	rd, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	return fspath.Within(rd, rf)
}

// protected is lev's own state for a run under cfg: no tool reads or writes any of it.
// bpFile is the blueprint file the run was started from: a blueprint run by its path is
// what the next run of it loads, so the run's own tools must not rewrite it (a resume uses
// the snapshot either way).
//
// A blueprint file in the run's workdir is the exception, $LEV_BLUEPRINT included: it is
// the tree's, and whoever writes the tree could already have written it. Every run reads it
// as foreign (it can only tighten, it gets no grant) and keeps its bytes in the record, so
// an agent's edit changes nothing but what a later run reads under those same limits.
// Protecting it would buy nothing and cost the workbench, which shares the tree and cannot
// mask a file in it: every shell command would be refused.
func (e *Engine) protected(cfg *levconfig.Config, bpFile, workdir string) (*levstate.State, error) {
	paths := map[string]string{
		levconfig.Path():        "lev's config.toml",
		policy.PathFor(cfg):     "the taint policy file",
		os.Getenv("LEV_POLICY"): "the taint policy file ($LEV_POLICY)",
		e.AgentsDir:             "lev's agents directory",
		e.Store.Dir:             "lev's run records",
	}
	if p := os.Getenv("LEV_BLUEPRINT"); filepath.IsAbs(p) && !inWorkdir(p, workdir) {
		// A path (it may also be an agent name, which the agents directory covers).
		paths[p] = "the default blueprint ($LEV_BLUEPRINT)"
	}
	if bpFile != "" && !inWorkdir(bpFile, workdir) {
		if _, dup := paths[bpFile]; !dup {
			paths[bpFile] = "this run's blueprint file"
		}
	}
	if cfg != nil {
		paths[cfg.TokenFile()] = "the daemon's bearer token"
		paths[cfg.Provider.TLSKey] = "the provider's TLS key"
		paths[cfg.Provider.TLSCert] = "the provider's TLS certificate"
		paths[cfg.Provider.TLSCA] = "the provider's TLS CA"
		paths[cfg.Provider.Script] = "the scripted provider's rules"
		if sock, ok := strings.CutPrefix(cfg.Daemon.Listen, "unix:"); ok && filepath.IsAbs(sock) {
			// A command that reaches the socket reaches lev's API (a bearer token still
			// stands in its way, but the token is not all that should).
			paths[sock] = "the daemon's API socket"
		}
	}
	for _, p := range sessionSockets() {
		paths[p] = "the user's session services (systemd, D-Bus, podman, ssh-agent): a command could ask one to act outside its sandbox"
	}
	for _, p := range filepath.SplitList(os.Getenv("LEV_PROTECT")) {
		if p != "" {
			paths[p] = "another lev's state ($LEV_PROTECT)"
		}
	}
	st, err := levstate.New(levconfig.Home(), paths)
	if err != nil {
		return nil, err
	}
	// Run records are the one part of lev's state a user may open to an agent
	// (a planner reading past runs through a granted [read_paths] entry); they stay
	// read-only and carry their runs' taint labels.
	if err := st.SetRecords(e.Store.Dir); err != nil {
		return nil, fmt.Errorf("lev's run records: %w", err)
	}
	return st, nil
}

// scrubSecrets drops every variable whose value holds one of secrets (the daemon's token
// under any name).
func scrubSecrets(env []string, secrets []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		_, v, _ := strings.Cut(kv, "=")
		keep := true
		for _, s := range secrets {
			if s != "" && strings.Contains(v, s) {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// MaskedExecutor is an executor with lev's state masked, as a run's tools get it.
type MaskedExecutor interface {
	pipeline.Executor
	pipeline.ProcessStarter
	io.Closer
}

// Masked wraps inner so that everything it runs (shell commands, stdio MCP servers) has
// lev's own state masked exactly as in a run in workdir: for lev mcp, which starts
// servers outside a run.
func (e *Engine) Masked(cfg *levconfig.Config, workdir string, inner pipeline.Executor) (MaskedExecutor, error) {
	state, err := e.protected(cfg, "", workdir)
	if err != nil {
		return nil, fmt.Errorf("lev's own state: %w", err)
	}
	return &maskExec{inner: inner, mask: state.Paths()}, nil
}

// maskExec hands every shell command lev's protected paths to hide.
type maskExec struct {
	inner pipeline.Executor
	mask  []string
	// mcp are the run's MCP servers: closed with the executor (every way a run ends, or
	// fails to start, closes it), before it, so a stdio server goes before its sandbox.
	mcp *mcprun.Servers
	// last keeps the most recent raw result, for a script seed's stdout and exit code.
	last *pipeline.ShellResult
}

func (m *maskExec) Shell(ctx context.Context, req pipeline.ShellRequest) (pipeline.ShellResult, error) {
	req.Mask = append([]string(nil), m.mask...)
	res, err := m.inner.Shell(ctx, req)
	r := res
	m.last = &r
	return res, err
}

// StartProcess starts a stdio MCP server in the run's sandbox, with lev's state masked
// exactly as for a shell command.
func (m *maskExec) StartProcess(ctx context.Context, req pipeline.ProcessRequest) (pipeline.Process, error) {
	ps, ok := m.inner.(pipeline.ProcessStarter)
	if !ok {
		return nil, fmt.Errorf("this lev's executor (%T) cannot start a stdio MCP server in the sandbox; it is not started unsandboxed", m.inner)
	}
	req.Mask = append([]string(nil), m.mask...)
	return ps.StartProcess(ctx, req)
}

// Close closes the executor it wraps (containers torn down).
func (m *maskExec) Close() error {
	m.mcp.Close()
	return pipeline.Close(m.inner)
}

// sessionSockets are the sockets of services that act on the host for whoever connects as
// lev's user: the user's runtime directory ($XDG_RUNTIME_DIR: the systemd user manager and
// D-Bus session bus, so `systemd-run --user cat ~/.leviath/token`; a podman API socket;
// gpg and ssh agents), the ssh agent's socket, and the container engines' sockets. A
// command masked from lev's files could otherwise have such a service read them for it.
// Only those that exist are listed (hiding a missing one would make its parent read-only
// for commands).
func sessionSockets() []string {
	cands := []string{os.Getenv("XDG_RUNTIME_DIR"), fmt.Sprintf("/run/user/%d", os.Getuid()),
		os.Getenv("SSH_AUTH_SOCK"), "/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock"}
	var out []string
	for _, p := range cands {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

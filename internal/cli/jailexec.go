package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
)

// levPath is lev inside the lev container (the lev image holds it there; a user's
// manager.image must too).
const levPath = "/lev"

// benchSuffix names an agent's workbench container after its lev container.
const benchSuffix = "-bench"

// managerAgent is how the host commands name the manager; workers go by their name.
const managerAgent = "manager"

// addConfigFlag adds -c/--config to a command that works on a jail.
func addConfigFlag(c *cobra.Command, p *string) {
	c.Flags().StringVarP(p, "config", "c", "lever.yaml", "the jail's lever.yaml")
}

// usageErr is a refusal before anything started: exit 2, one line.
func usageErr(format string, a ...any) error {
	return &ExitError{Code: 2, Err: fmt.Errorf(format, a...)}
}

// loadJailConfig loads lever.yaml strictly (exit 2 on any error).
func loadJailConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	return cfg, nil
}

// agentOf checks an agent name against lever.yaml: "" and "manager" are the manager,
// anything else must be a worker. The error lists the agents there are.
func agentOf(cfg *config.Config, name string) (string, error) {
	if name == managerAgent {
		// lever.yaml accepts a worker named "manager": naming it must never land in the
		// manager, which sees the whole tree, so the name is refused as ambiguous.
		for _, w := range cfg.Workers {
			if w.Name == managerAgent {
				return "", usageErr("%s has a worker named %q: that name also means the manager, so lever will not guess; rename the worker", cfg.Path, managerAgent)
			}
		}
	}
	if name == "" || name == managerAgent {
		return managerAgent, nil
	}
	for _, w := range cfg.Workers {
		if w.Name == name {
			return name, nil
		}
	}
	return "", usageErr("worker %q is not in %s: the agents are %s", name, cfg.Path, strings.Join(agentNames(cfg), ", "))
}

func agentNames(cfg *config.Config) []string {
	out := []string{managerAgent}
	for _, w := range cfg.Workers {
		out = append(out, w.Name)
	}
	return out
}

// levContainer is the agent's lev container.
func levContainer(cfg *config.Config, agent string) string {
	if agent == managerAgent {
		return containers.ContainerName(cfg.Name, containers.Manager, "")
	}
	return containers.ContainerName(cfg.Name, containers.Worker, agent)
}

// attached is a jail that is up, reached through its backend.
type attached struct {
	cfg *config.Config
	c   execer
}

// execer is the part of *containers.Client the host commands use (tests substitute a recorder
// for argv checks; the e2e tests use the real client).
type execer interface {
	Exec(ctx context.Context, name string, o containers.ExecOptions) (int, error)
	Inspect(name string) (*containers.State, error)
}

// attachHook, when set (unit tests), replaces bring-up's Attach.
var attachHook func(cfg *config.Config) (execer, error)

// attachJail derives the instance and reaches it without changing anything. Anything
// short of a running jail is exit 2 with bring-up's "jail NAME is not up" line.
func attachJail(cmd *cobra.Command, cfg *config.Config) (*attached, error) {
	if attachHook != nil {
		c, err := attachHook(cfg)
		if err != nil {
			return nil, &ExitError{Code: 2, Err: err}
		}
		return &attached{cfg: cfg, c: c}, nil
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	in, err := bringup.New(bringup.Options{Cfg: cfg, Backend: b, Exe: exe, Out: io.Discard})
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	c, err := in.Attach(ctx(cmd))
	if err != nil {
		return nil, &ExitError{Code: 2, Err: err}
	}
	return &attached{cfg: cfg, c: c}, nil
}

func ctx(cmd *cobra.Command) context.Context {
	if c := cmd.Context(); c != nil {
		return c
	}
	return context.Background()
}

// isTerm reports whether r is a terminal.
func isTerm(v any) bool {
	f, ok := v.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// wantTTY: a terminal session only when the user is at one on both ends, so that a
// redirected output never gets the terminal's merged, \r\n-translated stream.
func wantTTY(cmd *cobra.Command) bool {
	return isTerm(cmd.InOrStdin()) && isTerm(cmd.OutOrStdout())
}

// execPass runs argv in container and passes its exit code through as lever's (lev's own
// message is already on stderr). lever's own failure to run it is exit 1: by then lever
// cannot say whether the command started.
func execPass(cmd *cobra.Command, c execer, container string, argv []string, tty, stdin bool) error {
	o := containers.ExecOptions{Argv: argv, TTY: tty, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	if !tty {
		// Outside a terminal session the jail's bytes reach a host terminal defused.
		var f1, f2 func() error
		o.Stdout, f1 = safeFor(o.Stdout)
		o.Stderr, f2 = safeFor(o.Stderr)
		defer f1()
		defer f2()
	}
	if stdin {
		o.Stdin = cmd.InOrStdin()
	}
	code, err := c.Exec(ctx(cmd), container, o)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// execCapture runs argv without a terminal and returns its stdout; a non-zero exit is an
// error carrying its stderr.
func execCapture(cmd *cobra.Command, c execer, container string, argv []string) ([]byte, error) {
	var out, errb bytes.Buffer
	code, err := c.Exec(ctx(cmd), container, containers.ExecOptions{Argv: argv, Stdout: &out, Stderr: &errb})
	if err != nil {
		return nil, err
	}
	if code != 0 {
		// Quoted: the message ends up on the host's terminal.
		return nil, fmt.Errorf("%s exited %d: %q", strings.Join(argv, " "), code, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// levRun is the part of a `lev ps --json` row lever shows; the whole row is passed on
// unchanged in --json output.
type levRun struct {
	ID        string    `json:"id"`
	Agent     string    `json:"agent"`
	Status    string    `json:"status"`
	Stage     int       `json:"stage"`
	StageName string    `json:"stage_name"`
	Created   time.Time `json:"created"`
	// Stages is the stage count (lev ps --json) or the record's stage list.
	Stages json.RawMessage `json:"stages"`
}

// stage renders "N/M name", or "-" when lev gave no stage.
func (r levRun) stage() string {
	n, name := 0, r.StageName
	if err := json.Unmarshal(r.Stages, &n); err != nil {
		var list []struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(r.Stages, &list) == nil {
			n = len(list)
			if r.Stage < n && name == "" {
				name = list[r.Stage].Name
			}
		}
	}
	if n == 0 || r.Stage >= n {
		return "-"
	}
	return fmt.Sprintf("%d/%d %s", r.Stage+1, n, name)
}

// jailRun is one run as lever ps --json prints it: the agent (manager or the worker's
// name) and container that hold it, and lev's own record as lev ps --json gave it.
type jailRun struct {
	Agent     string          `json:"agent"`
	Container string          `json:"container"`
	Run       json.RawMessage `json:"run"`
	info      levRun
}

// listRuns asks one agent's lev for its runs (`lev ps --json`).
func listRuns(cmd *cobra.Command, a *attached, agent string) ([]jailRun, error) {
	name := levContainer(a.cfg, agent)
	out, err := execCapture(cmd, a.c, name, []string{levPath, "ps", "--json"})
	if err != nil {
		return nil, fmt.Errorf("listing %s's runs: %w", agent, err)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(bytes.TrimSpace(out), &raws); err != nil {
		return nil, fmt.Errorf("listing %s's runs: lev ps --json printed no JSON array: %w", agent, err)
	}
	runs := make([]jailRun, 0, len(raws))
	for _, r := range raws {
		jr := jailRun{Agent: agent, Container: name, Run: r}
		if err := json.Unmarshal(r, &jr.info); err != nil || jr.info.ID == "" {
			return nil, fmt.Errorf("listing %s's runs: a run without an id in lev ps --json", agent)
		}
		runs = append(runs, jr)
	}
	return runs, nil
}

// runIDPattern is what a lev run id may look like (lev's are r-YYYYMMDD-HHMMSS-hex):
// anything else is refused before it reaches a command line.
var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// parseRunRef splits RUN into the agent named (or "" for any) and lev's run id. A run
// id names its agent when written AGENT/ID (manager/r-..., docs/r-...); a bare ID is
// looked up in every agent's lev.
// runTarget resolves a run reference (AGENT/ID, or a bare id any one agent holds) on a
// jail that is up: its config, the attached jail, the agent whose lev holds the run and
// the run's id. A malformed reference is refused before the jail is touched.
func runTarget(cmd *cobra.Command, configPath, ref string) (*config.Config, *attached, string, string, error) {
	cfg, err := loadJailConfig(configPath)
	if err != nil {
		return nil, nil, "", "", err
	}
	if _, _, err := parseRunRef(cfg, ref); err != nil {
		return nil, nil, "", "", err
	}
	a, err := attachJail(cmd, cfg)
	if err != nil {
		return nil, nil, "", "", err
	}
	agent, id, err := findRun(cmd, a, ref)
	if err != nil {
		return nil, nil, "", "", err
	}
	return cfg, a, agent, id, nil
}

func parseRunRef(cfg *config.Config, ref string) (agent, id string, err error) {
	agent, id, qualified := strings.Cut(ref, "/")
	if !qualified {
		agent, id = "", ref
	}
	if !runIDPattern.MatchString(id) {
		return "", "", usageErr("run id %q is not a lev run id (like r-20260101-120000-a1b2c3, or AGENT/ID): lever ps lists the runs", ref)
	}
	if qualified {
		if agent, err = agentOf(cfg, agent); err != nil {
			return "", "", err
		}
	}
	return agent, id, nil
}

// findRun resolves RUN to the agent whose lev holds it. A run id that no agent's lev
// knows, or that two know (ids are random per container), is exit 2 naming it.
func findRun(cmd *cobra.Command, a *attached, ref string) (string, string, error) {
	agent, id, err := parseRunRef(a.cfg, ref)
	if err != nil {
		return "", "", err
	}
	agents := agentNames(a.cfg)
	if agent != "" {
		agents = []string{agent}
	}
	var found []string
	var errs []error
	for _, ag := range agents {
		runs, err := listRuns(cmd, a, ag)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range runs {
			if r.info.ID == id {
				found = append(found, ag)
			}
		}
	}
	switch {
	case len(found) == 1:
		return found[0], id, nil
	case len(found) > 1:
		var q []string
		for _, f := range found {
			q = append(q, f+"/"+id)
		}
		return "", "", usageErr("run %s exists in %s: name one of %s", id, strings.Join(found, " and "), strings.Join(q, ", "))
	case len(errs) > 0:
		return "", "", &ExitError{Code: 1, Err: errors.Join(errs...)}
	}
	where := "any agent of jail " + a.cfg.Name
	if agent != "" {
		where = agent + " of jail " + a.cfg.Name
	}
	return "", "", usageErr("run %s does not exist in %s: lever ps lists the runs", id, where)
}

// sortRuns orders merged runs oldest first, then by agent.
func sortRuns(rs []jailRun) {
	sort.SliceStable(rs, func(i, j int) bool {
		if !rs[i].info.Created.Equal(rs[j].info.Created) {
			return rs[i].info.Created.Before(rs[j].info.Created)
		}
		return rs[i].Agent < rs[j].Agent
	})
}

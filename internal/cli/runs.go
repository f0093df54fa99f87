package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/exitcode"
)

// Runs as the host commands see them: lev's own records (lev ps --json) in each agent's
// lev container, and the RUN reference (AGENT/ID or a bare id) that names one.

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

// runTarget resolves a run reference (AGENT/ID, or a bare id any one agent holds) on a
// jail that is up: its config, the attached jail, the agent whose lev holds the run and
// the run's id. A malformed reference is refused before the jail is touched.
func runTarget(cmd *cobra.Command, configPath, ref string) (*config.Config, *attached, string, string, error) {
	cfg, err := loadConfig(cmd, configPath)
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

// parseRunRef splits RUN into the agent named (or "" for any) and lev's run id. A run
// id names its agent when written AGENT/ID (manager/r-..., docs/r-...); a bare ID is
// looked up in every agent's lev.
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
		return "", "", exitcode.New(1, errors.Join(errs...))
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

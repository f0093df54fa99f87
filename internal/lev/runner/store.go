// Package runner runs agents: it spawns a run from a blueprint and the current config,
// drives the model through the blueprint's stages with every tool call going through the
// pipeline, and records everything under runs/<id>/.
//
// On disk:
//
//	runs/<id>/run.json                  the record: status, stages, result
//	runs/<id>/result.json               the final output, once completed
//	runs/<id>/stages/<n>/stage.json     stage n (0-based): status, output, pending calls
//	runs/<id>/stages/<n>/messages.json  the stage's conversation so far
//	runs/<id>/stages/<n>/tool_calls.jsonl  one line per tool call, with its pipeline trail
//	runs/<id>/stages/<n>/taint_audit.json  written by the taint gate, if any (docs/lev-security.md)
//
// It owns a run's lifecycle (spawn, drive, resume, stop) and its records. It must not
// decide a tool call itself: every call goes through the pipeline (permission, fence,
// taint gate, sandbox), and a run is admitted only under the blueprint and config it was
// checked against.
package runner

import (
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"

	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
)

// Status is a run's or a stage's state, as run.json and stage.json record it.
type Status string

// Run and stage statuses. A run is running from the moment it is spawned; only a stage
// that has not started yet is pending.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	// StatusRefused: stopped on a read a config grant would allow; lev resume picks the
	// grant up once it is in config.toml.
	StatusRefused Status = "refused"
)

// Record is run.json.
type Record struct {
	ID        string   `json:"id"`
	Agent     string   `json:"agent"`
	Blueprint string   `json:"blueprint"`
	Version   string   `json:"version"`
	Workdir   string   `json:"workdir"`
	Input     string   `json:"input,omitempty"`
	Yolo      bool     `json:"yolo,omitempty"`
	Allow     []string `json:"allow,omitempty"`
	// Interactive: ask prompts wait in Question for an answer over the API.
	Interactive bool      `json:"interactive,omitempty"`
	Question    *Question `json:"question,omitempty"`
	// Parent is the run whose spawn_agent call started this one (a sub-agent), and Depth
	// how far below a top-level run it is (0 for one): subagent.go.
	Parent string `json:"parent,omitempty"`
	Depth  int    `json:"depth,omitempty"`
	Status Status `json:"status"`
	// Label is the run's taint label (the highest its context ever had): what its result,
	// error and records carry, as the label store reads them.
	Label   string            `json:"label,omitempty"`
	Error   string            `json:"error,omitempty"`
	Refusal *pipeline.Refusal `json:"refusal,omitempty"`
	Stage   int               `json:"stage"` // the current (or last) stage
	Stages  []StageRecord     `json:"stages"`
	Seeds   []SeedRecord      `json:"seeds,omitempty"`
	// Admission is the blueprint snapshot (and config hashes) the run was admitted under.
	Admission *Admission `json:"admission,omitempty"`
	// ReadPaths says, per declared [read_paths] entry, whether the config in force at
	// spawn (or the last resume) grants it.
	ReadPaths []ReadPathStatus `json:"read_paths,omitempty"`
	// MCP says, per MCP server the blueprint declares, whether it was granted and started
	// (this leg), its tools, or why not.
	MCP     []mcprun.Status `json:"mcp,omitempty"`
	Resumes int             `json:"resumes,omitempty"`
	// FirstEvent is the id of the current leg's run_start in events.jsonl: a client that
	// spawned or resumed the run streams its events from there.
	FirstEvent int64           `json:"first_event,omitempty"`
	Created    time.Time       `json:"created"`
	Updated    time.Time       `json:"updated"`
	Result     json.RawMessage `json:"result,omitempty"`
	// Usage is the tokens the run's model calls used, as the upstream reported them
	// (web_search's calls included), over every leg; absent until a call reports any.
	Usage *provider.Usage `json:"usage,omitempty"`
}

// StageRecord is one stage's summary in run.json (and its stage.json).
type StageRecord struct {
	Name      string              `json:"name"`
	Status    Status              `json:"status"`
	Turns     int                 `json:"turns"`
	ToolCalls int                 `json:"tool_calls"`
	Output    json.RawMessage     `json:"output,omitempty"`
	Pending   []provider.ToolCall `json:"pending,omitempty"` // calls still to run on resume
}

// SeedRecord notes what a seed read.
type SeedRecord struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	Real    string `json:"real"`
	Outside bool   `json:"outside,omitempty"`
	Bytes   int    `json:"bytes"`
}

// ReadPathStatus is one declared entry and its grant.
type ReadPathStatus struct {
	Entry   string `json:"entry"`
	Granted bool   `json:"granted"`
	By      string `json:"granted_by,omitempty"`
}

// Store is the runs directory.
type Store struct {
	Dir string
	mu  sync.Mutex
}

var idRe = regexp.MustCompile(`^r-[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$`)

// NewID makes a sortable, unguessable-enough run id.
func NewID() string {
	var b [3]byte
	rand.Read(b[:])
	return "r-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// RunDir is runs/<id>/.
func (s *Store) RunDir(id string) string { return filepath.Join(s.Dir, id) }

// StageDir is runs/<id>/stages/<n>/.
func (s *Store) StageDir(id string, n int) string {
	return filepath.Join(s.Dir, id, "stages", fmt.Sprint(n))
}

// ErrNotFound is an unknown run.
var ErrNotFound = errors.New("no such run")

// Load reads run.json.
func (s *Store) Load(id string) (*Record, error) {
	if !idRe.MatchString(id) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	data, err := os.ReadFile(filepath.Join(s.RunDir(id), "run.json"))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	r := &Record{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return r, nil
}

// Save writes run.json atomically.
func (s *Store) Save(r *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r.Updated = time.Now().UTC()
	return writeJSON(filepath.Join(s.RunDir(r.ID), "run.json"), r)
}

// List returns every run, newest first.
func (s *Store) List() ([]*Record, error) {
	ents, err := os.ReadDir(s.Dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		if r, err := s.Load(e.Name()); err == nil {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out, nil
}

// writeJSON writes a record file atomically. Its error names the file, so a run failed by
// it says which record could not be written and why.
func writeJSON(p string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("recording %s: %w", p, err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("recording %s: %w", p, err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("recording %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("recording %s: %w", p, err)
	}
	return nil
}

func readJSON(p string, v any) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

func appendJSONL(p string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("recording %s: %w", p, err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("recording %s: %w", p, err)
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("recording %s: %w", p, err)
	}
	return nil
}

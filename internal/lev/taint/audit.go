package taint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Record is one gate decision in stages/<n>/taint_audit.json. The file is a JSON array of
// these, in decision order; docs/lev-security.md documents every field.
type Record struct {
	Seq        int       `json:"seq"`
	Time       time.Time `json:"time"`
	Stage      int       `json:"stage"`
	CallID     string    `json:"call_id,omitempty"`
	Tool       string    `json:"tool"`
	Target     string    `json:"target"`
	Classified bool      `json:"classified"`
	Taint      Level     `json:"taint"`
	Clearance  Level     `json:"clearance"`
	// Policy is the policy's verdict (allow, deny, ask); empty when the data was within
	// clearance or a session answer covered it, so no policy was consulted.
	Policy         string `json:"policy,omitempty"`
	Rule           string `json:"rule,omitempty"`
	Mode           string `json:"mode"`
	Decision       string `json:"decision"`
	DecisionSource Source `json:"decision_source"`
	Reason         string `json:"reason"`
	// Waived marks an AutoBlock that --yolo overrode; the YoloAutoApprove record after it
	// names it in Overrides.
	Waived    bool `json:"waived,omitempty"`
	Overrides int  `json:"overrides,omitempty"`
}

// Auditor stores gate records.
type Auditor interface {
	Record(Record) error
}

// MemAudit keeps records in memory (dry runs, tests).
type MemAudit struct {
	mu      sync.Mutex
	Records []Record
}

func (m *MemAudit) Record(r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Records = append(m.Records, r)
	return nil
}

// FileAudit writes each stage's records to <RunDir>/stages/<n>/taint_audit.json. Every
// record is on disk (written to a temporary file, synced, renamed over the old one) before
// the gate returns, so a tool never fires ahead of its audit record.
type FileAudit struct {
	RunDir string

	mu    sync.Mutex
	cache map[string][]Record
}

// NewFileAudit audits into runDir's stages.
func NewFileAudit(runDir string) *FileAudit { return &FileAudit{RunDir: runDir} }

// AuditPath is where stage n's records live under runDir.
func AuditPath(runDir string, stage int) string {
	return filepath.Join(runDir, "stages", strconv.Itoa(stage), "taint_audit.json")
}

func (a *FileAudit) Record(r Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := AuditPath(a.RunDir, r.Stage)
	if a.cache == nil {
		a.cache = map[string][]Record{}
	}
	recs, ok := a.cache[p]
	if !ok {
		// A resumed run appends to what the earlier process wrote.
		old, err := ReadAudit(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		recs = old
	}
	recs = append(recs, r)
	if err := writeJSONAtomic(p, recs); err != nil {
		return err
	}
	a.cache[p] = recs
	return nil
}

// ReadAudit loads a taint_audit.json.
func ReadAudit(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []Record
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return recs, nil
}

func writeJSONAtomic(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("creating audit dir: %w", err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding audit: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".taint_audit-*")
	if err != nil {
		return fmt.Errorf("writing audit: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing audit %s: %w", path, werr)
	}
	return nil
}

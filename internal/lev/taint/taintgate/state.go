package taintgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// stateFile is the run's taint as save writes it and load reads it back on lev resume:
// the live entries, which call and turn added each, the high-water mark and the todo
// list's label.
type stateFile struct {
	Stage   int                      `json:"stage"`
	High    taint.Level              `json:"high"`
	Entries []taint.Entry            `json:"entries"`
	Calls   map[string]taint.EntryID `json:"calls"`
	Turns   map[string]taint.EntryID `json:"turns,omitempty"`
	Todo    taint.Level              `json:"todo,omitempty"`
}

// save persists the live labels so a resumed run (which reloads the conversation) also
// reloads its taint. Called with g.mu held.
func (g *Gate) save() {
	if g.state == "" {
		return
	}
	b, err := json.Marshal(stateFile{Stage: g.stage, High: g.high, Entries: g.ctx.Live(), Calls: g.byCall, Turns: g.byTurn, Todo: g.todo})
	tmp := g.state + ".tmp"
	if err == nil {
		err = os.MkdirAll(filepath.Dir(g.state), 0o700)
	}
	if err == nil {
		err = os.WriteFile(tmp, b, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, g.state)
	}
	if err != nil && g.err == nil {
		// Lost, the taint would restart low on lev resume: the engine stops the run.
		os.Remove(tmp)
		g.err = fmt.Errorf("recording %s: %w", g.state, err)
	}
}

func (g *Gate) load() error {
	b, err := os.ReadFile(g.state)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading taint state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("reading taint state %s: %w", g.state, err)
	}
	g.stage = st.Stage
	old := map[taint.EntryID]string{}
	for k, v := range st.Calls {
		old[v] = k
	}
	oldTurn := map[taint.EntryID]string{}
	for k, v := range st.Turns {
		oldTurn[v] = k
	}
	g.high = st.High
	g.todo = st.Todo
	for _, e := range st.Entries {
		id := g.add(e.Region, e.Level, e.Origin)
		if call, ok := old[e.ID]; ok {
			g.byCall[call] = id
		}
		if turn, ok := oldTurn[e.ID]; ok {
			g.byTurn[turn] = id
		}
	}
	g.started = true
	return nil
}

package runner

// The run's taint labels beyond its live context: its records and what its seeds read.

import (
	"path/filepath"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/taint/labels"
)

// LabelStore is the engine's taint label store: Labels, or taint-labels.json beside the
// runs directory (in lev's state, where no tool writes).
func (e *Engine) LabelStore() *labels.Store {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.Labels == nil {
		e.Labels = &labels.Store{Path: filepath.Join(filepath.Dir(e.Store.Dir), "taint-labels.json"),
			Runs: e.Store.Dir, State: []string{levconfig.Home(), filepath.Dir(e.Store.Dir)}}
	}
	return e.Labels
}

// labelRun raises the run's stored label to the highest its context ever had, before a
// record holding that context is written: a later run that reads the record (through a
// grant of the runs directory, or a lev home inside its workdir) takes this label. A gate
// that cannot say (none registered) leaves the run Private.
func (e *Engine) labelRun(r *run) error {
	l := taint.Private
	if h, ok := r.pipe.Gate.(interface{ HighWater() taint.Level }); ok {
		l = h.HighWater()
	}
	r.rec.Label = l.String()
	return e.LabelStore().RaiseRun(r.rec.ID, l)
}

// labelSeeds gives the first message the stored labels of the files its seeds read: a
// seed must not launder a file a tainted run wrote. A script seed's output is labelled
// like shell output, by what the workdir holds.
func (e *Engine) labelSeeds(r *run) {
	g, ok := r.pipe.Gate.(interface {
		AddInput(stage int, l taint.Level, origin string)
	})
	if !ok {
		return
	}
	ls := e.LabelStore()
	for _, s := range r.rec.Seeds {
		var l taint.Level
		var err error
		if s.Kind == "script" {
			l, err = ls.Tree(r.pipe.FS.Workdir, true)
		} else {
			l, err = ls.File(s.Real)
		}
		if err != nil {
			e.logf("run %s: seed %s: %v (read as private)", r.rec.ID, s.Path, err)
		}
		if l > taint.Internal {
			g.AddInput(0, l, "seed "+s.Path)
		}
	}
}

package runner

import (
	"errors"
	"fmt"
	"time"
)

// A run whose end cannot be written (the disk under lev's state is full, its directory
// gone) must not stay "running" for whoever waits on it: lev run would poll forever, and
// the cause would be only in the daemon's log, which the same full disk may have lost.
// The engine keeps such an end in memory, and Load, which the daemon serves every run's
// status from, reports it with its cause; a run the disk says is running but that no
// goroutine of this engine drives (one whose end was lost before it was kept) is
// reported failed too. So every wait on a run ends while the daemon lives, and a client
// whose daemon died gets an error from its next request.

// maxUnsaved bounds the ends kept in memory (the oldest is dropped: it reads "not
// driven" then, which is still the truth, less its cause).
const maxUnsaved = 1024

// saveEnd writes rec, a run's end, to run.json; when it cannot, it keeps the end, its
// error naming why, for Load, and says so in the daemon's log.
func (e *Engine) saveEnd(rec *Record) error {
	err := e.Store.Save(rec)
	if err == nil {
		e.mu.Lock()
		delete(e.unsaved, rec.ID)
		e.mu.Unlock()
		return nil
	}
	kept := rec.snapshot()
	kept.Error = fmt.Sprintf("%s; AND ITS RECORD COULD NOT BE WRITTEN: %v", rec.Error, err)
	if rec.Error == "" {
		kept.Error = fmt.Sprintf("its record could not be written: %v", err)
	}
	kept.Updated = time.Now().UTC()
	e.mu.Lock()
	if e.unsaved == nil {
		e.unsaved = map[string]*Record{}
	}
	if len(e.unsaved) >= maxUnsaved {
		var oldest string
		for id, r := range e.unsaved {
			if oldest == "" || r.Updated.Before(e.unsaved[oldest].Updated) {
				oldest = id
			}
		}
		delete(e.unsaved, oldest)
	}
	e.unsaved[rec.ID] = kept
	e.mu.Unlock()
	e.logf("run %s: %s: %s", rec.ID, kept.Status, kept.Error)
	return err
}

// errNotDriven is the end Load reports for a run left "running" on disk that nobody
// drives and whose end was not kept.
var errNotDriven = errors.New("lev is not driving this run, and its record was left saying running: its end could not be written (the daemon's log may say why); lev resume continues it")

// Load is Store.Load as the engine knows it: a run whose end could not be written is
// reported with that end and its cause, not as the "running" left on disk.
func (e *Engine) Load(id string) (*Record, error) {
	rec, err := e.Store.Load(id)
	if err != nil || rec.Status != StatusRunning {
		return rec, err
	}
	if r, held := e.endOf(id); r != nil || held {
		if r != nil {
			return r, nil
		}
		return rec, nil
	}
	// Not driven: its goroutine may have saved its end and let go a moment ago.
	if rec, err = e.Store.Load(id); err != nil || rec.Status != StatusRunning {
		return rec, err
	}
	if r, held := e.endOf(id); r != nil || held {
		if r != nil {
			return r, nil
		}
		return rec, nil
	}
	rec.Status, rec.Error = StatusFailed, errNotDriven.Error()
	return rec, nil
}

// endOf is id's kept end, if any, and whether a goroutine (or a claim) holds it.
func (e *Engine) endOf(id string) (*Record, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy(id) {
		return nil, true // driven again (a resume): the kept end is history
	}
	if r := e.unsaved[id]; r != nil {
		return r.snapshot(), false
	}
	return nil, false
}

// List is Store.List as Load reports each run.
func (e *Engine) List() ([]*Record, error) {
	recs, err := e.Store.List()
	if err != nil {
		return nil, err
	}
	for i, r := range recs {
		if r.Status == StatusRunning {
			if l, err := e.Load(r.ID); err == nil {
				recs[i] = l
			}
		}
	}
	return recs, nil
}

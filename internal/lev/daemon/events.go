package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
)

// SSE timing: a keepalive comment keeps proxies and idle timers from closing a quiet
// stream; a client that takes longer than WriteGrace to accept one message is dropped, so
// a stalled reader costs one goroutine for a bounded time and never the run (the run only
// appends to the file; see package events).
var (
	KeepAlive  = 15 * time.Second
	WriteGrace = 30 * time.Second
)

// afterParam is where a client resumes: ?after=N, else the Last-Event-ID header, else 0.
func afterParam(r *http.Request) (int64, error) {
	v, name := r.URL.Query().Get("after"), "after"
	if !r.URL.Query().Has("after") {
		v, name = r.Header.Get("Last-Event-ID"), "Last-Event-ID"
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad %s %q: want an event id (a number >= 0)", name, v)
	}
	return n, nil
}

// events is GET /api/agents/{id}/events: the run's events after the given id, as SSE,
// live while the run is driven; the stream ends after the first terminal event (run_end)
// past that id, or at the end of the file when the run is not being driven.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.Engine.Load(id); err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	// ?follow=0: what is written so far, then the end (lev logs without --follow).
	follow := r.URL.Query().Get("follow") != "0"
	after, err := afterParam(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	var tail *events.Tail
	defer func() {
		if tail != nil {
			tail.Close()
		}
	}()
	for {
		// Take the wake channel before reading, so an event written in between wakes us.
		live := s.Engine.LiveEvents(id)
		if !follow {
			live = nil
		}
		var wake <-chan struct{}
		if live != nil {
			wake = live.Wake()
		}
		if tail == nil {
			t, err := events.NewTail(s.Engine.Store.EventsPath(id))
			switch {
			case err == nil:
				tail = t
			case !errors.Is(err, os.ErrNotExist):
				s.sseError(w, rc, err)
				return
			}
		}
		var evs []events.Event
		if tail != nil {
			if evs, err = tail.Next(256); err != nil {
				s.sseError(w, rc, err)
				return
			}
		}
		for i := range evs {
			ev := &evs[i]
			if ev.ID <= after {
				continue
			}
			if err := writeSSE(w, rc, ev); err != nil {
				// The client went away or stalled past WriteGrace.
				if s.Log != nil {
					s.Log("events stream of %s: dropped the client at event %d: %v", id, ev.ID, err)
				}
				return
			}
			after = ev.ID
			if ev.Terminal() {
				return
			}
		}
		if len(evs) == 256 {
			continue
		}
		if live == nil {
			// Not driven (finished, or never started a leg): what is in the file is all.
			// A log closed a moment ago is complete on disk: one more read takes its rest.
			if (!follow || s.Engine.LiveEvents(id) == nil) && len(evs) == 0 {
				return
			}
			continue
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		case <-time.After(KeepAlive):
			rc.SetWriteDeadline(time.Now().Add(WriteGrace))
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

func writeSSE(w http.ResponseWriter, rc *http.ResponseController, ev *events.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	rc.SetWriteDeadline(time.Now().Add(WriteGrace))
	if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, data); err != nil {
		return err
	}
	return rc.Flush()
}

// sseError ends a stream that already said 200 with an error event.
func (s *Server) sseError(w http.ResponseWriter, rc *http.ResponseController, err error) {
	if s.Log != nil {
		s.Log("events stream: %v", err)
	}
	data, _ := json.Marshal(map[string]string{"error": err.Error()})
	rc.SetWriteDeadline(time.Now().Add(WriteGrace))
	fmt.Fprintf(w, "event: error\ndata: %s\n\n", data)
	rc.Flush()
}

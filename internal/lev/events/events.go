// Package events is a run's live progress: the Event type lev's engine emits at each step
// (stage start and end, model turn, tool call and its decision, question and answer, taint
// gate decision, result, end), the per-run log that persists them to events.jsonl in the
// run's record directory, and the tail that streams them to any number of readers.
//
// The file is the buffer: the engine only appends to it and wakes readers through a
// channel it closes (never a send), so a reader that stalls (a dead SSE client, a full TCP
// window) never holds the run; each reader tails the file at its own pace and misses
// nothing.
//
// It owns the event type, the log and the tail. It must not let a reader hold the run: the
// engine never waits on one.
package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Type is what an event is about.
type Type string

// Event types.
const (
	RunStart   Type = "run_start"
	StageStart Type = "stage_start"
	StageEnd   Type = "stage_end"
	Turn       Type = "turn"
	ToolCall   Type = "tool_call"
	ToolResult Type = "tool_result"
	Ask        Type = "ask"
	AnswerT    Type = "answer"
	Gate       Type = "gate"
	Result     Type = "result"
	RunEnd     Type = "run_end"
)

// Decision is how a tool call fared in the pipeline, on tool_call and gate events.
type Decision string

// Decisions.
const (
	Allowed Decision = "allowed" // passed every step with nobody asked
	Asked   Decision = "asked"   // the permission was ask and a person said yes
	Refused Decision = "refused" // a step refused it (Step says which)
	Gated   Decision = "gated"   // the taint gate put it to a person, who let it through
)

// Status is the state an event reports. run_start, stage_end, run_end and result carry
// the run's or the stage's status as run.json records it (runner.Status, which this
// package cannot name: the runner imports it); tool_result carries one of the call
// outcomes below.
type Status string

// Tool call outcomes, on tool_result events.
const (
	StatusOK      Status = "ok"      // the tool ran and reported success
	StatusError   Status = "error"   // the tool ran and reported an error (Message says which)
	StatusRefused Status = "refused" // a pipeline step refused it (Step says which)
)

// FileName is the events file in a run's record directory.
const FileName = "events.jsonl"

// MaxArgs caps the arguments (and the result preview) an event carries: events are for
// watching a run; tool_calls.jsonl keeps the full trail.
const MaxArgs = 1024

// Event is one line of events.jsonl and one SSE message.
type Event struct {
	ID   int64     `json:"id"`
	Time time.Time `json:"time"`
	Run  string    `json:"run"`
	Type Type      `json:"type"`

	Agent      string          `json:"agent,omitempty"`
	Stage      string          `json:"stage,omitempty"`
	StageIndex *int            `json:"stage_index,omitempty"`
	Turn       int             `json:"turn,omitempty"`
	Calls      int             `json:"calls,omitempty"` // tool calls the model asked for in this turn
	Call       string          `json:"call,omitempty"`  // the tool call's id
	Tool       string          `json:"tool,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Decision   Decision        `json:"decision,omitempty"`
	Step       string          `json:"step,omitempty"`
	Source     string          `json:"source,omitempty"`
	// Taint and Clearance are the labels a taint-gate decision compared (tool_call and
	// gate events of a call the gate decided on).
	Taint      string          `json:"taint,omitempty"`
	Clearance  string          `json:"clearance,omitempty"`
	Question   string          `json:"question,omitempty"`
	GatePrompt bool            `json:"gate_prompt,omitempty"` // an ask from the taint gate: once / session / deny
	Operator   bool            `json:"operator,omitempty"`    // an ask_operator question: the answer is the operator's text
	Answer     string          `json:"answer,omitempty"`
	Message    string          `json:"message,omitempty"`
	Bytes      int             `json:"bytes,omitempty"`
	DurationMS float64         `json:"duration_ms,omitempty"`
	Status     Status          `json:"status,omitempty"`
	Error      string          `json:"error,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
}

// Terminal reports whether ev ends a leg of the run (the stream of that leg ends there; a
// resume starts a new leg with a new run_start).
func (ev *Event) Terminal() bool { return ev.Type == RunEnd }

// MaxAskArgs caps the arguments an ask event carries. The prompt shows them, and a person
// must read what they approve: a command padded past MaxArgs would otherwise hide its
// tail behind the mark. The cap is far above any command a person reads (a longer one is
// still marked, and is better answered no) and well under MaxLine.
const MaxAskArgs = 64 << 10

// CapArgs returns args as an event carries them: unchanged up to MaxArgs bytes, else a
// JSON string of the first MaxArgs bytes with a mark.
func CapArgs(args json.RawMessage) json.RawMessage { return capArgs(args, MaxArgs) }

// CapAskArgs is CapArgs for an ask event, at MaxAskArgs.
func CapAskArgs(args json.RawMessage) json.RawMessage { return capArgs(args, MaxAskArgs) }

func capArgs(args json.RawMessage, max int) json.RawMessage {
	if len(args) <= max {
		return args
	}
	b, _ := json.Marshal(strings.ToValidUTF8(string(args[:max]), "") + "…(truncated)")
	return b
}

// Log is one run's events.jsonl, open for appending while the run is driven.
type Log struct {
	mu     sync.Mutex
	path   string
	run    string
	f      *os.File
	last   int64
	err    error
	wake   chan struct{}
	closed bool
}

// Open opens (creating, mode 0600) a run's events file for appending; ids continue after
// the last event already in it (a resumed run's events follow its earlier ones).
func Open(path, run string) (*Log, error) {
	last, err := LastID(path)
	if err != nil {
		return nil, err
	}
	// Never through a link, never anything but a regular file: the trail goes where the
	// record is, or the run does not go on.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("events: %s is not a regular file", path)
	}
	return &Log{path: path, run: run, f: f, last: last, wake: make(chan struct{})}, nil
}

// Path is the file.
func (l *Log) Path() string { return l.path }

// Emit stamps ev with the next id, the time and the run, appends it, and wakes the
// readers. It never waits for a reader. The first write error sticks: every later Emit
// returns it (a trail with a hole in it is not a trail).
func (l *Log) Emit(ev Event) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	if l.closed {
		return 0, errors.New("events: log closed")
	}
	ev.ID = l.last + 1
	ev.Time = time.Now().UTC()
	ev.Run = l.run
	line, err := json.Marshal(ev)
	if err != nil {
		l.err = fmt.Errorf("events: encoding a %s event: %w", ev.Type, err)
		return 0, l.err
	}
	line = append(line, '\n')
	// One write per line on an O_APPEND file: a reader sees whole lines or a partial tail
	// it keeps until the rest arrives.
	if n, err := l.f.Write(line); err != nil || n != len(line) {
		if err == nil {
			err = io.ErrShortWrite
		}
		l.err = fmt.Errorf("events: writing %s: %w", l.path, err)
		return 0, l.err
	}
	l.last = ev.ID
	close(l.wake)
	l.wake = make(chan struct{})
	return ev.ID, nil
}

// Last is the id of the last event written.
func (l *Log) Last() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Err is the first write error, if any.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Wake returns a channel closed at the next Emit (or Close). Take it before reading the
// file, so an event written in between is not missed.
func (l *Log) Wake() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake
}

// Close syncs and closes the file and wakes the readers for the last time.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.wake)
	err := l.f.Sync()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err != nil && l.err == nil {
		l.err = fmt.Errorf("events: closing %s: %w", l.path, err)
	}
	return l.err
}

// Closed reports whether the log was closed (its run is no longer driven).
func (l *Log) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// LastID is the id of the last complete event in path (0 for none or no file).
func LastID(path string) (int64, error) {
	t, err := NewTail(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer t.Close()
	var last int64
	for {
		evs, err := t.Next(4096)
		if err != nil {
			return 0, err
		}
		if len(evs) == 0 {
			return last, nil
		}
		last = evs[len(evs)-1].ID
	}
}

// Tail reads a run's events file from the start, returning complete lines as they arrive.
type Tail struct {
	f       *os.File
	r       *bufio.Reader
	partial []byte
}

// NewTail opens path for tailing.
func NewTail(path string) (*Tail, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return &Tail{f: f, r: bufio.NewReaderSize(f, 64<<10)}, nil
}

// MaxLine bounds one event line; a longer one is a corrupt file, not an event.
const MaxLine = 1 << 20

// Next returns up to max events written since the last call (none at the end of what is
// written so far). A line that is not an event is an error naming the file.
func (t *Tail) Next(max int) ([]Event, error) {
	var out []Event
	for len(out) < max {
		chunk, err := t.r.ReadSlice('\n')
		if len(chunk) > 0 {
			t.partial = append(t.partial, chunk...)
			if len(t.partial) > MaxLine {
				return out, fmt.Errorf("events: %s: a line longer than %d bytes", t.f.Name(), MaxLine)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF {
			// A partial line stays until its writer finishes it.
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("events: reading %s: %w", t.f.Name(), err)
		}
		line := bytes.TrimSpace(t.partial)
		t.partial = t.partial[:0]
		if len(line) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return out, fmt.Errorf("events: %s: bad line: %w", t.f.Name(), err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// Close closes the file.
func (t *Tail) Close() error { return t.f.Close() }

package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/events"
)

// StreamIdle is how long a client waits on a stream that carries nothing, not even the
// daemon's keepalive (KeepAlive), before it takes the daemon for hung. A variable for tests.
var StreamIdle = 4 * KeepAlive

var errStreamIdle = errors.New("the daemon sent nothing, not even a keepalive, for too long")

// ErrStreamEnded is a stream that ended before a terminal event: the run is not being
// driven and its file holds no end for this leg (a run from before events, or between a
// refusal and its resume).
var ErrStreamEnded = errors.New("the event stream ended without a run_end")

// Events streams a run's events with id > after to fn, in order, until a terminal event
// (returned with a nil error) or ctx ends. A dropped connection is resumed from the last
// event seen (Last-Event-ID), so fn sees each event once, with no gap.
func (c *Client) Events(ctx context.Context, id string, after int64, fn func(ev *events.Event) error) (int64, error) {
	return c.stream(ctx, id, after, true, fn)
}

// EventsSoFar is Events without waiting: the events written so far, then ErrStreamEnded
// (or nil when the last one is terminal).
func (c *Client) EventsSoFar(ctx context.Context, id string, after int64, fn func(ev *events.Event) error) (int64, error) {
	return c.stream(ctx, id, after, false, fn)
}

func (c *Client) stream(ctx context.Context, id string, after int64, follow bool, fn func(ev *events.Event) error) (int64, error) {
	hc := &http.Client{Transport: c.Transport} // no overall timeout: the stream lasts as long as the run
	failures := 0
	for {
		done, err := c.eventsOnce(ctx, hc, id, follow, &after, fn)
		if done {
			return after, err
		}
		if ctx.Err() != nil {
			return after, ctx.Err()
		}
		var ae *APIError
		if errors.As(err, &ae) || errors.Is(err, ErrStreamEnded) {
			return after, err
		}
		if failures++; failures > 5 {
			return after, fmt.Errorf("event stream of %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return after, ctx.Err()
		case <-time.After(time.Duration(failures) * 200 * time.Millisecond):
		}
	}
}

func (c *Client) eventsOnce(ctx context.Context, hc *http.Client, id string, follow bool, after *int64, fn func(*events.Event) error) (bool, error) {
	u := c.Base + "/api/agents/" + url.PathEscape(id) + "/events"
	if !follow {
		u += "?follow=0"
	}
	// The daemon writes at least a keepalive every KeepAlive: a stream silent for
	// StreamIdle is a daemon that hangs, and the read ends (the caller reconnects a few
	// times, then reports it) instead of waiting forever.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(StreamIdle, func() { cancel(errStreamIdle) })
	defer idle.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return true, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(*after, 10))
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := capread.Body(resp)
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(data, &e)
		if e.Error == "" {
			e.Error = fmt.Sprintf("HTTP %d", resp.StatusCode)
		}
		return true, &APIError{Code: resp.StatusCode, Msg: e.Error}
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var typ string
	var data []byte
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return false, ErrStreamEnded
			}
			if cause := context.Cause(ctx); errors.Is(cause, errStreamIdle) {
				return false, cause
			}
			return false, err
		}
		idle.Reset(StreamIdle)
		switch {
		case line == "":
			if data == nil {
				continue
			}
			d := data
			t := typ
			data, typ = nil, ""
			if t == "error" {
				var e struct {
					Error string `json:"error"`
				}
				json.Unmarshal(d, &e)
				return true, fmt.Errorf("event stream of %s: %s", id, e.Error)
			}
			var ev events.Event
			if err := json.Unmarshal(d, &ev); err != nil {
				return true, fmt.Errorf("event stream of %s: bad event: %w", id, err)
			}
			if ev.ID <= *after {
				continue // never twice
			}
			*after = ev.ID
			if err := fn(&ev); err != nil {
				return true, err
			}
			if ev.Terminal() {
				return true, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")...)
		}
	}
}

// readLine reads one SSE line, bounded (events.MaxLine).
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err != nil {
			return "", err
		}
		b = append(b, chunk...)
		if len(b) > events.MaxLine+64 {
			return "", fmt.Errorf("event stream: a line longer than %d bytes", events.MaxLine)
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}

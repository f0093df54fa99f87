package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sleepForever blocks until the process is killed. Not `select {}`: with no other
// goroutine the runtime may call that a deadlock and exit the process (it did, now and
// then, and the test saw its server vanish before the attack began).
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// lifecycleStdio runs the fake server modes of this file; false: not one of them.
//
//	deaf MARKER   starts a child (this binary, "sleeper MARKER"), answers the handshake
//	              and tools/list, then never reads its stdin again (and ignores SIGTERM)
//	sleeper M     sleeps until killed (M only names it in /proc)
func lifecycleStdio(mode, arg string) bool {
	switch mode {
	case "sleeper":
		sleepForever()
	case "deaf":
		signal.Ignore(syscall.SIGTERM)
		child := exec.Command(os.Args[0], "mcp-fake-server", "sleeper", arg)
		if err := child.Start(); err != nil {
			os.Exit(3)
		}
		in := bufio.NewReader(os.Stdin)
		for {
			line, err := in.ReadBytes('\n')
			if err != nil {
				return true
			}
			var m rpcMsg
			json.Unmarshal(line, &m)
			if len(m.ID) == 0 {
				continue
			}
			if b, ok := handshake(m); ok {
				os.Stdout.Write(append(b, '\n'))
				continue
			}
			if m.Method == "tools/list" {
				os.Stdout.Write(append(reply(m.ID, toolList("echo", "echoes text")), '\n'))
				sleepForever() // stops reading: lev's next large write fills the pipe
			}
		}
	}
	return false
}

// procsWith lists the processes whose command line holds marker.
func procsWith(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// pollProcs waits (generously) until the count of marker's processes satisfies ok.
func pollProcs(t *testing.T, marker, what string, ok func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok(len(procsWith(marker))) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes now:\n%s", what, strings.Join(procsWith(marker), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStdioServerStopsReading: a stdio server that stops reading its stdin (after the
// handshake and tools/list) is sent a call whose request (512 KiB of arguments) cannot fit
// the pipe. The write's deadline (the session's timeout) ends it: the call fails saying
// the server stopped reading, and the server and its child are killed. A Close while the
// write is stuck (the session's timeout far away) returns once closeGrace passed, killing
// the server, and the stuck call returns with it. Control: the same call to a server
// that reads is answered; the deaf server's processes were running before.
func TestStdioServerStopsReading(t *testing.T) {
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("a", 512<<10)})
	cases := []struct {
		name    string
		mode    string
		timeout time.Duration
		close   bool // Close while the call is stuck
	}{
		{"control: a server that reads", "ok", 5 * time.Second, false},
		{"deaf: the write's deadline", "deaf", 3 * time.Second, false},
		{"deaf: Close while the write is stuck", "deaf", 10 * time.Minute, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			marker := "lev-deaf-" + strconv.FormatInt(time.Now().UnixNano(), 10)
			s := connect(t, fakeServer("srv", tc.mode, marker, nil), Options{Timeout: tc.timeout})
			if _, err := s.Tools(context.Background()); err != nil {
				t.Fatal(err)
			}
			if tc.mode == "ok" {
				res, err := s.Call(context.Background(), "echo", big)
				if err != nil || len(res.Text) != 512<<10 {
					t.Fatalf("control: %d bytes, %v", len(res.Text), err)
				}
				return
			}
			pollProcs(t, marker, "control: the server and its child run", func(n int) bool { return n >= 2 })
			done := make(chan error, 1)
			go func() { _, err := s.Call(context.Background(), "echo", big); done <- err }()
			if tc.close {
				// The call is (or soon is) stuck writing: Close must not wait on it.
				time.Sleep(500 * time.Millisecond)
				closed := make(chan struct{})
				go func() { s.Close(); close(closed) }()
				select {
				case <-closed:
				case <-time.After(60 * time.Second):
					t.Fatal("Close waited on the stuck write")
				}
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(90 * time.Second):
				t.Fatal("the call to a server that stopped reading never returned")
			}
			if err == nil {
				t.Fatal("the call succeeded")
			}
			var se *StdinError
			if !tc.close && (!errors.As(err, &se) || !strings.Contains(err.Error(), "MCP server srv stopped reading its stdin (a write did not complete within 3s): dropped, and the server killed")) {
				t.Fatalf("call: %v", err)
			}
			pollProcs(t, marker, "the server or its child outlived the session", func(n int) bool { return n == 0 })
			if !tc.close {
				// The session is dropped: the next call says why at once.
				if _, err := s.Call(context.Background(), "echo", nil); !errors.As(err, &se) {
					t.Fatalf("next call: %v", err)
				}
			}
		})
	}
}

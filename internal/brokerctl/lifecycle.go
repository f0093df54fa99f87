package brokerctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// pidRecord identifies the broker process beyond its pid: a pid is reused after the
// process dies, so the record also holds the kernel's start time for it and its argv.
// Only a live process matching all three is taken to be the broker.
type pidRecord struct {
	PID        int      `json:"pid"`
	StartTicks uint64   `json:"start_ticks"`
	Argv       []string `json:"argv"`
}

// BrokerStatus is what Status reports.
type BrokerStatus struct {
	Running     bool   `json:"running"`
	PID         int    `json:"pid,omitempty"`
	Stale       bool   `json:"stale,omitempty"`
	StaleReason string `json:"stale_reason,omitempty"`
	State       *State `json:"state,omitempty"` // listen address, SANs, certificate expiry
}

func readPid(stateDir string) (*pidRecord, error) {
	data, err := os.ReadFile(pidPath(stateDir))
	if err != nil {
		return nil, err
	}
	var p pidRecord
	if err := json.Unmarshal(data, &p); err != nil || p.PID <= 0 {
		return nil, fmt.Errorf("%s is not a broker pid record", pidPath(stateDir))
	}
	return &p, nil
}

// check says whether p still names a live process that is the broker it recorded.
func (p *pidRecord) check() (bool, string) {
	ticks, argv, err := procIdentity(p.PID)
	if err != nil {
		return false, fmt.Sprintf("pid %d is not running", p.PID)
	}
	if ticks != p.StartTicks {
		return false, fmt.Sprintf("pid %d is now another process (start time %d, recorded %d)", p.PID, ticks, p.StartTicks)
	}
	if !slices.Equal(argv, p.Argv) {
		return false, fmt.Sprintf("pid %d runs %q, not the recorded broker command", p.PID, strings.Join(argv, " "))
	}
	return true, ""
}

// Status reports whether the instance's broker is running. A pid file whose process is
// gone or is some other process is reported stale, never trusted.
func Status(stateDir string) (*BrokerStatus, error) {
	p, err := readPid(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return &BrokerStatus{}, nil
	}
	if err != nil {
		return &BrokerStatus{Stale: true, StaleReason: err.Error()}, nil
	}
	ok, why := p.check()
	if !ok {
		return &BrokerStatus{PID: p.PID, Stale: true, StaleReason: why}, nil
	}
	st := &BrokerStatus{Running: true, PID: p.PID}
	if data, err := os.ReadFile(statePath(stateDir)); err == nil {
		var s State
		if json.Unmarshal(data, &s) == nil && s.PID == p.PID {
			st.State = &s
		}
	}
	return st, nil
}

// claimPidFile makes this process the instance's broker: it refuses when a live broker
// already holds the pid file, replaces a stale one, and returns a release func that
// removes the file if it still names this process.
func claimPidFile(stateDir string) (func(), error) {
	if err := os.MkdirAll(brokerDir(stateDir), 0o700); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	// An exclusive flock serialises two brokers starting at once; the kernel drops it when
	// the holder dies, so it can never go stale.
	lock, err := os.OpenFile(filepath.Join(brokerDir(stateDir), "broker.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		pid := 0
		if p, err := readPid(stateDir); err == nil {
			pid = p.PID
		}
		return nil, fmt.Errorf("broker for %s is already running (pid %d)", stateDir, pid)
	}
	if st, _ := Status(stateDir); st.Running && st.PID != os.Getpid() {
		lock.Close()
		return nil, fmt.Errorf("broker for %s is already running (pid %d)", stateDir, st.PID)
	}
	me := os.Getpid()
	ticks, argv, err := procIdentity(me)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("broker: reading own identity: %w", err)
	}
	data, _ := json.Marshal(pidRecord{PID: me, StartTicks: ticks, Argv: argv})
	if err := ca.WriteFileAtomic(pidPath(stateDir), data, 0o600); err != nil {
		lock.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	return func() {
		if p, err := readPid(stateDir); err == nil && p.PID == me {
			os.Remove(pidPath(stateDir))
		}
		lock.Close()
	}, nil
}

// StartOptions say how to run the detached broker.
type StartOptions struct {
	// Argv runs the broker in the foreground; lever uses its own executable with
	// "broker serve <config>".
	Argv []string
	// Env is the child's environment (nil: this process's), carrying $LEVER_HOST_ALIAS_IP.
	Env []string
	// Timeout bounds the wait for the broker to listen (default 15 s).
	Timeout time.Duration
}

// Start runs the broker as a detached host process (its own session, output to
// <state>/broker/broker.log) and returns once it is listening. A running broker is left
// alone and reported; a stale pid file is cleared first.
func Start(ctx context.Context, stateDir string, so StartOptions) (*BrokerStatus, error) {
	if len(so.Argv) == 0 {
		return nil, errors.New("broker start: no command")
	}
	st, err := Status(stateDir)
	if err != nil {
		return nil, err
	}
	if st.Running {
		return st, nil
	}
	if st.Stale {
		os.Remove(pidPath(stateDir))
		os.Remove(statePath(stateDir))
	}
	if err := os.MkdirAll(brokerDir(stateDir), 0o700); err != nil {
		return nil, fmt.Errorf("broker start: %w", err)
	}
	logf, err := os.OpenFile(logPath(stateDir), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("broker start: %w", err)
	}
	defer logf.Close()
	off, _ := logf.Seek(0, 2)
	cmd := exec.Command(so.Argv[0], so.Argv[1:]...)
	cmd.Env = so.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("broker start: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timeout := so.Timeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("broker exited during start (%v): %s", err, logTail(logPath(stateDir), off))
		case <-deadline.C:
			cmd.Process.Kill()
			return nil, fmt.Errorf("broker did not start listening within %s: %s", timeout, logTail(logPath(stateDir), off))
		case <-ctx.Done():
			cmd.Process.Kill()
			return nil, ctx.Err()
		case <-tick.C:
			st, err := Status(stateDir)
			if err == nil && st.Running && st.PID == cmd.Process.Pid && st.State != nil {
				return st, nil
			}
		}
	}
}

func logTail(path string, from int64) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < from {
		return "(no log)"
	}
	data = data[from:]
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}

// Stop ends the instance's broker: SIGTERM, then SIGKILL after grace. A stale pid file is
// removed without signalling anything, since its pid may now belong to another process.
func Stop(ctx context.Context, stateDir string, grace time.Duration) (*BrokerStatus, error) {
	st, err := Status(stateDir)
	if err != nil {
		return nil, err
	}
	if !st.Running {
		if st.Stale {
			os.Remove(pidPath(stateDir))
			os.Remove(statePath(stateDir))
		}
		return st, nil
	}
	p, err := readPid(stateDir)
	if err != nil {
		return nil, err
	}
	if grace <= 0 {
		grace = 10 * time.Second
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("broker stop: signalling pid %d: %w", p.PID, err)
	}
	deadline := time.Now().Add(grace)
	for {
		if ok, _ := p.check(); !ok {
			break
		}
		if time.Now().After(deadline) {
			syscall.Kill(p.PID, syscall.SIGKILL)
			deadline = time.Now().Add(grace)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	os.Remove(pidPath(stateDir))
	os.Remove(statePath(stateDir))
	return st, nil
}

package levconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"sync"
	"time"
)

// Watcher holds the current config and reloads it when the file changes. A reload that
// fails keeps the last good config and records the error.
type Watcher struct {
	file string
	log  func(format string, args ...any)

	mu      sync.RWMutex
	cur     *Config
	lastErr error
	sum     [32]byte
	loaded  time.Time
}

// NewWatcher loads file once; a bad file at start is an error (there is no last good one).
func NewWatcher(file string, log func(string, ...any)) (*Watcher, error) {
	w := &Watcher{file: file, log: log}
	data, _ := os.ReadFile(file)
	c, err := Parse(file, data)
	if err != nil {
		return nil, err
	}
	w.cur, w.sum, w.loaded = c, sha256.Sum256(data), time.Now()
	return w, nil
}

// Current is the config in force.
func (w *Watcher) Current() *Config {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.cur
}

// LastError is the error of the last failed reload, nil after a good one.
func (w *Watcher) LastError() error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.lastErr
}

// Check reloads if the file's content changed; it reports whether a new config took effect.
func (w *Watcher) Check() bool {
	data, err := os.ReadFile(w.file)
	if err != nil && !os.IsNotExist(err) {
		return false
	}
	sum := sha256.Sum256(data)
	w.mu.RLock()
	same := bytes.Equal(sum[:], w.sum[:])
	w.mu.RUnlock()
	if same {
		return false
	}
	c, perr := Parse(w.file, data)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sum = sum
	if perr != nil {
		w.lastErr = perr
		if w.log != nil {
			w.log("config reload failed, keeping the last good config: %v", perr)
		}
		return false
	}
	w.cur, w.lastErr, w.loaded = c, nil, time.Now()
	if w.log != nil {
		w.log("config reloaded from %s", w.file)
	}
	return true
}

// Run polls the file every interval until ctx ends. Polling the content hash needs no
// inotify and catches editors that replace the file by rename.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check()
		}
	}
}

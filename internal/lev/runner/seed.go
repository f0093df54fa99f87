package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/levstate"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

const maxSeedBytes = 1 << 20

// The seeds together are capped too: a glob seed matches whatever the workdir holds, and
// an agent writes the workdir, so without these an earlier run's thousands of megabyte
// files would all be read into the next spawn's first message (lev's memory, the record).
// Past either the spawn is refused, naming the cap, before the model is asked anything.
const (
	// MaxSeedTotal bounds the seeds' content together (file, glob and script output).
	MaxSeedTotal = 4 << 20
	// MaxSeedFiles bounds the files the seeds name together (each glob match is one).
	MaxSeedFiles = 1000
)

// seed runs the blueprint's seeds at spawn. A seed that reads or runs something is that
// tool's call, taken through the pipeline like any other (offer aside: the blueprint
// declares it, the model does not choose it): a file or glob seed is a read_file call, a
// script seed a shell call in the first stage's sandbox. So each answers to the tool's
// permission (deny refuses the spawn; ask is a refusal too, since nobody is attached to
// a run before it exists: --allow shell, --yolo or an allow in config.toml lift it), the
// fence and lev's protected state, the taint gate, and for scripts the sandbox, masking
// and scrubbed environment of stage 1's shell. Each is recorded in stage 1's
// tool_calls.jsonl with an id "seed-N".
//
// A "blueprint:" seed reads only from the blueprint's own directory: text shipped with
// the blueprint, like its prompts. A "blueprint:" script still runs as a shell call.
func (e *Engine) seed(ctx context.Context, r *run) error {
	if len(r.bp.Seeds) == 0 {
		return nil
	}
	st0 := r.bp.Order[0]
	dir := e.Store.StageDir(r.rec.ID, 0)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("seeds: %w", err)
	}
	pst := pipeline.Stage{Index: 0, Name: st0.Name, Dir: dir, Tools: []string{"read_file", "shell"},
		Sandbox: mergeSandbox(r.bp.Sandbox, st0.Sandbox)}
	ss := &stageState{rec: &StageRecord{Name: st0.Name}, dir: dir}
	asker := r.pipe.Asker
	r.pipe.Asker = nil
	if r.asker != nil {
		r.asker.mu.Lock()
		r.asker.spawning = true
		r.asker.mu.Unlock()
	}
	defer func() {
		r.pipe.Asker = asker
		if r.asker != nil {
			r.asker.mu.Lock()
			r.asker.spawning = false
			r.asker.mu.Unlock()
		}
	}()
	n, files, total := 0, 0, 0
	var b strings.Builder
	for i, s := range r.bp.Seeds {
		kind, spec := "file", s.File
		switch {
		case s.Glob != "":
			kind, spec = "glob", s.Glob
		case s.Script != "":
			kind, spec = "script", s.Script
		}
		refuse := func(err error) error {
			return fmt.Errorf("spawn refused: seed %d (%s %q): %w", i+1, kind, spec, err)
		}
		var paths []string
		if kind == "glob" {
			pat := spec
			if rest, ok := strings.CutPrefix(spec, "blueprint:"); ok {
				pat = filepath.Join(r.bp.Dir, rest)
			} else if !filepath.IsAbs(pat) {
				pat = filepath.Join(r.pipe.FS.Workdir, pat)
			}
			m, err := filepath.Glob(pat)
			if err != nil {
				return refuse(err)
			}
			for _, p := range m {
				if strings.HasPrefix(spec, "blueprint:") {
					rel, _ := filepath.Rel(r.bp.Dir, p)
					p = "blueprint:" + rel
				}
				paths = append(paths, p)
			}
		} else {
			paths = []string{spec}
		}
		if files += len(paths); files > MaxSeedFiles {
			return refuse(fmt.Errorf("the seeds name %d files so far, over the %d-file seed cap (MaxSeedFiles)", files, MaxSeedFiles))
		}
		for _, p := range paths {
			n++
			var data []byte
			var acc workfs.Access
			var err error
			if strings.HasPrefix(p, "blueprint:") || kind == "script" {
				data, acc, err = e.readSeed(r, p)
			} else {
				data, acc, err = e.seedCall(ctx, r, pst, ss, n, "read_file", map[string]any{"path": p, "max_bytes": maxSeedBytes})
			}
			if err != nil {
				return refuse(err)
			}
			r.rec.Seeds = append(r.rec.Seeds, SeedRecord{Kind: kind, Path: p, Real: acc.Real, Outside: acc.Outside, Bytes: len(data)})
			if kind == "script" {
				n++
				if data, _, err = e.seedCall(ctx, r, pst, ss, n, "shell", map[string]any{"command": string(data), "timeout_seconds": 60}); err != nil {
					return refuse(err)
				}
			}
			if total += len(data); total > MaxSeedTotal {
				return refuse(fmt.Errorf("the seeds' content reached %d bytes at %s, over the 4 MiB seed cap (MaxSeedTotal)", total, p))
			}
			fmt.Fprintf(&b, "\n\nSeed %s (%s):\n%s", p, kind, data)
		}
	}
	r.seeds = b.String()
	return nil
}

// seedCall runs one seed as a tool call through the whole pipeline and records it. It
// returns what the seed contributes: a read's content, a script's stdout.
func (e *Engine) seedCall(ctx context.Context, r *run, pst pipeline.Stage, ss *stageState, n int, tool string, args map[string]any) ([]byte, workfs.Access, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, workfs.Access{}, err
	}
	mx, _ := r.exec.(*maskExec)
	if mx != nil {
		mx.last = nil
	}
	c, res := r.pipe.Handle(ctx, pst, provider.ToolCall{ID: fmt.Sprintf("seed-%d", n), Name: tool, Args: raw})
	var acc workfs.Access
	if len(c.Reads) > 0 {
		acc = c.Reads[0]
	}
	if err := e.record(r, ss, c, res); err != nil {
		// A seed whose call cannot be recorded is a spawn with a hole in its record.
		return nil, acc, fmt.Errorf("recording seed call: %w", err)
	}
	if res.Refusal != nil {
		return nil, acc, fmt.Errorf("%s (refused at the %s step)", res.Refusal.Msg, res.Refusal.Step)
	}
	if res.IsError {
		return nil, acc, fmt.Errorf("%s", res.Content)
	}
	if tool != "shell" {
		return []byte(res.Content), acc, nil
	}
	if mx == nil || mx.last == nil {
		return nil, acc, fmt.Errorf("shell: no result")
	}
	if mx.last.ExitCode != 0 {
		return nil, acc, fmt.Errorf("exit code %d: %s", mx.last.ExitCode, mx.last.Stderr)
	}
	return mx.last.Stdout, acc, nil
}

// readSeed reads a script seed's file (through the run's fence, which refuses lev's own
// state) or a "blueprint:" seed (only inside the blueprint's directory).
func (e *Engine) readSeed(r *run, p string) ([]byte, workfs.Access, error) {
	if rest, ok := strings.CutPrefix(p, "blueprint:"); ok {
		// The blueprint ships only its own directory: no grant lets this out.
		dir, err := filepath.EvalSymlinks(r.bp.Dir)
		if err != nil {
			return nil, workfs.Access{}, err
		}
		agents, err := levstate.Resolve(e.AgentsDir)
		if err != nil {
			return nil, workfs.Access{}, err
		}
		bfs := &workfs.FS{Agent: r.bp.Name, Workdir: dir, Protect: shipped{r.pipe.FS.Protect, dir, agents}}
		acc, err := bfs.ResolveRead("seed", rest)
		if err != nil {
			var ref *workfs.Refusal
			if asRefusal(err, &ref) && ref.Code == workfs.CodeLevState {
				return nil, acc, err
			}
			return nil, acc, &workfs.Refusal{Code: workfs.CodeBlueprintSeed, Path: p,
				Msg: fmt.Sprintf("%s reads outside the blueprint's directory %s; a blueprint: seed cannot leave it (%v)", p, dir, err)}
		}
		data, trunc, err := bfs.ReadFile("seed", acc, maxSeedBytes)
		if err == nil && trunc {
			err = fmt.Errorf("over %d bytes", maxSeedBytes)
		}
		return data, acc, err
	}
	acc, err := r.pipe.FS.ResolveRead("seed", p)
	if err != nil {
		return nil, acc, err
	}
	data, trunc, err := r.pipe.FS.ReadFile("seed", acc, maxSeedBytes)
	if err == nil && trunc {
		err = fmt.Errorf("over %d bytes", maxSeedBytes)
	}
	return data, acc, err
}

// shipped is lev's protected state as seen from a blueprint's own directory. When that
// directory lies in lev's agents directory (itself protected), the entries holding it are
// exempt; every other entry (token, config, records, keys; one placed inside the
// blueprint's directory too) stays refused. A blueprint anywhere else (run by its path)
// exempts nothing: one kept in $LEV_HOME itself would otherwise have its "own directory"
// be lev's home, and daemon.log or the label store would read as shipped text.
type shipped struct {
	p      workfs.Protector
	dir    string
	agents string // lev's agents directory, resolved
}

func (s shipped) Covers(real string) (string, bool) {
	st, ok := s.p.(*levstate.State)
	if !ok {
		if s.p == nil {
			return "", false
		}
		return s.p.Covers(real)
	}
	for _, e := range st.Entries() {
		exempt := s.agents != "" && fspath.Within(s.agents, s.dir) && fspath.Within(e.Path, s.dir)
		if fspath.Within(e.Path, real) && !exempt {
			return fmt.Sprintf("%s is %s", e.Path, e.What), true
		}
	}
	return "", false
}

// CoversFile: no hard link can be planted in the agents directory (no tool writes it, a
// shell never sees it), so a blueprint's shipped files are not checked by inode.
func (s shipped) CoversFile(os.FileInfo) (string, bool) { return "", false }

func asRefusal(err error, r **workfs.Refusal) bool { return errors.As(err, r) }

// GrantableRead: a blueprint: seed reads its own directory only; no grant reaches
// records from there.
func (s shipped) GrantableRead(string) bool { return false }

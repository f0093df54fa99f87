package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

const maxSeedBytes = 1 << 20

// seed reads the blueprint's seeds through the same fence as read_file: a seed outside the
// workdir fails the spawn unless a declared and granted [read_paths] entry covers it. A
// "blueprint:" seed reads only from the blueprint's own directory.
func (e *Engine) seed(ctx context.Context, r *run) error {
	var b strings.Builder
	for i, s := range r.bp.Seeds {
		kind, spec := "file", s.File
		switch {
		case s.Glob != "":
			kind, spec = "glob", s.Glob
		case s.Script != "":
			kind, spec = "script", s.Script
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
				return fmt.Errorf("seed %d (%s %q): %w", i+1, kind, spec, err)
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
		for _, p := range paths {
			data, acc, err := e.readSeed(r, kind, p)
			if err != nil {
				return fmt.Errorf("spawn refused: seed %d (%s %q): %w", i+1, kind, spec, err)
			}
			r.rec.Seeds = append(r.rec.Seeds, SeedRecord{Kind: kind, Path: p, Real: acc.Real, Outside: acc.Outside, Bytes: len(data)})
			if kind == "script" {
				res, err := r.pipe.Exec.Shell(ctx, pipeline.ShellRequest{Command: string(data), Dir: r.pipe.FS.Workdir,
					Env: r.pipe.Env, Timeout: 60 * time.Second, Stage: pipeline.Stage{Name: r.bp.Order[0].Name}})
				if err != nil {
					return fmt.Errorf("seed %d (script %q): %w", i+1, spec, err)
				}
				if res.ExitCode != 0 {
					return fmt.Errorf("seed %d (script %q): exit code %d: %s", i+1, spec, res.ExitCode, res.Stderr)
				}
				data = res.Stdout
			}
			fmt.Fprintf(&b, "\n\nSeed %s (%s):\n%s", p, kind, data)
		}
	}
	r.seeds = b.String()
	return nil
}

func (e *Engine) readSeed(r *run, kind, p string) ([]byte, workfs.Access, error) {
	if rest, ok := strings.CutPrefix(p, "blueprint:"); ok {
		// The blueprint ships only its own directory: no grant lets this out.
		dir, err := filepath.EvalSymlinks(r.bp.Dir)
		if err != nil {
			return nil, workfs.Access{}, err
		}
		bfs := &workfs.FS{Agent: r.bp.Name, Workdir: dir}
		acc, err := bfs.ResolveRead("seed", rest)
		if err != nil {
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

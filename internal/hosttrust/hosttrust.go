// Package hosttrust names what in the tree something on the host trusts later, so that
// bring-up can mount it read-only for the agents (internal/containers, Params.Protected).
// The agents write the tree; a file there that the host later obeys is code or settings
// they could hand it. Two kinds are known:
//
//   - lever.yaml, when it lies in the tree (config.Config.ConfigInTree): lever reads it;
//   - each repository's .git: git on the host runs its hooks and what its config says
//     (core.fsmonitor, core.hooksPath, aliases), and follows a commondir file or a
//     gitdir pointer to another config. Protecting config and hooks alone would leave
//     commondir to be created, so the whole .git is protected; git status, diff and log
//     still work for the agents, a commit does not.
//
// It only reads the host's file system.
package hosttrust

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/beneath"
)

// Git returns the .git of each repository at the tree's root and at each of dirs (paths
// relative to the tree: the workers' dirs), relative to the tree and slash-separated,
// for those that exist now. A .git the agents make later is not protected (docs/config.md,
// git). A .git that is a symlink is refused: git on the host follows it, a read-only
// mount cannot hold a symlink's place, and the agents could replace it.
func Git(tree string, dirs []string) ([]string, error) {
	td, err := beneath.Open(tree)
	if err != nil {
		return nil, fmt.Errorf("looking for a repository's .git in the tree: %w", err)
	}
	defer td.Close()
	var out []string
	seen := map[string]bool{}
	for _, d := range append([]string{"."}, dirs...) {
		rel := path.Join(filepath.ToSlash(d), ".git")
		if seen[rel] {
			continue
		}
		seen[rel] = true
		// Looked at and read beneath the tree with no symlink followed (a worker's dir
		// swapped for a link out of the tree is refused, not followed).
		mode, err := td.Kind(rel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("looking for a repository's .git in the tree: %w", err)
		case mode&fs.ModeSymlink != 0:
			return nil, fmt.Errorf("%s is a symlink: git on this host follows it, and the agents could replace it with a repository of their own (hooks, config); make it the directory itself, or set git: writable in lever.yaml", filepath.Join(tree, filepath.FromSlash(rel)))
		case !mode.IsDir() && !mode.IsRegular():
			return nil, fmt.Errorf("%s is neither a directory nor a gitdir file", filepath.Join(tree, filepath.FromSlash(rel)))
		}
		out = append(out, rel)
		if mode.IsRegular() {
			// A gitdir file (a worktree, a submodule) points git at the repository's real
			// directory: protected too when it lies in the tree, else the agents could
			// write its hooks and config there.
			gd, err := gitdirIn(td, tree, rel)
			if err != nil {
				return nil, err
			}
			if gd != "" && !seen[gd] {
				seen[gd] = true
				out = append(out, gd)
			}
		}
	}
	return dropNested(out), nil
}

// MaxGitFile caps a gitdir file: one line, "gitdir: PATH". The agents write the tree; a
// bigger one (a 10 GiB sparse file) is refused before anything is read.
const MaxGitFile = 64 << 10

// gitdirIn reads the gitdir file rel beneath d (bounded, a regular file, no symlink
// followed: the type seen a moment ago may have been swapped) and returns the directory
// it names relative to the tree, slash-separated, when that lies in the tree (by its real
// path); "" when it lies outside, where the agents cannot reach it.
func gitdirIn(d *beneath.Dir, tree, rel string) (string, error) {
	p := filepath.Join(tree, filepath.FromSlash(rel))
	b, err := d.ReadFile(rel, MaxGitFile)
	if err != nil {
		return "", fmt.Errorf("reading a repository's gitdir file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !ok {
		return "", fmt.Errorf("%s is a .git file that names no gitdir", p)
	}
	dir = strings.TrimSpace(dir)
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(filepath.Dir(p), dir)
	}
	realTree, err := filepath.EvalSymlinks(tree)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		// Not there: git will fail on it too; if the agents make it later, it is theirs.
		return "", nil
	}
	out, err := filepath.Rel(realTree, real)
	if err != nil || out == "." || out == ".." || strings.HasPrefix(out, ".."+string(filepath.Separator)) {
		return "", nil
	}
	return filepath.ToSlash(out), nil
}

// dropNested keeps the outermost of paths one of which lies in another (a submodule's
// gitdir inside the root's .git): the outer read-only mount covers it.
func dropNested(paths []string) []string {
	var out []string
	for _, p := range paths {
		nested := false
		for _, q := range paths {
			if q != p && strings.HasPrefix(p, q+"/") {
				nested = true
			}
		}
		if !nested {
			out = append(out, p)
		}
	}
	return out
}

package bringup

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/levimage"
)

// TestTreeNamesAgree: the default workbench's tree the host names from the digest its
// observation read (benchKnownRef, benchTree) is the one the image helper names from
// the digest it reads (imagebuild.BenchRequest.Dir, with the request the host sends),
// with and without workers (their dirs are mounts, part of the name); and the names keep
// the format trees already made carry (kind, tag hex, 8 hex of the sorted mount
// destinations joined by newlines), so an upgrade finds them.
func TestTreeNamesAgree(t *testing.T) {
	for _, workers := range [][]config.Worker{nil, {{Name: "a", Dir: "wa"}}, {{Name: "a", Dir: "wa"}, {Name: "b", Dir: "wb"}}} {
		j, _ := builtJail(t)
		in := j.in
		in.cfg.Workers = workers
		old := func(kind, ref string) string { // the formula Instance.tree had
			h := sha256.Sum256([]byte(strings.Join(in.treeMounts(kind), "\n")))
			return filepath.Join(in.treesRoot(), kind+"-"+ref[strings.LastIndexByte(ref, ':')+1:]+"-"+hex.EncodeToString(h[:4]))
		}
		req := in.debianBench()
		for _, sum := range []string{sum5, sum6} {
			ref := levimage.WorkbenchRef(baseDebian, sum, in.levDigest)
			host, err := in.benchKnownRef(j.pod, Facts{StatusSum: sum})
			if err != nil {
				t.Fatal(err)
			}
			if host != req.Dir(sum) || host != in.benchTree(ref) || host != old("bench", ref) {
				t.Errorf("%d workers, digest %s: host %s, helper %s, the old name %s", len(workers), sum[:4], host, req.Dir(sum), old("bench", ref))
			}
		}
		if in.levTree() != old("lev", in.imageRef) {
			t.Errorf("lev's tree %s, was %s", in.levTree(), old("lev", in.imageRef))
		}
		if len(workers) > 0 && !contains(req.Mounts, "/lever/"+workers[len(workers)-1].Dir) {
			t.Errorf("the workbench's mounts %v lack the last worker's dir", req.Mounts)
		}
	}
	// positive control: another worker set names another tree
	j, _ := builtJail(t)
	a := j.in.debianBench().Dir(sum5)
	j.in.cfg.Workers = append(j.in.cfg.Workers, config.Worker{Name: "z", Dir: "wz"})
	if b := j.in.debianBench().Dir(sum5); a == b {
		t.Errorf("a worker added does not change the workbench's tree: %s", a)
	}
}

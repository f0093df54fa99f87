package levimage

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// A tree's name is its kind, its tag's hex and 8 hex of its mount destinations (sorted,
// joined by newlines): the format the trees lever already made carry, whatever order the
// mounts come in.
func TestTreeName(t *testing.T) {
	h := sha256.Sum256([]byte("/lever\n/lever/wa\n/run/lever-bench"))
	want := "bench-0123456789ab-" + hex.EncodeToString(h[:4])
	for _, mounts := range [][]string{{"/lever", "/lever/wa", "/run/lever-bench"}, {"/run/lever-bench", "/lever", "/lever/wa"}} {
		if got := TreeName("bench", WorkbenchRepo+":0123456789ab", mounts); got != want {
			t.Errorf("TreeName(%v) = %s, want %s", mounts, got, want)
		}
	}
	if got := TreeName("lev", "0123", nil); got != "lev-0123-e3b0c442" {
		t.Errorf("no mounts, no ':' in the ref: %s", got)
	}
	if TreeName("bench", "r:1", []string{"/lever"}) == TreeName("bench", "r:1", []string{"/lever", "/lever/wb"}) {
		t.Error("a worker's mount does not change the name")
	}
}

package backend

import (
	"reflect"
	"testing"
)

func TestParseMounts(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want []Mount
	}{
		{"four columns", "/lever fuse.sshfs rw,nosuid,nodev :/home/u/tree\n", []Mount{{"/lever", "fuse.sshfs", "rw,nosuid,nodev", ":/home/u/tree"}}},
		{"two columns", "/ ext4\n/lever virtiofs\n", []Mount{{"/", "ext4", "", ""}, {"/lever", "virtiofs", "", ""}}},
		{"escaped blank stays one column", `/home/u\x20x fuse.sshfs rw :/home/u\x20x`, []Mount{{"/home/u x", "fuse.sshfs", "rw", ":/home/u x"}}},
		{"malformed escape kept", `/a\xZZ tmpfs rw tmpfs`, []Mount{{`/a\xZZ`, "tmpfs", "rw", "tmpfs"}}},
		{"blank and short lines skipped", "\n/onlyone\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseMounts(tt.out); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseMounts = %+v, want %+v", got, tt.want)
			}
		})
	}
	if m := (Mount{Options: "rw,nosuid"}); !m.HasOption("rw") || m.HasOption("ro") || m.HasOption("nosu") {
		t.Error("HasOption matches whole options only")
	}
}

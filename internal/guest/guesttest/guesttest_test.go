package guesttest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
)

// TestRunnerScriptsAndRecords: rules answer in order, sections carry the script's own
// nonce (so guest.Script parses them), an unmatched call fails, Down is unreachable.
func TestRunnerScriptsAndRecords(t *testing.T) {
	r := &guesttest.Runner{}
	r.On("id", guesttest.Argv0("id", "-u"), guesttest.OK("1001\n"))
	r.On("probe", guesttest.Script("probe-part"), guesttest.Sections(func(c guest.Cmd) []guesttest.Sec {
		return []guesttest.Sec{{Name: "a", Out: guesttest.Args(c)[0]}, {Name: "b", Out: guesttest.Env(c, "X"), RC: 3}}
	}))
	ctx := context.Background()
	if res, err := r.Run(ctx, guest.Cmd{Argv: []string{"id", "-u", "lever"}}); err != nil || string(res.Stdout) != "1001\n" {
		t.Fatalf("id: %q %v", res.Stdout, err)
	}
	sc := guest.NewScript("# probe-part")
	res, err := r.Run(ctx, sc.Cmd([]string{"X=x1"}, "arg1"))
	if err != nil {
		t.Fatal(err)
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil || secs["a"].Out != "arg1" || secs["b"].Out != "x1" || secs["b"].RC != 3 {
		t.Fatalf("sections %+v %v", secs, err)
	}
	// another script's parser does not accept this answer: the nonce differs
	if secs, err := guest.NewScript("# probe-part").Parse(res.Stdout); err != nil || len(secs) != 0 {
		t.Fatalf("a foreign script read %d sections (%v)", len(secs), err)
	}
	if res, _ := r.Run(ctx, guest.Cmd{Argv: []string{"rm", "-rf", "/"}}); res.ExitCode != 127 || len(r.Unmatched()) != 1 {
		t.Fatalf("unmatched call: exit %d, %d unmatched", res.ExitCode, len(r.Unmatched()))
	}
	if got := r.Names(); len(got) != 3 || got[0] != "id" || got[1] != "probe" {
		t.Fatalf("recorded %v", got)
	}
	r.Down = errors.New("no guest")
	if _, err := r.Run(ctx, guest.Cmd{Argv: []string{"id", "-u"}}); err == nil {
		t.Fatal("a down guest answered")
	}
}

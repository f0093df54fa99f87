package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResumeKeepsAdmittedWorkdir: a run's record keeps its workdir's real path, and lev
// resume resolved that path again. A shell command can turn a directory above the workdir
// into a symlink so the same path now resolves to a directory that holds much more (here
// the whole home, with a file outside the old workdir), and then get its run refused on
// purpose so it is resumed. Through the real binary: the resume must refuse the moved
// workdir, and the file outside must never be read. Control: the links were made (the
// path does resolve elsewhere), and a read of that file from the original workdir is
// refused as outside it.
func TestResumeKeepsAdmittedWorkdir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	b := newBox(t, bin, "lev", "[tool_permissions]\nshell = \"allow\"\n")
	r := b.root
	b.wd = filepath.Join(r, "proj", "wd")
	mustWrite(t, filepath.Join(b.wd, "notes.txt"), "notes content")
	mustWrite(t, filepath.Join(r, "secret.txt"), "HOME SECRET")
	mustWrite(t, filepath.Join(r, "docs", "plan.md"), "the plan")
	b.agent("mover", "name = \"mover\"\nversion = \"1\"\n[read_paths]\nallow = [\"~/docs\"]\n[stages.s]\ntools = [\"shell\", \"read_file\", \"submit_output\"]\n")
	move := "cd / && mv " + r + "/proj " + r + "/proj-old && mkdir " + r + "/x && ln -s " + r + " " + r + "/x/wd && ln -s " + r + "/x " + r + "/proj && echo moved"
	call := func(turn, tool, args string) string {
		return "[[rule]]\nstage = \"s\"\nturn = " + turn + "\n[[rule.call]]\ntool = \"" + tool + "\"\nargs = '" + args + "'\n"
	}
	mustWrite(t, b.script, call("1", "shell", `{"command": `+jsonArg(move)+`}`)+
		call("2", "read_file", `{"path": `+jsonArg(filepath.Join(r, "docs", "plan.md"))+`}`)+
		call("3", "read_file", `{"path": "secret.txt"}`)+
		call("4", "submit_output", `{"output": "{{last}}"}`))
	_, stderr, code := b.lev("run", "mover", "--workdir", b.wd, "--yolo")
	if code != 1 || !strings.Contains(stderr, "lev resume r-") {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	if real, err := filepath.EvalSymlinks(b.wd); err != nil || real != r {
		t.Fatalf("control: the workdir path should now resolve to %s, got %q (%v)", r, real, err)
	}
	id := stderr[strings.Index(stderr, "lev resume r-")+len("lev resume "):]
	id = id[:strings.IndexAny(id, ") \n")]
	old, _ := os.ReadFile(b.cfgFile)
	mustWrite(t, b.cfgFile, string(old)+"[agent_read_paths.mover]\nallow = [\"~/docs\"]\n")
	out, stderr, code := b.lev("resume", id)
	if strings.Contains(out+stderr, "HOME SECRET") {
		t.Fatalf("resume read a file outside the admitted workdir:\nstdout %s\nstderr %s", out, stderr)
	}
	if code == 0 || !strings.Contains(stderr, "workdir") {
		t.Fatalf("resume: exit %d, want a refusal naming the moved workdir\nstdout %s\nstderr %s", code, out, stderr)
	}
}

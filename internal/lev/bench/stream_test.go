package bench_test

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/bench"
)

// TestStream: the stream mode (a stdio MCP server in the workbench) through the built
// `lev bench serve`: stdin and stdout cross the channel line by line (the control: a
// `cat` echoes each line back as it comes); the command's whole process group, setsid
// grandchild included, is gone after the client goes away, after the deadline, and after
// stdin closes and the command ignores it (StreamGrace); a bad request in stream mode is
// refused naming the key and runs nothing.
func TestStream(t *testing.T) {
	sock := serve(t)
	c := bench.Client{Socket: sock}
	on := true
	t.Run("control: lines cross both ways", func(t *testing.T) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done, err := c.Stream(context.Background(), bench.Request{Argv: []string{"/bin/cat"}, Dir: t.TempDir(), DeadlineMS: 60000, Network: &on, StdoutMax: 1, StderrMax: 100}, inR, outW)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(outR)
		for _, line := range []string{"one\n", strings.Repeat("x", 300<<10) + "\n", "three\n"} {
			io.WriteString(inW, line)
			got, err := br.ReadString('\n')
			if err != nil || got != line {
				t.Fatalf("echo %d bytes: got %d, %v", len(line), len(got), err)
			}
		}
		inW.Close() // EOF: cat exits, the stream ends
		go io.Copy(io.Discard, br)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stream did not end after stdin closed")
		}
	})
	for _, mode := range []string{"client goes away", "deadline", "stdin closed, command ignores it"} {
		t.Run(mode, func(t *testing.T) {
			tag := uniqueTag()
			deadline := int64(60000)
			if mode == "deadline" {
				// Long enough that the control below (both processes seen alive before
				// the deadline kills them) holds on a loaded machine.
				deadline = 4000
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			inR, inW := io.Pipe()
			// The script ignores its stdin: only the bench's kill ends it.
			done, err := c.Stream(ctx, bench.Request{Argv: []string{"/bin/sh", "-c", treeScript(tag) + " </dev/null"}, Dir: t.TempDir(),
				Env: []string{"PATH=/usr/bin:/bin"}, DeadlineMS: deadline, Network: &on, StdoutMax: 1, StderrMax: 100}, inR, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			pids := readPids(t, tag)
			for _, p := range pids {
				if !alive(p) {
					t.Fatalf("pid %d not alive while the command runs (control)", p)
				}
			}
			start := time.Now()
			switch mode {
			case "client goes away":
				cancel()
			case "stdin closed, command ignores it":
				inW.Close()
			}
			// stdin closed is killed only after StreamGrace: wait past it (the bound below
			// still fails a kill that never comes or comes late)
			waitGoneFor(t, pids, bench.StreamGrace+5*time.Second)
			if el := time.Since(start); el > bench.StreamGrace+5*time.Second {
				t.Fatalf("took %v", el)
			}
			<-done
		})
	}
	t.Run("bad request refused, nothing ran", func(t *testing.T) {
		_, err := c.Stream(context.Background(), bench.Request{Argv: []string{"cat"}, Dir: t.TempDir(), DeadlineMS: 1000, Network: &on, StdoutMax: 1, StderrMax: 1}, strings.NewReader(""), io.Discard)
		if err == nil || !strings.Contains(err.Error(), `bench request key "argv": argv[0] "cat" is not an absolute path`) {
			t.Fatalf("err = %v", err)
		}
	})
}

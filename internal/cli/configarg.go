package cli

// One grammar for naming the jail: every command that works on a jail takes its lever.yaml
// as -c/--config FILE and nowhere else, and without -c finds lever.yaml the way git finds
// .git, in the working directory or the nearest directory above it. A positional config
// is never taken (run's, logs', shell's positional arguments are an agent, a run, a
// worker, so a positional config could only ever be accepted by half the commands):
// given one, the command refuses it and prints the call it meant, with -c.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// configFileName is what the upward search looks for.
const configFileName = "lever.yaml"

// nonJailCommands work on no jail: they take no -c (init's DIR is where it writes one).
// Every other runnable command takes -c; TestGrammarEveryCommand holds the two lists to
// the command tree.
var nonJailCommands = map[string]bool{
	"lever version":  true,
	"lever backends": true,
	"lever init":     true,
}

// addConfigFlag gives a jail command its -c/--config, bound to p. Empty (the default)
// means the upward search.
func addConfigFlag(c *cobra.Command, p *string) {
	c.Flags().StringVarP(p, "config", "c", "", "the jail's lever.yaml (default: lever.yaml in this directory or the nearest one above it)")
}

// guardConfigArgs makes every jail command under c refuse a positional config with the
// call it meant: the guard runs before the command's own argument check, so a
// `lever up proj/lever.yaml` says `lever up -c proj/lever.yaml`, not "unknown argument".
func guardConfigArgs(c *cobra.Command) {
	for _, sub := range c.Commands() {
		guardConfigArgs(sub)
	}
	if c.Flags().Lookup("config") == nil {
		return
	}
	own := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := positionalConfig(cmd, args); err != nil {
			return err
		}
		if own != nil {
			return own(cmd, args)
		}
		return nil
	}
}

// ownArgs is how many positional arguments (before any --) a jail command takes of its
// own: an agent, a run or a worker. The others take none.
func ownArgs(cmd *cobra.Command) int {
	switch cmd.CommandPath() {
	case "lever run", "lever logs", "lever result", "lever resume", "lever shell":
		return 1
	}
	return 0
}

// positionalConfig refuses a config given as an argument: one that names a YAML file
// (no agent, run id or worker does), or any argument to a command that takes none. The
// arguments after -- (lever shell's command) are never looked at.
func positionalConfig(cmd *cobra.Command, args []string) error {
	before := args
	if dash := cmd.ArgsLenAtDash(); dash >= 0 {
		before = args[:dash]
	}
	idx := -1
	for i, a := range before {
		if looksLikeConfig(a) {
			idx = i
			break
		}
	}
	if idx < 0 && ownArgs(cmd) == 0 && len(before) > 0 {
		idx = 0
	}
	if idx < 0 {
		return nil
	}
	cfg := before[idx]
	if st, err := os.Stat(cfg); err == nil && st.IsDir() {
		// `lever up proj`: the file in that directory is what was meant.
		cfg = filepath.Join(cfg, configFileName)
	}
	return usageErr("%s takes the config as -c: %s", cmd.CommandPath(), suggestCall(cmd, idx, cfg))
}

func looksLikeConfig(a string) bool {
	l := strings.ToLower(a)
	return strings.HasSuffix(l, ".yaml") || strings.HasSuffix(l, ".yml")
}

// rawArgsKey carries, in the command's context, the arguments Main was given, so that
// the suggested call keeps the user's own words and order.
type rawArgsKey struct{}

// suggestCall is the command line the user meant: the command, -c CONFIG, then what they
// typed without the positional config (its idx-th own argument), shell-quoted.
func suggestCall(cmd *cobra.Command, idx int, cfg string) string {
	path := strings.Fields(cmd.CommandPath())
	out := append(append([]string{}, path...), "-c", shellQuote(cfg))
	raw, _ := ctx(cmd).Value(rawArgsKey{}).([]string)
	words := path[1:] // the subcommand names, which also appear in raw as arguments
	positional := 0
	for i := 0; i < len(raw); i++ {
		a := raw[i]
		if a == "--" {
			for _, r := range raw[i:] {
				out = append(out, shellQuote(r))
			}
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			out = append(out, shellQuote(a))
			if takesValue(cmd, a) && i+1 < len(raw) {
				i++
				out = append(out, shellQuote(raw[i]))
			}
			continue
		}
		positional++
		switch {
		case positional <= len(words):
			// a subcommand name: already in out
		case positional == len(words)+1+idx:
			// the config: now after -c
		default:
			out = append(out, shellQuote(a))
		}
	}
	return strings.Join(out, " ")
}

// takesValue: flag token a (as typed: --input, -c, --worker=x) is followed by its value
// as the next argument.
func takesValue(cmd *cobra.Command, a string) bool {
	if strings.Contains(a, "=") {
		return false
	}
	name := strings.TrimLeft(a, "-")
	f := cmd.Flags().Lookup(name)
	if !strings.HasPrefix(a, "--") {
		if len(name) != 1 {
			return false // -abc, or -cFILE: the value is attached
		}
		f = cmd.Flags().ShorthandLookup(name)
	}
	return f != nil && f.Value.Type() != "bool"
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain path characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%_+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// withRawArgs is the context Main runs the command tree in.
func withRawArgs(args []string) context.Context {
	return context.WithValue(context.Background(), rawArgsKey{}, append([]string(nil), args...))
}

// configPath is the lever.yaml a command works on: path when -c gave one, else the
// upward search from the working directory.
func configPath(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding lever.yaml: %w", err)
	}
	return findConfig(wd, os.Geteuid())
}

// findConfig looks for lever.yaml in dir and each directory above it, and takes the
// nearest one only if it is uid's and not world-writable: a directory above the user's
// (/tmp, /home, a shared mount) can hold a lever.yaml someone else put there, and that
// file would choose the jail's mounts, egress and keys.
func findConfig(dir string, uid int) (string, error) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		p := filepath.Join(d, configFileName)
		lst, err := os.Lstat(p)
		if err == nil {
			if err := trustFound("found "+p, lst, uid); err != nil {
				return "", err
			}
			if lst.Mode()&fs.ModeSymlink != 0 {
				st, err := os.Stat(p)
				if err != nil {
					return "", fmt.Errorf("found %s, a symlink that leads nowhere readable: %w", p, err)
				}
				if err := trustFound("found "+p+", a symlink to a file that", st, uid); err != nil {
					return "", err
				}
			}
			return p, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("looking for lever.yaml: %w", err)
		}
		if parent := filepath.Dir(d); parent == d {
			return "", usageErr("no lever.yaml in %s or any directory above it: give one with -c FILE (lever init writes one)", dir)
		}
	}
}

// trustFound refuses a found lever.yaml (or the link to it) that another user owns or
// anyone may write.
func trustFound(what string, fi fs.FileInfo, uid int) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != uid {
		return usageErr("%s is owned by uid %d, not you (uid %d): lever does not take a lever.yaml from above your directory that someone else put there; give the one you mean with -c FILE", what, st.Uid, uid)
	}
	if fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o002 != 0 {
		return usageErr("%s is world-writable (mode %04o): anyone could have written it; make it yours alone (chmod o-w) or give the one you mean with -c FILE", what, fi.Mode().Perm())
	}
	return nil
}

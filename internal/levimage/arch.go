package levimage

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GuestArches are the guest architectures lever ships a lev for (GOARCH spelling).
var GuestArches = []string{"amd64", "arm64"}

// LevEnv names the lev binary to use instead of the ones beside lever.
const LevEnv = "LEVER_LEV_BINARY"

// ArchName is the file lever looks for beside itself when its own `lev` is not a Linux
// binary for arch: what `make build` on a Mac and the release archives put there.
func ArchName(arch string) string { return "lev-linux-" + arch }

// ELFArch reads which Linux architecture a binary is built for (GOARCH spelling); it fails
// for anything that is not a Linux (or plain System V) ELF of an architecture lever knows.
func ELFArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("lev binary %s: not an ELF executable: %w", path, err)
	}
	defer f.Close()
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return "", fmt.Errorf("lev binary %s: an ELF for %v, not Linux", path, f.OSABI)
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", fmt.Errorf("lev binary %s: ELF machine %v is not one lever runs guests on (%s)", path, f.Machine, strings.Join(GuestArches, ", "))
}

// FindLevBinary finds the Linux lev binary for a guest of arch (GOARCH spelling): the
// same choice feeds the lev image, the workbench and the guest-side helpers. In order:
// $LEVER_LEV_BINARY, which must be a static Linux ELF of arch (a wrong one is refused,
// never passed over); `lev` beside the running lever when it is one; `lev-linux-<arch>`
// beside lever.
func FindLevBinary(arch string) (string, error) {
	exe, err := os.Executable()
	dir := ""
	if err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		dir = filepath.Dir(exe)
	}
	return findLev(arch, os.Getenv(LevEnv), dir)
}

// findLev is FindLevBinary with its two inputs explicit (tests).
func findLev(arch, env, dir string) (string, error) {
	if !knownArch(arch) {
		return "", fmt.Errorf("guest architecture %q: lever has lev for %s only", arch, strings.Join(GuestArches, " and "))
	}
	if env != "" {
		if err := CheckStatic(env, arch); err != nil {
			return "", fmt.Errorf("%s: %w", LevEnv, err)
		}
		return env, nil
	}
	if dir == "" {
		return "", fmt.Errorf("no lev binary for a linux/%s guest: set %s (cannot find lever's own directory)", arch, LevEnv)
	}
	var tried []string
	for _, name := range []string{"lev", ArchName(arch)} {
		p := filepath.Join(dir, name)
		err := CheckStatic(p, arch)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, os.ErrNotExist) {
			tried = append(tried, p+" (missing)")
		} else {
			tried = append(tried, err.Error())
		}
	}
	return "", fmt.Errorf("no lev binary for a linux/%s guest: tried %s; set %s, or run `make build` (a Mac also gets bin/%s), or install lever from a release archive, which carries it",
		arch, strings.Join(tried, "; "), LevEnv, ArchName(arch))
}

func knownArch(arch string) bool {
	for _, a := range GuestArches {
		if a == arch {
			return true
		}
	}
	return false
}

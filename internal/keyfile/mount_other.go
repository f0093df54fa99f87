//go:build !linux

package keyfile

// inTreeMount has nothing more to check where bind mounts are not made by users (macOS).
func inTreeMount(_, _, _ string, _ func() error) error { return nil }

//go:build !unix

package labels

// identity is unknown off unix: labels follow the path alone.
func identity(string) (dev, ino uint64, ok bool) { return 0, 0, false }

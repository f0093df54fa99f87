// Package filesize holds no code: its test holds every non-test Go file of the module to
// 600 lines, so a file stays one concern a reader can hold (issue 32).
package filesize

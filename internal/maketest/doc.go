// Package maketest holds tests of the Makefile's targets, run through make as a developer
// or CI runs them. It has no code of its own.
package maketest

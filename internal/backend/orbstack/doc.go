// Package orbstack is the orbstack backend (being built).
package orbstack

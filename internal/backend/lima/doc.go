// Package lima is the lima backend (being built).
package lima

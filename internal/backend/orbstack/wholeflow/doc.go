// Package wholeflow holds the OrbStack backend's whole-flow end-to-end test (e2e tag,
// Linux, root): `lever up`, `status`, `acceptance`, `stop` and `destroy` through lever's
// real command path with backend orbstack, against a fake `orb` and a fake `ssh` that
// check the exact argv of every call. It has no code of its own.
package wholeflow

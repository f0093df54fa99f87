// Package docrefs holds no code: its test checks that every test the project's documents
// cite by name (SECURITY.md's claim table, README.md, docs/) exists. A claim whose test was
// renamed or deleted reads as proven while nothing proves it, so a dangling name fails CI.
package docrefs

package bringup

import "github.com/lever-jail/lever/internal/guestside/enrol"

// The enrol step's guest side lives in internal/guestside/enrol (lev serves it as
// `lev __guest enrol`); bring-up builds its request and reads its files under these names.
type (
	EnrolRequest = enrol.Request
	EnrolAgent   = enrol.Agent
)

const (
	MaxEnrolRequest = enrol.MaxRequest
	FileCA          = enrol.FileCA
	FileCert        = enrol.FileCert
	FileKey         = enrol.FileKey
	FileToken       = enrol.FileToken
)

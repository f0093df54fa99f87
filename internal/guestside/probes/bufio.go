package probes

import (
	"bufio"
	"io"
)

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

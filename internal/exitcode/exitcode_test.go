package exitcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestOfAndMessage(t *testing.T) {
	plain := errors.New("config lever.yaml: unknown key \"bakend\"")
	tests := []struct {
		name    string
		err     error
		code    int
		message string
	}{
		{"nil", nil, 0, ""},
		{"plain error exits 2", plain, 2, plain.Error()},
		{"explicit code", New(1, plain), 1, plain.Error()},
		{"silent exit", New(1, nil), 1, ""},
		{"wrapped keeps the code", fmt.Errorf("verify: %w", New(3, plain)), 3, "verify: " + plain.Error()},
		{"outermost code wins", New(4, New(1, plain)), 4, plain.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.err); got != tt.code {
				t.Errorf("Of = %d, want %d", got, tt.code)
			}
			if got := Message(tt.err); got != tt.message {
				t.Errorf("Message = %q, want %q", got, tt.message)
			}
		})
	}
}

package bodypolicy

import (
	"strings"
	"testing"
)

// BenchmarkBodyScanner: the policy's cost per byte of a typical model-call body (a long
// conversation of JSON strings with escapes).
func BenchmarkBodyScanner(b *testing.B) {
	msg := `{"role":"user","content":[{"type":"text","text":"` + strings.Repeat(`some text with \"escapes\" and \u00e9 `, 200) + `"}]},`
	body := []byte(`{"model":"m","max_tokens":1024,"tools":[{"type":"function","function":{"name":"f"}}],"messages":[` + strings.Repeat(msg, 400) + `{"role":"user","content":"end"}]}`)
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		var s bodyScanner
		if err := s.write(body); err != nil {
			b.Fatal(err)
		}
		if err := s.finish(); err != nil {
			b.Fatal(err)
		}
	}
}

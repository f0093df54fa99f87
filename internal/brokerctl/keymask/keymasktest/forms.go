// Package keymasktest holds what the tests of the key masker and of the broker around it
// share: the forms of a key a hostile upstream would echo it in.
package keymasktest

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// Forms are the forms of key a hostile upstream echoes, by name; every one must reach the
// client masked.
func Forms(key string) map[string]string {
	jsonEsc := ""
	for i, c := range key {
		if i%2 == 0 {
			jsonEsc += fmt.Sprintf(`\u%04x`, c)
		} else {
			jsonEsc += string(c)
		}
	}
	urlEnc := ""
	for _, c := range key {
		urlEnc += fmt.Sprintf("%%%02X", c)
	}
	entities := ""
	for _, c := range key {
		entities += fmt.Sprintf("&#%d;", c)
	}
	urlDouble, jsonDouble := "", ""
	for _, c := range key {
		urlDouble += fmt.Sprintf("%%25%02x", c)
		jsonDouble += fmt.Sprintf(`\\u%04x`, c)
	}
	utf16 := ""
	for _, c := range key {
		utf16 += string([]byte{byte(c), 0})
	}
	return map[string]string{
		"utf-16le":     utf16,
		"raw":          key,
		"upper-case":   strings.ToUpper(key),
		"url-double":   urlDouble,
		"json-double":  jsonDouble,
		"json-escaped": jsonEsc,
		"url-encoded":  urlEnc,
		"url-lower":    strings.ToLower(urlEnc),
		"html-entity":  entities,
		"base64-a0":    base64.StdEncoding.EncodeToString([]byte(key)),
		"base64-a1":    base64.StdEncoding.EncodeToString([]byte("x" + key)),
		"base64-a2":    base64.URLEncoding.EncodeToString([]byte("xy" + key)),
		"hex":          hex.EncodeToString([]byte(key)),
		"hex-upper":    strings.ToUpper(hex.EncodeToString([]byte(key))),
		"slash-escape": strings.ReplaceAll(key, "-", `\-`),
	}
}

package kafkawire

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePlain(t *testing.T) {
	for in, want := range map[string][3]string{
		"\x00alice\x00secret":             {"", "alice", "secret"},
		"admin\x00alice\x00s3cr\xc3\xa9t": {"admin", "alice", "s3cr\u00e9t"},
	} {
		z, u, p, err := ParsePlain([]byte(in))
		if err != nil || [3]string{z, u, p} != want {
			t.Fatalf("%q: %q %q %q, %v", in, z, u, p, err)
		}
	}
	long := strings.Repeat("x", 256)
	for _, in := range []string{
		"", "alice", "\x00alice", "\x00\x00secret", "\x00alice\x00", "\x00a\x00b\x00c",
		"\x00" + long + "\x00p", "\x00u\x00" + long, long + "\x00u\x00p", "\x00\xff\x00p",
	} {
		if _, _, _, err := ParsePlain([]byte(in)); !errors.Is(err, ErrBadPlain) {
			t.Fatalf("%q: %v", in, err)
		}
	}
	_, _, _, err := ParsePlain([]byte("\x00alice\x00hunter2\x00x"))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error echoes the password or is nil: %v", err)
	}
}

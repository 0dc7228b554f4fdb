package main

import (
	"bytes"
	"testing"
	"time"
)

// TestParseRetention: --retention takes Kafka-style days and weeks, alone
// and combined with Go's units, and refuses what is not a duration.
func TestParseRetention(t *testing.T) {
	day := 24 * time.Hour
	for in, want := range map[string]time.Duration{
		"7d": 7 * day, "2w": 14 * day, "1w2d": 9 * day, "36h": 36 * time.Hour, "1d12h": 36 * time.Hour,
		"90m": 90 * time.Minute, "0": 0, "1.5d": 36 * time.Hour, "-1d": -day, "1d1h1m1s": day + time.Hour + time.Minute + time.Second,
	} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "7", "d", "7x", "1d-2h", "1.2.3d", "99999999999w", "1e3d"} {
		if got, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q) = %v, want an error", in, got)
		}
	}
}

// TestKeySeparator: --key-separator splits a line at its first separator
// (kcat -K); a line without one is an error, never sent unkeyed.
func TestKeySeparator(t *testing.T) {
	sep := lineSplitter{sep: []byte(":")}
	for _, c := range []struct{ line, key, value string }{
		{"k:v", "k", "v"}, {"k:v:w", "k", "v:w"}, {":v", "", "v"}, {"k:", "k", ""},
	} {
		k, v, err := sep.split([]byte(c.line))
		if err != nil || string(k) != c.key || string(v) != c.value {
			t.Errorf("split(%q) = %q, %q, %v; want %q, %q", c.line, k, v, err, c.key, c.value)
		}
	}
	if k, v, err := sep.split([]byte("no separator")); err == nil {
		t.Errorf("split without the separator = %q, %q, want an error", k, v)
	}
	fixed := lineSplitter{key: []byte("K")}
	line := []byte("a:b")
	k, v, err := fixed.split(line)
	line[0] = 'x' // the scanner reuses its buffer: the value must be a copy
	if err != nil || string(k) != "K" || !bytes.Equal(v, []byte("a:b")) {
		t.Errorf("split with --key = %q, %q, %v", k, v, err)
	}
}

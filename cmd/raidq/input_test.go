package main

import (
	"bytes"
	"os"
	"path/filepath"
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
	for d, want := range map[time.Duration]string{7 * day: "7d", 9 * day: "9d", 36 * time.Hour: "36h0m0s", time.Hour: "1h0m0s"} {
		if got := retentionString(d); got != want {
			t.Errorf("retentionString(%v) = %q, want %q", d, got, want)
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

// TestNodeConfigRelativePaths: in `node --config`, an unquoted value
// starting with ./ or ../ is a path (the NATS config lexer would read it as
// a malformed number) resolved against the config file's directory, in
// included files too; a quoted value is taken as written.
func TestNodeConfigRelativePaths(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "node.conf")
	text := "id: n3\ndata: ./data/n3\ntls-ca: ../tls/ca.pem   # the CA\nnats-tls-ca = \"./quoted.pem\"\nlisten 127.0.0.1:4223\ninclude more.conf\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "more.conf"), []byte("tls-key: ./key.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := nodeCmd().Flags()
	if err := applyConfigFile(fs, cfg); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"id": "n3", "data": filepath.Join(dir, "data", "n3"), "tls-ca": filepath.Join(filepath.Dir(dir), "tls", "ca.pem"),
		"nats-tls-ca": "./quoted.pem", "listen": "127.0.0.1:4223", "tls-key": filepath.Join(dir, "key.pem"),
	} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
}

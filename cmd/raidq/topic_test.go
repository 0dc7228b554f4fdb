package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/stripe/quorum"
)

// TestTopicOffsetGridFlag: --offset-grid defaults to the grid of new
// topics, and a grid that is not a power of two up to quorum.MaxGrid is
// refused by Params.Validate before any connection is tried.
func TestTopicOffsetGridFlag(t *testing.T) {
	if def := topicCreateCmd().Flags().Lookup("offset-grid").DefValue; def != "1024" {
		t.Fatalf("--offset-grid defaults to %s, want 1024", def)
	}
	for _, g := range []string{"1000", "131072"} {
		cmd := topicCreateCmd()
		cmd.SetArgs([]string{"x", "--offset-grid", g})
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); !errors.Is(err, quorum.ErrInvalidParams) || !strings.Contains(err.Error(), "offset grid") {
			t.Fatalf("--offset-grid %s: want the grid rule, got %v", g, err)
		}
	}
}

// TestTopicShowsGrid: list, describe and their JSON (the record as
// stored) show the topic's offset grid, "none" for a topic without one.
func TestTopicShowsGrid(t *testing.T) {
	for _, tc := range []struct {
		grid       uint64
		text, json string
	}{{1024, "offset grid    1024 ns", `"grid":1024`}, {0, "offset grid    none", ""}} {
		p := raidq.DefaultParams()
		p.Grid = tc.grid
		info := raidq.TopicInfo{Name: "orders", Partitions: 1, Params: p, Ensembles: [][]string{{"a", "b", "c", "d", "e", "f"}},
			Created: time.Unix(0, 1_700_000_000_000_000_000)}
		r := topicRecord(info)
		want := quorum.Default()
		want.Grid = tc.grid
		if r.Params() != want {
			t.Fatalf("grid %d: the record's params %+v, want %+v", tc.grid, r.Params(), want)
		}
		var out bytes.Buffer
		describe(&out, r)
		if !strings.Contains(out.String(), tc.text) {
			t.Fatalf("grid %d: describe does not say %q:\n%s", tc.grid, tc.text, out.String())
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if tc.json != "" && !strings.Contains(string(b), tc.json) || tc.json == "" && strings.Contains(string(b), `"grid"`) {
			t.Fatalf("grid %d: JSON %s", tc.grid, b)
		}
	}
}

// TestTopicLatencyFlag: --latency picks the profile's A and D unless
// --accept-window or --read-delay are given; one alone sets the other to
// fit (D >= A); an unknown profile is refused before any connection.
func TestTopicLatencyFlag(t *testing.T) {
	low, def := raidq.LowLatencyParams(), raidq.DefaultParams()
	cases := []struct {
		args []string
		a, d time.Duration
	}{
		{nil, def.AcceptWindow, def.ReadDelay},
		{[]string{"--latency", "low"}, low.AcceptWindow, low.ReadDelay},
		{[]string{"--latency", "low", "--accept-window", "30ms"}, 30 * time.Millisecond, 30 * time.Millisecond},
		{[]string{"--read-delay", "100ms"}, 100 * time.Millisecond, 100 * time.Millisecond},
		{[]string{"--latency", "low", "--read-delay", "1s"}, low.AcceptWindow, time.Second},
	}
	for _, tc := range cases {
		cmd := topicCreateCmd()
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		latency, _ := cmd.Flags().GetString("latency")
		p := def
		p.AcceptWindow, _ = cmd.Flags().GetDuration("accept-window")
		p.ReadDelay, _ = cmd.Flags().GetDuration("read-delay")
		if err := applyProfile(cmd, &p, latency); err != nil || p.AcceptWindow != tc.a || p.ReadDelay != tc.d {
			t.Errorf("%v: A=%v D=%v (%v), want A=%v D=%v", tc.args, p.AcceptWindow, p.ReadDelay, err, tc.a, tc.d)
		}
	}
	cmd := topicCreateCmd()
	cmd.SetArgs([]string{"x", "--latency", "fast"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); !errors.Is(err, quorum.ErrInvalidParams) || !strings.Contains(err.Error(), "low") {
		t.Fatalf("--latency fast: want an error naming the profiles, got %v", err)
	}
}

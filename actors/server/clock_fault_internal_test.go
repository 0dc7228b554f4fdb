package server

import (
	"strings"
	"testing"
	"time"
)

// TestParseClockFault: a request is one JSON object with offset_ns within
// ±1h; anything else is refused with a message saying what is wanted.
func TestParseClockFault(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  string
	}{
		{`{"offset_ns": 5000000000}`, 5e9, ""},
		{`{"offset_ns": -5000000000}`, -5e9, ""},
		{`{"offset_ns": 0}`, 0, ""},
		{`{"offset_ns": 3600000000000}`, int64(time.Hour), ""},
		{`{"offset_ns": -3600000000000}`, -int64(time.Hour), ""},
		{``, 0, "empty request"},
		{`  `, 0, "empty request"},
		{`{}`, 0, "offset_ns is missing"},
		{`{"offset_ns": 3600000000001}`, 0, "beyond ±1h0m0s"},
		{`{"offset_ns": -3600000000001}`, 0, "beyond ±1h0m0s"},
		{`{"offset_ns": "5s"}`, 0, "bad request"},
		{`{"offset_ns": 1.5}`, 0, "bad request"},
		{`{"offset": 5}`, 0, "unknown field"},
		{`{"offset_ns": 1} {"offset_ns": 2}`, 0, "data after the JSON object"},
		{`garbage`, 0, "bad request"},
	} {
		got, err := parseClockFault([]byte(c.in))
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%q: got %d, %v; want %d", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "offset_ns")):
			t.Errorf("%q: got %d, %v; want an error saying %q and naming offset_ns", c.in, got, err, c.err)
		}
	}
}

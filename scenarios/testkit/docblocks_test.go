package testkit

import (
	"strings"
	"testing"
)

func TestParseDocBlocks(t *testing.T) {
	doc := "# T\n\n```sh\necho a\n```\n\n<!-- doctest: skip=\"no host\" -->\n```sh\nssh h\n```\n\n```go\nx := 1\n```\n\n" +
		"```\n$ echo hi\nhi\n$ true\n```\n\n```\nplain: config\n```\n<!-- doctest: background ready=\"up\" needs=\"kcat\" -->\n```sh\n./raidq dev\n```\n"
	blocks, err := ParseDocBlocks("d.md", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 4 {
		t.Fatalf("%d blocks, want 4: %+v", len(blocks), blocks)
	}
	if blocks[0].Line != 3 || blocks[0].Lines[0] != "echo a" || len(blocks[0].Ann) != 0 {
		t.Errorf("block 0: %+v", blocks[0])
	}
	if blocks[1].Ann["skip"] != "no host" {
		t.Errorf("block 1: %+v", blocks[1])
	}
	steps := blocks[2].Steps()
	if !blocks[2].Transcript() || len(steps) != 2 || steps[0].Cmd != "echo hi" || len(steps[0].Want) != 1 || len(steps[1].Want) != 0 {
		t.Errorf("transcript: %+v", steps)
	}
	if _, ok := blocks[3].Ann["background"]; !ok || blocks[3].Ann["ready"] != "up" || blocks[3].Ann["needs"] != "kcat" {
		t.Errorf("block 3: %+v", blocks[3].Ann)
	}
	for _, bad := range []string{"<!-- doctest: skpi -->\n```sh\nx\n```\n", "<!-- doctest: skip -->\ntext\n```sh\nx\n```\n", "```sh\nx\n"} {
		if _, err := ParseDocBlocks("bad.md", strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestMatchDocOutput(t *testing.T) {
	for _, c := range []struct {
		want []string
		got  string
		ok   bool
	}{
		{[]string{"healthy: node n0 serving (http://127.0.0.1:9422/healthz, ...)"}, "healthy: node n0 serving (http://127.0.0.1:9422/healthz, 6ms)\n", true},
		{[]string{"a", "...", "z"}, "a\nb\nc\nz\n", true},
		{[]string{"a", "...", "z"}, "a\nz", true},
		{[]string{"a", "z"}, "a\nb\nz", false},
		{[]string{"exit ..."}, "exit 3", true},
		{[]string{"x...y...z"}, "x1y2z", true},
		{[]string{"x...y...z"}, "x1z2y", false},
		{nil, "", true},
		{nil, "out", false},
		{[]string{"ok", ""}, "ok  \n", true},
	} {
		if diff := MatchDocOutput(c.want, c.got); (diff == "") != c.ok {
			t.Errorf("want %q got %q: match %v, want %v (%s)", c.want, c.got, diff == "", c.ok, diff)
		}
	}
}

package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const ddSample = `# comment
echo a b=1 c=(x, y) d=()
in 1
in 2
----
out

echo
----
----
p1

p2
----
----

# trailing comment
echo last
----
`

func TestParseDataDriven(t *testing.T) {
	cases, err := ParseDataDriven("f.txt", ddSample)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 3 {
		t.Fatalf("%d cases, want 3", len(cases))
	}
	c := cases[0]
	if c.Pos != "f.txt:2" || c.Cmd != "echo" || c.Input != "in 1\nin 2" || c.Expected != "out" {
		t.Errorf("case 0: %+v", c)
	}
	var args []string
	for _, a := range c.CmdArgs {
		args = append(args, a.String())
	}
	if strings.Join(args, " ") != "a b=1 c=(x,y) d" || c.Val("b", "") != "1" || c.Val("z", "def") != "def" || !c.HasArg("a") {
		t.Errorf("args: %v", args)
	}
	if cases[1].Expected != "p1\n\np2" || cases[1].Pos != "f.txt:8" {
		t.Errorf("double separator: %q at %s", cases[1].Expected, cases[1].Pos)
	}
	if cases[2].Expected != "" || cases[2].Line != 18 {
		t.Errorf("empty output: %+v", cases[2])
	}
	for _, bad := range []string{"cmd\nno separator\n", "cmd\n----\n----\nopen\n", "cmd x=(a,b\n----\n"} {
		if _, err := ParseDataDriven("bad.txt", bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// TestRewriteDataDriven: rewriting puts each case's new output in place,
// in the double-separator form where it holds a blank line, and parsing
// the result gives the outputs back.
func TestRewriteDataDriven(t *testing.T) {
	cases, err := ParseDataDriven("f.txt", ddSample)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{"new\nlines", "one", "a\n\nb"}
	text := rewritten(ddSample, cases, got)
	again, err := ParseDataDriven("f.txt", text)
	if err != nil {
		t.Fatalf("%v in\n%s", err, text)
	}
	for i, c := range again {
		if c.Expected != got[i] || c.Cmd != cases[i].Cmd || c.Input != cases[i].Input {
			t.Errorf("case %d after rewrite: %+v\n%s", i, c, text)
		}
	}
	if !strings.Contains(text, "# trailing comment\n") || !strings.HasPrefix(text, "# comment\n") {
		t.Errorf("comments lost:\n%s", text)
	}
}

// TestRunDataDriven runs a file through a handler, and rewrites it.
func TestRunDataDriven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "echo.txt")
	if err := os.WriteFile(path, []byte("echo x=(1,2)\n----\nwrong\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	echo := func(t *testing.T, d *TestData) string { a, _ := d.Arg("x"); return strings.Join(a.Vals, "\n\n") }
	t.Setenv("RAIDQ_REWRITE", "1")
	RunDataDriven(t, path, echo)
	b, _ := os.ReadFile(path)
	if want := "echo x=(1,2)\n----\n----\n1\n\n2\n----\n----\n"; string(b) != want {
		t.Fatalf("rewritten:\n%s\nwant:\n%s", b, want)
	}
	t.Setenv("RAIDQ_REWRITE", "")
	RunDataDriven(t, path, echo) // now it passes as written
}

func TestDiff(t *testing.T) {
	if got, want := Diff("a\nb\nc", "a\nx\nc"), "  a\n- b\n+ x\n  c\n"; got != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", got, want)
	}
}

package testkit

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// DocBlock is one fenced code block of a Markdown document that a docs
// test runs: a shell block (```sh: its lines run as a script) or a
// transcript (a fence with no language whose lines start with "$ ": each
// command runs and its output is compared with the lines after it).
//
// An HTML comment on the line right before the fence steers it:
//
//	<!-- doctest: skip="why" -->          not run; the test says why
//	<!-- doctest: background ready="press Ctrl-C" -->
//	                                       the block's one command runs in the
//	                                       background until the document ends,
//	                                       once its output holds ready
//	<!-- doctest: needs="kcat,docker" -->  skipped where a tool is missing
//	<!-- doctest: env="RAIDQ_DOCS_COMPOSE" -->
//	                                       run only when that variable is set
//	<!-- doctest: exit="1" -->             the block must exit 1 (default 0)
//	<!-- doctest: fixedports -->           its ports are not moved (compose
//	                                       publishes fixed ones)
//	<!-- doctest: cleanup="cmd" -->        cmd runs when the document ends
//	                                       (docker-compose down -v)
//
// Blocks in other languages (go, yaml, a config file) are not returned.
type DocBlock struct {
	File  string
	Line  int    // line of the opening fence (1-based)
	Lang  string // "sh" or "" (a transcript)
	Lines []string
	Ann   map[string]string // the doctest annotation's keys; "" for a bare key
}

// Transcript is a block of "$ command" lines, each followed by the output
// it printed.
func (b DocBlock) Transcript() bool { return b.Lang == "" }

// Steps splits a transcript into commands and the output lines expected
// after each.
func (b DocBlock) Steps() []DocStep {
	var steps []DocStep
	for _, l := range b.Lines {
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			steps = append(steps, DocStep{Cmd: cmd})
			continue
		}
		if len(steps) > 0 {
			steps[len(steps)-1].Want = append(steps[len(steps)-1].Want, l)
		}
	}
	return steps
}

// DocStep is one command of a transcript and its expected output.
type DocStep struct {
	Cmd  string
	Want []string
}

var (
	docAnnotation = regexp.MustCompile(`^<!--\s*doctest:(.*?)-->\s*$`)
	docAnnKey     = regexp.MustCompile(`([a-z]+)(?:="([^"]*)")?`)
)

// ParseDocBlocks reads the shell and transcript blocks of a Markdown
// document. A doctest comment that is not followed by a fence, or that
// names an unknown key, is an error: a misspelt annotation must not
// silently run or skip a block.
func ParseDocBlocks(file string, r io.Reader) ([]DocBlock, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var (
		out     []DocBlock
		cur     *DocBlock
		pending map[string]string
		pendAt  int
		n       int
	)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur != nil {
			if strings.HasPrefix(line, "```") {
				if cur.Lang == "sh" || cur.Lang == "" && len(cur.Lines) > 0 && strings.HasPrefix(cur.Lines[0], "$ ") {
					out = append(out, *cur)
				}
				cur = nil
				continue
			}
			cur.Lines = append(cur.Lines, line)
			continue
		}
		if m := docAnnotation.FindStringSubmatch(line); m != nil {
			ann, err := parseDocAnnotation(m[1])
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", file, n, err)
			}
			pending, pendAt = ann, n
			continue
		}
		if lang, ok := strings.CutPrefix(line, "```"); ok {
			cur = &DocBlock{File: file, Line: n, Lang: strings.TrimSpace(lang), Ann: pending}
			if cur.Ann == nil {
				cur.Ann = map[string]string{}
			}
			pending = nil
			continue
		}
		if pending != nil {
			return nil, fmt.Errorf("%s:%d: a doctest comment must stand right before a fence", file, pendAt)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: fence not closed", file, cur.Line)
	}
	return out, nil
}

// docKeys are the annotation keys a docs test knows.
var docKeys = map[string]bool{"skip": true, "background": true, "ready": true, "needs": true, "env": true, "exit": true,
	"fixedports": true, "cleanup": true}

func parseDocAnnotation(s string) (map[string]string, error) {
	ann := map[string]string{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		loc := docAnnKey.FindStringSubmatchIndex(rest)
		if loc == nil || loc[0] != 0 {
			return nil, fmt.Errorf("doctest annotation %q: want key or key=\"value\" pairs", s)
		}
		key := rest[loc[2]:loc[3]]
		if !docKeys[key] {
			return nil, fmt.Errorf("doctest annotation: unknown key %q", key)
		}
		val := ""
		if loc[4] >= 0 {
			val = rest[loc[4]:loc[5]]
		}
		ann[key] = val
		rest = strings.TrimSpace(rest[loc[1]:])
	}
	return ann, nil
}

// MatchDocOutput compares output with the expected lines of a transcript:
// lines equal after trimming trailing space, "..." inside a line matches
// any text, and a line that is only "..." matches any number of lines.
// It returns "" on a match, else what differs.
func MatchDocOutput(want []string, got string) string {
	gotLines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if strings.TrimSpace(got) == "" {
		gotLines = nil
	}
	for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
		want = want[:len(want)-1]
	}
	if matchLines(want, gotLines) {
		return ""
	}
	return fmt.Sprintf("want:\n%s\ngot:\n%s", strings.Join(want, "\n"), strings.Join(gotLines, "\n"))
}

func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && matchLine(strings.TrimRight(want[0], " \t"), strings.TrimRight(got[0], " \t")) && matchLines(want[1:], got[1:])
}

// matchLine matches one line with "..." wildcards.
func matchLine(want, got string) bool {
	parts := strings.Split(want, "...")
	if len(parts) == 1 {
		return want == got
	}
	if !strings.HasPrefix(got, parts[0]) {
		return false
	}
	got = got[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(got, p)
		if i < 0 {
			return false
		}
		got = got[i+len(p):]
	}
	return strings.HasSuffix(got, parts[len(parts)-1])
}

package drill

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"
)

// The live consumer group (issue "consumers survive every fault that
// producers survive"): groupMembers `raidq consume --group` processes of
// the drill's own binary read the topic through the whole fault schedule,
// each given every node's client URL (its list starting at a different
// node, the first one at a faulted node), so the faults also hit servers
// the members use. The drill parses their --json lines, maps the values to
// the history like every other reader (history.toDelivery), restarts a
// member whose process exits by itself (that exit counts against the
// verdict), and after healing waits until the group delivered every acked
// record or the deadline passes, then stops the members with SIGINT.
//
// nats.go shuffles a URL list (the CLI does not set NoRandomize), so a
// member's first URL is where its list starts, not necessarily the server
// its main connection uses; every member also dials every node's server
// directly for reads (direct.go), so faults on any node reach it.

const (
	groupName    = "drill-live"
	groupMembers = 2
	// memberStopWait bounds a member's exit after SIGINT (then SIGKILL).
	memberStopWait = 15 * time.Second
	// memberTailLines of each member's stderr are kept.
	memberTailLines = 120
)

// memberStarts says at which node each member's URL list starts: member 0
// at the plan's first faulted node (node 0 without faults), member 1 at
// its last faulted node when that differs, otherwise the rest spread
// evenly from member 0's (n nodes, members members).
func memberStarts(faulted []int, n, members int) []int {
	base := 0
	if len(faulted) > 0 {
		base = faulted[0]
	}
	starts := make([]int, members)
	for k := range starts {
		starts[k] = (base + k*n/members) % n
	}
	if members > 1 && len(faulted) > 1 && faulted[len(faulted)-1] != base {
		starts[1] = faulted[len(faulted)-1]
	}
	return starts
}

// rotate returns urls starting at index start (every element once).
func rotate(urls []string, start int) []string {
	out := make([]string, 0, len(urls))
	for k := range urls {
		out = append(out, urls[(start+k)%len(urls)])
	}
	return out
}

// memberLine is one line of `raidq consume --json` (cmd/raidq consume.go,
// type consumed).
type memberLine struct {
	Key       string            `json:"key"`
	Value     string            `json:"value"`
	Headers   map[string]string `json:"headers"`
	Partition int               `json:"partition"`
	Offset    uint64            `json:"offset"`
	Index     uint32            `json:"index"`
	Stripe    string            `json:"stripe"`
}

// parseMemberLine maps one stdout line of a member to a delivery at at (ns
// since the load start). ok is false for a blank line; a line that is not
// a JSON object is an unknown delivery (raw says so), counted unexpected.
func parseMemberLine(h *history, line []byte, at int64) (d delivery, ok bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return delivery{}, false
	}
	var m memberLine
	if err := json.Unmarshal(line, &m); err != nil {
		raw := line
		if len(raw) > 40 {
			raw = raw[:40]
		}
		return delivery{at: at, raw: fmt.Sprintf("not JSON: %q", raw)}, true
	}
	return h.toDelivery(delivery{at: at, part: m.Partition, off: m.Offset, idx: int(m.Index), stripe: m.Stripe},
		[]byte(m.Value)), true
}

// memberDelivery is one record a member process printed.
type memberDelivery struct {
	delivery
	member string // the process: slot and incarnation, "g0#1"
}

// groupTally is what the members delivered together.
type groupTally struct {
	checked // checkHistory over every member's deliveries
	// duplicateRecords: records delivered more than once; acrossMembers:
	// of those, records delivered by more than one member process.
	duplicateRecords, acrossMembers int
	// lastByPart is the last delivery of each partition (any member).
	lastByPart map[int]memberDelivery
	// dupSamples names the first 10 repeated deliveries (who delivered
	// the record first, who again, when).
	dupSamples []string
}

// tallyGroup counts the members' deliveries against the sends: the
// checker's counts over all of them (delivered, lost = missing,
// unexpected, duplicates = deliveries beyond a record's first), and the
// records delivered more than once, by one process or several.
func tallyGroup(prods [][]sendRec, dels []memberDelivery) groupTally {
	plain := make([]delivery, len(dels))
	by := make(map[uint64]map[string]int)
	first := make(map[uint64]memberDelivery)
	t := groupTally{lastByPart: make(map[int]memberDelivery)}
	for i, d := range dels {
		plain[i] = d.delivery
		if !d.known {
			continue
		}
		t.lastByPart[d.part] = d
		k := key(d.prod, d.seq)
		if by[k] == nil {
			by[k] = make(map[string]int)
		}
		by[k][d.member]++
		f, seen := first[k]
		if !seen {
			first[k] = d
		} else if len(t.dupSamples) < 10 {
			t.dupSamples = append(t.dupSamples, fmt.Sprintf("p%d-%d partition %d: %s at %.2fs, again %s at %.2fs", d.prod, d.seq,
				d.part, f.member, float64(f.at)/1e9, d.member, float64(d.at)/1e9))
		}
	}
	t.checked = checkHistory(prods, plain)
	for _, ms := range by {
		n := 0
		for _, c := range ms {
			n += c
		}
		if n > 1 {
			t.duplicateRecords++
			if len(ms) > 1 {
				t.acrossMembers++
			}
		}
	}
	return t
}

// lineTail keeps the last max lines written to it (an io.Writer for a
// process's stderr); lines are cut at 500 bytes.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
	part  []byte
}

func (t *lineTail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		t.part = append(t.part, chunk[:min(len(chunk), max(0, 500-len(t.part)))]...)
		if i < 0 {
			break
		}
		t.lines = append(t.lines, string(t.part))
		t.part = t.part[:0]
		if len(t.lines) > t.max {
			t.lines = append(t.lines[:0], t.lines[len(t.lines)-t.max:]...)
		}
	}
	return n, nil
}

// tail is the last n lines (a partial last line included), joined by "\n".
func (t *lineTail) tail(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := append([]string(nil), t.lines...)
	if len(t.part) > 0 {
		ls = append(ls, string(t.part))
	}
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// memberProc is one member process.
type memberProc struct {
	name   string // "g0#1"
	cmd    *exec.Cmd
	stderr *lineTail
	done   chan struct{} // closed once stdout is drained and the process reaped
	code   int           // exit code (-1: ended by a signal), set before done closes
	state  string        // how it ended ("exit status 1", "signal: killed")
}

// memberExit is a member process that exited while the drill did not stop it.
type memberExit struct {
	member string
	at     float64 // seconds since the load start
	code   int
	tail   string
}

// liveGroup runs and watches the members. Contract: startGroup starts
// them; setStart gives the load's start and history (lines read before
// are kept and mapped then); stop (once) waits for the acked records and
// stops them; close kills whatever still runs (early returns; after stop
// it does nothing).
type liveGroup struct {
	bin          string
	args         []string // consume's arguments, without --nats
	lists        []string // member k's --nats value
	event        func(kind, format string, args ...any)
	restartDelay time.Duration

	mu       sync.Mutex
	start    time.Time
	h        *history
	early    []rawLine // lines before setStart
	dels     []memberDelivery
	got      map[uint64]int // known records delivered (any member) -> deliveries
	exits    []memberExit
	procs    []*memberProc // current process of each member (nil between restarts)
	stopping bool
	quit     chan struct{} // closed when stopping: no more restarts
	quitOnce sync.Once
	wg       sync.WaitGroup // the supervisors
}

type rawLine struct {
	member string
	at     time.Time
	line   []byte
}

// startGroup starts the members against every node of the backend.
func (r *run) startGroup() (*liveGroup, error) {
	bin := r.be.ClientBinary()
	if bin == "" {
		return nil, errors.New("live group: no raidq binary to run `raidq consume`")
	}
	var urls []string
	for i := range r.be.IDs() {
		urls = append(urls, r.be.ClientURL([]int{i}))
	}
	g := &liveGroup{bin: bin, event: r.event, restartDelay: time.Second, got: make(map[uint64]int),
		quit: make(chan struct{}), procs: make([]*memberProc, groupMembers),
		// -v: the members log their claims, releases and pauses, so a
		// duplicate or a gap can be traced in their stderr tails.
		args: []string{"consume", Topic, "--group", groupName, "--from", "earliest", "--json", "--cluster", r.be.Cluster(), "-v"}}
	for _, s := range memberStarts(r.plan.faulted, len(urls), groupMembers) {
		g.lists = append(g.lists, strings.Join(rotate(urls, s), ","))
	}
	if err := g.run(); err != nil {
		return nil, err
	}
	for k, s := range memberStarts(r.plan.faulted, len(urls), groupMembers) {
		r.event("info", "live group member g%d started (`raidq consume --group %s`, NATS list from %s)", k, groupName, r.be.IDs()[s])
	}
	return g, nil
}

// run starts every member's first process and its supervisor.
func (g *liveGroup) run() error {
	for k := range g.lists {
		p, err := g.startMember(k, 1)
		if err != nil {
			g.close()
			return fmt.Errorf("live group: %w", err)
		}
		g.procs[k] = p
		g.wg.Add(1)
		go g.supervise(k, p)
	}
	return nil
}

// startMember starts incarnation inc of member k and reads its stdout.
func (g *liveGroup) startMember(k, inc int) (*memberProc, error) {
	args := append(append([]string(nil), g.args...), "--nats", g.lists[k])
	cmd := exec.Command(g.bin, args...)
	// The client flags read RAIDQ_* (credentials, TLS CA, cluster): none
	// of the caller's may leak into the drill's insecure cluster.
	cmd.Env = []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RAIDQ_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	p := &memberProc{name: fmt.Sprintf("g%d#%d", k, inc), cmd: cmd, stderr: &lineTail{max: memberTailLines},
		done: make(chan struct{})}
	cmd.Stderr = p.stderr
	setMemberProcAttr(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.name, err)
	}
	go func() {
		defer close(p.done)
		br := bufio.NewReaderSize(out, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				g.deliver(p.name, line)
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
					_, _ = fmt.Fprintf(p.stderr, "drill: reading stdout: %v\n", err)
				}
				break
			}
		}
		err := cmd.Wait()
		if cmd.ProcessState == nil {
			p.code, p.state = -1, fmt.Sprint(err)
			return
		}
		p.code, p.state = cmd.ProcessState.ExitCode(), cmd.ProcessState.String()
	}()
	return p, nil
}

// supervise waits for member k's processes; one that exits while the
// group is not stopping is recorded and restarted after restartDelay (a
// start that fails is recorded the same way and tried again).
func (g *liveGroup) supervise(k int, p *memberProc) {
	defer g.wg.Done()
	for inc := 1; ; inc++ {
		if p != nil {
			<-p.done
			if !g.exited(k, p.name, p.code, p.state, p.stderr) {
				return // stopped by the drill
			}
		}
		select {
		case <-g.quit:
			return
		case <-time.After(g.restartDelay):
		}
		g.mu.Lock()
		if g.stopping {
			g.mu.Unlock()
			return
		}
		var err error
		p, err = g.startMember(k, inc+1)
		g.procs[k] = p // nil if it did not start
		g.mu.Unlock()
		if err != nil {
			tail := &lineTail{max: 1}
			_, _ = fmt.Fprintln(tail, err.Error())
			if !g.exited(k, fmt.Sprintf("g%d#%d", k, inc+1), -1, "not started", tail) {
				return
			}
		}
	}
}

// exited records an exit of member k's process name unless the group is
// stopping (then it returns false).
func (g *liveGroup) exited(k int, name string, code int, state string, stderr *lineTail) bool {
	g.mu.Lock()
	if g.stopping {
		g.mu.Unlock()
		return false
	}
	var at float64
	if !g.start.IsZero() {
		at = time.Since(g.start).Seconds()
	}
	g.exits = append(g.exits, memberExit{member: name, at: at, code: code, tail: stderr.tail(8)})
	g.procs[k] = nil
	g.mu.Unlock()
	g.event("info", "live group member %s exited by itself (%s): %s; restarting it", name, state, lastLine(stderr.tail(20)))
	return true
}

// setStart gives the group the load's start and history, and maps the
// lines read before.
func (g *liveGroup) setStart(start time.Time, h *history) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.start, g.h = start, h
	for _, l := range g.early {
		g.addLocked(l.member, l.line, l.at.Sub(start).Nanoseconds())
	}
	g.early = nil
}

func (g *liveGroup) deliver(member string, line []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.h == nil {
		g.early = append(g.early, rawLine{member: member, at: time.Now(), line: line})
		return
	}
	g.addLocked(member, line, time.Since(g.start).Nanoseconds())
}

func (g *liveGroup) addLocked(member string, line []byte, at int64) {
	d, ok := parseMemberLine(g.h, line, at)
	if !ok {
		return
	}
	g.dels = append(g.dels, memberDelivery{delivery: d, member: member})
	if d.known {
		g.got[key(d.prod, d.seq)]++
	}
}

// delivered counts the records of want some member delivered.
func (g *liveGroup) delivered(want map[uint64]bool) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return countDelivered(g.got, want)
}

// countDelivered counts the records of want that got holds (a live
// group's tally, native or kgo).
func countDelivered(got map[uint64]int, want map[uint64]bool) int {
	n := 0
	for k := range got {
		if want[k] {
			n++
		}
	}
	return n
}

// groupResult is what stop returns.
type groupResult struct {
	dels     []memberDelivery
	exits    []memberExit
	stopFail []string // members that did not exit 0 on SIGINT
	tails    []string // each last process's stderr tail
	waitS    float64
}

// stop waits until the members delivered every record of want or the
// deadline passes (progress is told about it every 200ms), then stops
// them with SIGINT (SIGKILL after memberStopWait) and returns everything.
func (g *liveGroup) stop(want map[uint64]bool, deadline time.Time, progress func(got int)) groupResult {
	t0 := time.Now()
	for {
		got := g.delivered(want)
		progress(got)
		if got >= len(want) || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := groupResult{waitS: time.Since(t0).Seconds()}
	procs := g.halt()
	for _, p := range procs {
		if p != nil && p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(os.Interrupt)
		}
	}
	for _, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			if p.code != 0 {
				res.stopFail = append(res.stopFail, fmt.Sprintf("%s ended with %s after SIGINT: %s", p.name, p.state,
					lastLine(p.stderr.tail(20))))
			}
		case <-time.After(memberStopWait):
			_ = p.cmd.Process.Kill()
			<-p.done
			res.stopFail = append(res.stopFail, fmt.Sprintf("%s still ran %s after SIGINT (killed): %s", p.name, memberStopWait,
				lastLine(p.stderr.tail(20))))
		}
		tail := p.stderr.tail(60)
		if strings.TrimSpace(tail) == "" {
			tail = "(no output)"
		}
		res.tails = append(res.tails, fmt.Sprintf("%s:\n%s", p.name, tail))
	}
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	res.dels, res.exits = g.dels, g.exits
	return res
}

// halt stops restarting members and returns the member processes.
func (g *liveGroup) halt() []*memberProc {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopping = true
	g.quitOnce.Do(func() { close(g.quit) })
	return append([]*memberProc(nil), g.procs...)
}

// close kills every member process still running (an early return).
func (g *liveGroup) close() {
	for _, p := range g.halt() {
		if p != nil && p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	g.wg.Wait()
}

// GroupReport is what the live consumer group (groupMembers `raidq
// consume --group` processes reading through the faults) delivered.
type GroupReport struct {
	Group string `json:"group"`
	// Members names each member and the node its NATS URL list starts at.
	Members []string `json:"members"`
	// Deliveries: lines the members printed; Delivered: distinct acked
	// records among them; Missing: acked records no member delivered by
	// the deadline.
	Deliveries int `json:"deliveries"`
	Delivered  int `json:"delivered"`
	Missing    int `json:"missing"`
	// Duplicates: deliveries beyond a record's first (any member);
	// DuplicateRecords: records delivered more than once; AcrossMembers:
	// of those, records delivered by more than one member process.
	Duplicates       int `json:"duplicates"`
	DuplicateRecords int `json:"duplicate_records"`
	AcrossMembers    int `json:"across_members"`
	// DuplicateSamples names the first 10 repeated deliveries.
	DuplicateSamples []string `json:"duplicate_samples,omitempty"`
	Unexpected       int      `json:"unexpected"`
	// Exits: member processes that exited while the drill did not stop
	// them (each was restarted); ExitSamples describes the first 10.
	Exits       int      `json:"exits"`
	ExitSamples []string `json:"exit_samples,omitempty"`
	// StopFailures: members that did not exit 0 within 15s of SIGINT.
	StopFailures   []string `json:"stop_failures,omitempty"`
	MissingSamples []string `json:"missing_samples,omitempty"`
	// StderrTails: each member's last stderr lines, when something failed.
	StderrTails []string `json:"stderr_tails,omitempty"`
	// WaitS: how long the drill waited after the read-back for the group.
	WaitS float64 `json:"wait_s"`
}

// exitsDetail names the exits, each by its last telling stderr line.
func exitsDetail(exits []memberExit) string {
	if len(exits) == 0 {
		return "0 exits"
	}
	var s []string
	for _, x := range exits[:min(len(exits), 5)] {
		s = append(s, fmt.Sprintf("%s at %.2fs (code %d): %s", x.member, x.at, x.code, lastLine(x.tail)))
	}
	return fmt.Sprintf("%d exits: %s", len(exits), short(strings.Join(s, "; "), 600))
}

// groupVerdict fills rep.Group and adds the group's checks.
func (r *run) groupVerdict(rep *Report, res groupResult) {
	prods := r.sends()
	r.groupDels = res.dels
	t := tallyGroup(prods, res.dels)
	g := &GroupReport{Group: groupName, Deliveries: len(res.dels), Delivered: t.acked - t.lost, Missing: t.lost,
		Duplicates: t.duplicates, DuplicateRecords: t.duplicateRecords, AcrossMembers: t.acrossMembers,
		DuplicateSamples: t.dupSamples, Unexpected: t.unexpected, Exits: len(res.exits), StopFailures: res.stopFail, WaitS: res.waitS}
	for k, s := range memberStarts(r.plan.faulted, len(r.be.IDs()), groupMembers) {
		g.Members = append(g.Members, fmt.Sprintf("g%d (NATS list from %s)", k, r.be.IDs()[s]))
	}
	for _, x := range res.exits {
		if len(g.ExitSamples) == 10 {
			break
		}
		g.ExitSamples = append(g.ExitSamples, fmt.Sprintf("%s exited at %.2fs (code %d): %s", x.member, x.at, x.code,
			strings.ReplaceAll(strings.TrimSpace(x.tail), "\n", " | ")))
	}
	for _, k := range t.lost_ {
		if len(g.MissingSamples) == 20 {
			break
		}
		prod, seq := int(k>>40), int(k&(1<<40-1))
		rec := prods[prod][seq]
		s := fmt.Sprintf("p%d-%d partition %d offset %d stripe %s acked at %.2fs", prod, seq, rec.part, rec.off, rec.stripe,
			float64(rec.done)/1e9)
		if last, ok := t.lastByPart[int(rec.part)]; ok {
			s += fmt.Sprintf("; partition %d last delivered by %s at %.2fs (offset %d)", rec.part, last.member,
				float64(last.at)/1e9, last.off)
		} else {
			s += fmt.Sprintf("; no member delivered anything of partition %d", rec.part)
		}
		g.MissingSamples = append(g.MissingSamples, s)
	}
	if len(t.unexpectedSamples) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("live group: unexpected deliveries, e.g. %v", t.unexpectedSamples))
	}
	if g.Missing > 0 || g.Exits > 0 || g.Unexpected > 0 || len(g.StopFailures) > 0 || g.AcrossMembers > 0 {
		g.StderrTails = res.tails
	}
	sort.Strings(g.StopFailures)
	rep.Group = g
	dup := fmt.Sprintf("%d duplicates (%d records, %d across members)", g.Duplicates, g.DuplicateRecords, g.AcrossMembers)
	rep.Checks = append(rep.Checks,
		Check{Name: "live group members delivered every acked record", OK: g.Missing == 0,
			Detail: fmt.Sprintf("%d missing of %d acked, waited %.1fs after the read-back; %s", g.Missing, t.acked, g.WaitS, dup)},
		Check{Name: "live group members delivered nothing unexpected", OK: g.Unexpected == 0,
			Detail: fmt.Sprintf("%d unexpected", g.Unexpected)},
		Check{Name: "no live group member exited", OK: g.Exits == 0, Detail: exitsDetail(res.exits)},
		Check{Name: "live group members exit 0 on SIGINT", OK: len(g.StopFailures) == 0,
			Detail: short(strings.Join(g.StopFailures, "; "), 600)})
	if rep.Scenario == "none" {
		rep.Checks = append(rep.Checks, Check{Name: "no duplicates in the live group without faults", OK: g.Duplicates == 0,
			Detail: dup})
	}
}

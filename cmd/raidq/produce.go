package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/raidq/raidq"
)

// maxLine bounds one input line (one message).
const maxLine = 4 << 20

func produceCmd() *cobra.Command {
	var cf clientFlags
	var key, file, keySep string
	var deliveryTimeout time.Duration
	var asJSON bool
	var window int
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Send each line of stdin (or --file) as one message",
		Long: `produce sends each input line as one message and waits until every one is
committed (acknowledged by W nodes). It prints "acked N" on stderr and exits 0
only when every line was acked; with --json it prints one line per message
with its partition and position.

--key-separator SEP (like kcat -K SEP) splits each line at the first SEP:
"k:v" with --key-separator : sends key k, value v. A line without SEP is
not sent: it counts as failed ("no key separator"), so the run exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if window < 1 || window > 1<<16 {
				return usageErr(fmt.Errorf("--window %d: must be 1..65536", window))
			}
			if deliveryTimeout < 0 {
				return usageErr(fmt.Errorf("--delivery-timeout %s: must not be negative", deliveryTimeout))
			}
			if cmd.Flags().Changed("key-separator") && keySep == "" {
				return usageErr(fmt.Errorf("--key-separator: must not be empty"))
			}
			in := io.Reader(cmd.InOrStdin())
			if file != "" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			c, err := cf.connect()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := cf.ctx()
			err = c.WaitTopic(ctx, args[0])
			cancel()
			if err != nil {
				return err
			}
			p, err := c.Producer(args[0], raidq.WithDeliveryTimeout(deliveryTimeout))
			if err != nil {
				return err
			}
			defer p.Close()
			return produceLines(cmd, p, in, lineSplitter{key: []byte(key), sep: []byte(keySep)}, window, asJSON)
		},
	}
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&key, "key", "", "key of every message (picks the partition); empty: spread round-robin")
	f.StringVar(&keySep, "key-separator", "", `split each line at the first SEP into key and value (kcat -K): "k:v" with ":" is key k, value v; a line without SEP fails`)
	cmd.MarkFlagsMutuallyExclusive("key", "key-separator")
	f.StringVar(&file, "file", "", "read messages from this file instead of stdin")
	f.BoolVar(&asJSON, "json", false, "print one JSON line per message: line, partition, offset, index, stripe")
	f.IntVar(&window, "window", 1024, "messages in flight at once")
	f.DurationVar(&deliveryTimeout, "delivery-timeout", 0, "retry each send this long before it fails (0: 16 attempts, about 2s)")
	return cmd
}

// lineSplitter turns an input line into a message's key and value: the
// fixed --key, or with --key-separator the text before the first
// separator (kcat -K).
type lineSplitter struct{ key, sep []byte }

func (l lineSplitter) split(line []byte) (key, value []byte, err error) {
	if len(l.sep) == 0 {
		return l.key, append([]byte(nil), line...), nil
	}
	k, v, ok := bytes.Cut(line, l.sep)
	if !ok {
		return nil, nil, fmt.Errorf("no key separator %q in the line (not sent)", l.sep)
	}
	return append([]byte(nil), k...), append([]byte(nil), v...), nil
}

type produced struct {
	Line      int    `json:"line"`
	Partition int    `json:"partition"`
	Offset    uint64 `json:"offset"`
	Index     uint32 `json:"index"`
	Stripe    string `json:"stripe"`
	Error     string `json:"error,omitempty"`
}

// produceLines sends every line with at most window in flight, then
// reports in input order. A send the cluster refuses (the user may not
// write the topic: raidq.ErrPermissionDenied) stops it: no further line
// is read, and the refusal is the command's error (exit 4), once the
// lines in flight have their outcome.
func produceLines(cmd *cobra.Command, p *raidq.Producer, in io.Reader, split lineSplitter, window int, asJSON bool) error {
	var mu sync.Mutex
	var results []produced
	var refusal error // the first refused send's error
	refused := make(chan struct{})
	var wg sync.WaitGroup
	sem := make(chan struct{}, window)
	// Lines are read on a goroutine of their own, so a refusal ends the
	// command while it waits for input (a terminal, a pipe kept open).
	stop := make(chan struct{})
	defer close(stop)
	lines, readErr := readLines(in, stop)
	line := 0
read:
	for {
		var text []byte
		select {
		case t, ok := <-lines:
			if !ok {
				break read
			}
			text = t
		case <-refused:
			break read
		}
		line++
		n := line
		key, v, err := split.split(text)
		if err != nil {
			mu.Lock()
			results = append(results, produced{Line: n, Error: err.Error()})
			mu.Unlock()
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-refused:
			line-- // not sent
			break read
		}
		wg.Add(1)
		p.Produce(context.Background(), raidq.Message{Key: key, Value: v}, func(m raidq.Message, err error) {
			defer wg.Done()
			r := produced{Line: n, Partition: m.Partition, Offset: m.Position.Offset, Index: m.Position.Index, Stripe: m.Stripe.String()}
			if err != nil {
				r = produced{Line: n, Error: err.Error()}
			}
			mu.Lock()
			results = append(results, r)
			if err != nil && refusal == nil && errors.Is(err, raidq.ErrPermissionDenied) {
				refusal = err
				close(refused)
			}
			mu.Unlock()
			<-sem
		})
	}
	wg.Wait()
	if refusal != nil {
		return report(cmd, results, line, asJSON, refusal)
	}
	if err := <-readErr; err != nil {
		return fmt.Errorf("reading input after line %d: %w (lines are limited to %d bytes)", line, err, maxLine)
	}
	return report(cmd, results, line, asJSON, nil)
}

// readLines reads in's lines (each a copy) into the returned channel,
// closed at the end of the input (then readErr gets the scanner's error)
// or when stop is closed.
func readLines(in io.Reader, stop <-chan struct{}) (lines <-chan []byte, readErr <-chan error) {
	ch, errc := make(chan []byte), make(chan error, 1)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), maxLine)
		for sc.Scan() {
			select {
			case ch <- append([]byte(nil), sc.Bytes()...):
			case <-stop:
				return
			}
		}
		errc <- sc.Err()
	}()
	return ch, errc
}

// report prints the outcomes; refusal, if set, is the command's error
// (it says why the lines failed).
func report(cmd *cobra.Command, results []produced, lines int, asJSON bool, refusal error) error {
	ordered := make([]produced, lines)
	acked, failed := 0, 0
	var firstErr string
	for _, r := range results {
		ordered[r.Line-1] = r
		if r.Error == "" {
			acked++
		} else {
			failed++
			if firstErr == "" {
				firstErr = fmt.Sprintf("line %d: %s", r.Line, r.Error)
			}
		}
	}
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		for _, r := range ordered {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "acked %d\n", acked)
	if refusal != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "failed %d\n", failed)
		return refusal
	}
	if failed > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "failed %d (first: %s)\n", failed, firstErr)
		return errFailed
	}
	return nil
}

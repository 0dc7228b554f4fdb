package kafkawire

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests here run kcat (librdkafka) against the fake broker of
// kgo_test.go on a loopback listener. They are skipped where kcat is not
// installed (apt-get install kcat).

// listen serves fb on a loopback port until the test ends.
func (fb *fakeBroker) listen(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	fb.host, fb.port = "127.0.0.1", int32(addr.Port)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fb.start(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-accepted
	})
	return addr.String()
}

func kcat(t *testing.T, stdin string, args ...string) string {
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %q: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

// TestKcatConsumesAppendBatch: librdkafka fetches one batch per codec and
// reads every record's offset, key and value sizes, timestamp and headers.
func TestKcatConsumesAppendBatch(t *testing.T) {
	fb := newFakeBroker(t)
	for p := range codecs {
		spec := consumeSpec(p)
		b, err := AppendBatch(nil, spec)
		if err != nil {
			t.Fatal(err)
		}
		fb.fetch[int32(p)], fb.hwm[int32(p)] = b, int64(spec.Records[len(spec.Records)-1].OffsetDelta)+1
	}
	addr := fb.listen(t)
	for p := range codecs {
		spec := consumeSpec(p)
		out := kcat(t, "", "-C", "-q", "-b", addr, "-t", fakeTopic, "-p", strconv.Itoa(p), "-o", "beginning",
			"-c", strconv.Itoa(len(spec.Records)), "-f", "%o %K %S %T [%h]\n")
		var want strings.Builder
		for _, r := range spec.Records {
			fmt.Fprintf(&want, "%d %d %d %d [%s]\n", r.OffsetDelta, kcatLen(r.Key), kcatLen(r.Value), r.Timestamp, kcatHeaders(r.Headers))
		}
		if out != want.String() {
			t.Fatalf("%s: kcat read\n%s\nwant\n%s", spec.Compression, out, want.String())
		}
	}
}

// kcatLen is kcat's %K/%S: -1 for null.
func kcatLen(b []byte) int {
	if b == nil {
		return -1
	}
	return len(b)
}

// kcatHeaders is kcat's %h: key=value, comma-separated ("NULL" for null).
func kcatHeaders(hs []Header) string {
	var parts []string
	for _, h := range hs {
		v := string(h.Value)
		if h.Value == nil {
			v = "NULL"
		}
		parts = append(parts, h.Key+"="+v)
	}
	if parts == nil {
		return ""
	}
	return strings.Join(parts, ",")
}

// TestKcatProduces: librdkafka produces with every codec; DecodeBatches and
// ValidateProduce accept its batches and every record arrives as sent.
func TestKcatProduces(t *testing.T) {
	fb := newFakeBroker(t)
	addr := fb.listen(t)
	for p, c := range codecs {
		var in strings.Builder
		for i := range 20 {
			fmt.Fprintf(&in, "key-%d:%s\n", i, strings.Repeat(fmt.Sprintf("value %d ", i), 30))
		}
		kcat(t, in.String(), "-P", "-q", "-b", addr, "-t", fakeTopic, "-p", strconv.Itoa(p), "-K:", "-z", c.String(), "-H", "n=1")
		fb.mu.Lock()
		batches := fb.produced[int32(p)]
		fb.mu.Unlock()
		var got []Record
		for _, b := range batches {
			if b.Compression != c {
				t.Fatalf("kcat's batch is %s, want %s", b.Compression, c)
			}
			got = append(got, b.Records...)
		}
		if len(got) != 20 {
			t.Fatalf("%s: %d records", c, len(got))
		}
		for i, r := range got {
			if string(r.Key) != fmt.Sprintf("key-%d", i) || string(r.Value) != strings.Repeat(fmt.Sprintf("value %d ", i), 30) ||
				len(r.Headers) != 1 || r.Headers[0].Key != "n" || string(r.Headers[0].Value) != "1" {
				t.Fatalf("%s: record %d: %+v", c, i, r)
			}
		}
	}
}

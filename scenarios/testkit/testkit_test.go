package testkit

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fatalTB records Fatalf and ends the goroutine as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWaitForFailsNamingWhat(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		waitFor(f, "the impossible", 30*time.Millisecond, func() bool { return false })
		f.msg = "returned"
	}()
	<-done
	if want := "timed out after 30ms waiting for the impossible"; f.msg != want {
		t.Fatalf("failure %q, want %q", f.msg, want)
	}
}

func TestWaitForPollsUntilTheCondition(t *testing.T) {
	calls := 0
	took := WaitFor(t, "the tenth call", func() bool { calls++; return calls == 10 })
	if calls != 10 {
		t.Fatalf("cond called %d times, want 10", calls)
	}
	// Ten calls: nine backoffs of 1, 2, 4, ... ms capped at 50 ms.
	if took < 150*time.Millisecond {
		t.Errorf("ten polls took %v, want at least the backoff's 1+2+4+...+50 ms", took)
	}
	if took := WaitFor(t, "a condition that holds", func() bool { return true }); took > time.Second {
		t.Errorf("a condition that holds at once took %v", took)
	}
}

func TestWaitForAnotherGoroutine(t *testing.T) {
	var mu sync.Mutex
	done := false
	go func() {
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		done = true
		mu.Unlock()
	}()
	WaitFor(t, "the goroutine", func() bool { mu.Lock(); defer mu.Unlock(); return done })
}

func TestClock(t *testing.T) {
	c := NewClock(1_000)
	if c.Now() != 1_000 || !c.Time().Equal(time.Unix(0, 1_000)) {
		t.Fatalf("new clock reads %d (%v)", c.Now(), c.Time())
	}
	c.Advance(time.Second)
	if c.Now() != 1_000+int64(time.Second) {
		t.Fatalf("advanced clock reads %d", c.Now())
	}
	c.Set(5)
	if c.Now() != 5 {
		t.Fatalf("set clock reads %d", c.Now())
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Advance(1)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if c.Now() != 5+8000 {
		t.Fatalf("after concurrent advances the clock reads %d, want %d", c.Now(), 5+8000)
	}
}

func TestLoggerAfterTheTest(t *testing.T) {
	var log *slog.Logger
	t.Run("sub", func(t *testing.T) {
		log = Logger(t, slog.LevelInfo)
		log.Info("during the test", "k", 1)
		log.Debug("below the level")
	})
	log.Warn("after the test ended: dropped, not a panic")
}

package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/raidq/raidq/bus"
)

// Lease is a time-bounded claim on a single-owner job (the fan-out reader
// of one partition). Data carries the holder's progress so a successor
// resumes from it.
type Lease struct {
	Holder  string `json:"holder"`
	Expires int64  `json:"expires"` // unix ns, holder's clock
	Data    []byte `json:"data,omitempty"`
}

func leaseKey(name string) string { return "lease." + name }

// ReadLease returns the lease and its revision (0: none).
func (s *Store) ReadLease(ctx context.Context, name string) (Lease, uint64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	e, err := s.groups.Get(ctx, leaseKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Lease{}, 0, nil
	}
	if err != nil {
		return Lease{}, 0, err
	}
	var l Lease
	if err := decode(e.Value(), &l); err != nil {
		return l, 0, err
	}
	return l, e.Revision(), nil
}

// AcquireLease takes the lease for holder if it is free, expired or
// already holder's; it returns the lease as it now stands, its revision,
// and whether holder has it.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time) (Lease, uint64, bool, error) {
	if err := bus.ValidName("lease holder", holder); err != nil {
		return Lease{}, 0, false, err
	}
	cur, rev, err := s.ReadLease(ctx, name)
	if err != nil {
		return cur, rev, false, err
	}
	if rev != 0 && cur.Holder != holder && now.UnixNano() < cur.Expires {
		return cur, rev, false, nil
	}
	next := Lease{Holder: holder, Expires: now.Add(ttl).UnixNano(), Data: cur.Data}
	nrev, err := s.writeLease(ctx, name, next, rev)
	if errors.Is(err, ErrFenced) {
		return cur, rev, false, nil // someone else got there first
	}
	return next, nrev, err == nil, err
}

// TakeLease writes the lease as holder's if it is still at revision rev
// (0: absent), keeping data; the caller decided it is free (released,
// already holder's, or lapsed on the caller's own clock, core.LeaseWatch).
// It fails with ErrFenced if the lease changed meanwhile.
func (s *Store) TakeLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time, rev uint64, data []byte) (Lease, uint64, error) {
	if err := bus.ValidName("lease holder", holder); err != nil {
		return Lease{}, 0, err
	}
	next := Lease{Holder: holder, Expires: now.Add(ttl).UnixNano(), Data: data}
	nrev, err := s.writeLease(ctx, name, next, rev)
	return next, nrev, err
}

// RenewLease extends holder's lease (revision rev) and stores data; it
// fails with ErrFenced if the lease changed hands.
func (s *Store) RenewLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time, rev uint64, data []byte) (uint64, error) {
	return s.writeLease(ctx, name, Lease{Holder: holder, Expires: now.Add(ttl).UnixNano(), Data: data}, rev)
}

// ReleaseLease gives the lease up (expires now) keeping its data.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string, rev uint64, data []byte) error {
	_, err := s.writeLease(ctx, name, Lease{Holder: holder, Expires: 0, Data: data}, rev)
	return err
}

func (s *Store) writeLease(ctx context.Context, name string, l Lease, rev uint64) (uint64, error) {
	b, _ := json.Marshal(l)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var nrev uint64
	var err error
	if rev == 0 {
		nrev, err = s.groups.Create(ctx, leaseKey(name), b)
	} else {
		nrev, err = s.groups.Update(ctx, leaseKey(name), b, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: lease %s", ErrFenced, name)
	}
	return nrev, err
}

// Package sim is raidq's deterministic simulation, in the style of
// FoundationDB's simulator and TigerBeetle's VOPR: the pure protocol cores
// of actors/core (Owner, Writer, Reader) run against simulated nodes,
// disks, clocks and a lossy network, all driven by one seeded random
// source and one discrete event queue ordered by (time, sequence). There
// are no goroutines and no real time, so a seed replays exactly.
//
// Run(cfg) plays one scenario and checks the properties the protocol
// promises: every acked record delivered by every reader, nothing invented,
// nothing delivered twice, positions only forward, the same sequence for
// every reader, no in-doubt report for an acked stripe, W durable shards
// behind every ack, write-once slots (checked as they happen) and, within
// the fault model, no failed send. Result lists the violations, counts and
// the op log (one compact line per event).
//
// Two exceptions are allowed, and counted, because the protocol makes them:
// a stripe committed at two offsets may be delivered at the later copy by a
// reader that found the earlier one in doubt (§5 skips it without waiting),
// so readers may place it differently ("moved"); and a restarted reader,
// resumed after its last delivered record with no dedupe memory, may
// deliver such a stripe again at the other offset ("redelivered";
// subscribers dedupe by stripe id, §8).
//
// The fault model, and why each bound is there:
//   - node crashes lose the owners' memory and every write not yet durable
//     (such writes are never answered); a restarted node rebuilds its owners
//     from its durable slots and seals. At most n-W nodes are down at once,
//     each crash lasts less than the readers' InDoubtWait, and a node stays
//     up a while between crashes: beyond that a committed stripe may be
//     unreadable for longer than a reader waits, which the protocol reports
//     as in doubt (and repair, not simulated here, fixes).
//   - messages take 0.1-5 ms, plus 50-150 ms to and from slow nodes; any
//     message may be lost and a write request may arrive twice.
//   - clocks: producers are off by up to ±200 ms (±1 s in one seed in five,
//     beyond F, to exercise the writer's skew correction), nodes ±20 ms,
//     readers ±50 ms (D=500 ms >= A + skew keeps readers behind every
//     accept window).
//   - readers restart: the fan-out reader's failover, resuming after the
//     last record it delivered.
//   - conflict mode: producers share a clock, quantize it (1 ms or 100 µs)
//     and start their stripes together, so they race for the same offsets.
package sim

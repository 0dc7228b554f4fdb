// Package sim is raidq's deterministic simulation, in the style of
// FoundationDB's simulator and TigerBeetle's VOPR: the pure protocol cores
// of actors/core (Owner, Writer, Reader, and for the metadata side
// Liveness, PlanGroup, PauseAfter, LeaseWatch and BirthInput) run against
// simulated nodes, disks, clocks, a metadata KV and a lossy network, all
// driven by one seeded random source and one discrete event queue ordered
// by (time, sequence). There is no real time, so a seed replays exactly.
//
// Drivers move from copies here to the code that ships, one at a time
// (docs/design.md#the-simulation): the fan-out lease holders are
// actors/fanout's Manager itself, run in a testing/synctest bubble whose
// fake clock is the simulation's true time, its ports (KV, readers, bus)
// simulated (bubble.go, lease.go, lease_ports.go). Run takes the test's
// *testing.T for that bubble. So are the consumer group's members: the
// root package's Consumer, started by actors/drillhooks.GroupConsumer
// over simulated ports (group.go, group_ports.go). So are the nodes'
// repair loops (actors/node's RepairLoop, repair.go, repair_ports.go) and
// the readers: the fan-out readers and the members' partition readers are
// actors.Client.NewReader readers, a client process each with its own
// skewed clock, reaching the nodes over a simulated bus (bus_sim.go: the
// client's actors.Bus port with the wire encoding and the network model
// below; reader.go). So are the producers (actors.Client.NewProducer,
// the producer actor around core.Writer, producer.go) and the repair
// loops' re-appends (actors.Client.Reappend, repair_ports.go), over the
// same bus. Still a copy: the node's request path and slot owner
// (node.go, which answers the bus's wire requests).
//
// Run(cfg) plays one scenario and checks the properties the protocol
// promises: every acked record delivered by every reader, nothing invented,
// nothing delivered twice, positions only forward (a late record from a
// deferred in-doubt offset aside), the same records at the same positions
// for every reader, every acked stripe a reader reported in doubt still
// delivered by it, W durable shards behind every ack, write-once slots
// (checked as they happen), within the fault model no failed send, and
// progress: every acked record delivered by every reader within a bound of
// becoming readable (progress.go). Beside the fan-out readers, a run may
// have a consumer group (group.go, group_ports.go, group_check.go), the
// fan-out lease's holders (lease.go), both over the metadata KV (kv.go),
// wiped nodes reborn as new incarnations (wipe.go), and the nodes' repair
// loop with the in-doubt re-append (repair.go, reappend.go); each file
// states what it models and checks. Result lists the violations, counts and the
// op log (one compact line per event).
//
// Two exceptions are allowed, and counted, because the protocol makes them:
// a stripe committed at two offsets may be delivered at the later copy by a
// reader that found the earlier one in doubt (§5 skips it without waiting),
// so readers may place it differently ("moved"); and a restarted reader,
// resumed after its last delivered record (or at its low water, below an
// in-doubt offset it still deferred) with no dedupe memory, may deliver a
// stripe again, at the same offset or at the other copy ("redelivered";
// subscribers dedupe by stripe id, §8).
//
// The fault model, and why each bound is there:
//   - node crashes lose the owners' memory and every write not yet durable
//     (such writes are never answered); a restarted node rebuilds its owners
//     from its durable slots and seals. A crash is hung (requests vanish
//     until the requester's timeout) or, for a FailFast share of them,
//     fail-fast (a killed process: every request fails at once with "no
//     responders"). At most n-W nodes are down at once and a node stays up
//     a while between crashes. Most crashes last less than the readers'
//     InDoubtWait; LongCrashes last seconds, so a committed stripe may be
//     undecodable for longer than a reader waits: the reader reports it in
//     doubt, moves on, keeps re-asking and delivers it late.
//   - a QuorumLoss takes n-W+1 nodes down together: no write commits then
//     (sends attempted meanwhile may fail, with ErrNotEnoughNodes or
//     ErrTimeout), and readers must wait for the nodes, not pass committed
//     stripes.
//   - messages take 0.1-5 ms, plus 50-150 ms to and from slow nodes; any
//     message may be lost and a write request may arrive twice.
//   - clocks (clock.go): producers are off by up to ±200 ms (±1 s in one
//     seed in five, beyond F, to exercise the writer's skew correction),
//     nodes ±20 ms (±100 ms in some seeds) plus, in some seeds, a common
//     offset of seconds, readers ±50 ms or seconds, and r0 may run fast on
//     purpose (FastReader: up to 3 s, or past SkipBehind). A reader fast
//     against the nodes by more than D-A is a misconfiguration the protocol
//     survives through the nodes' clocks: they refuse to seal their future
//     (CLOCK_AHEAD) and bound the far-behind skip.
//   - readers start a second before the writes, or far behind them
//     (ReaderBehind), or late (ReaderLate), so their first scans probe and
//     skip empty time (probe.go); they restart: the fan-out reader's
//     failover (deferred.go says where they resume).
//   - conflict mode: producers share a clock, quantize it (1 ms or 100 µs)
//     and start their stripes together, so they race for the same offsets.
//   - a scan waits scanTimeout (400 ms) for each node, and only 150 ms for
//     a node whose last scan timed out until it answers again (the reader
//     actor's SuspectTimeout). A slow node's round trip (100-300 ms) mostly
//     exceeds that, so once suspect it is rarely heard again.
//   - wipes: a node loses its whole store and is reborn with its clock set
//     back by up to seconds; below its birth (from cluster time) it answers
//     "unknown". Without repair (Config.RepairEvery) it stays so, and even
//     with repair it counts as down for good in the plan: with it at most
//     n-W-1 other nodes are down at once.
//   - the metadata KV: stalls of seconds where every call fails or hangs
//     (hung calls are applied when the stall ends, after their clients
//     gave up), one client cut off while the others reach it, lost
//     messages (rare: core.Liveness restarts every judgement on a failed
//     listing) and lost write replies (the write applied). Group members
//     and lease holders run on clocks off by up to seconds and drifting by
//     up to 2%; members crash (restarting under their id or a fresh one)
//     and leave; holders crash and stop.
//
// SeedConfig draws all of it; HardSeedConfig and -sim.hard run the kinds
// that actors/core did not survive before 3fc4af0 on their own (seeds.go).
package sim

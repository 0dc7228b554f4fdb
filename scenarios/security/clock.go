package security

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raidq/raidq"
	"github.com/raidq/raidq/actors/server"
)

// clockNode is the node the drill starts with a clock fault
// (NodeOptions.ClockFault, `raidq node --clock-fault`).
const clockNode = "n0"

// clockFaultChecks checks who may offset a node's clock: m (a producer)
// is refused by NATS; the admin may (it sets offset 0, leaving the clock
// as it is), and the node refuses an offset beyond ±1h.
func (r *run) clockFaultChecks(ctx context.Context, m *actor) {
	subject := r.subj.FaultClock(clockNode)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err := server.SetClockFault(cctx, m.c.Conn(), r.cfg.Cluster, clockNode, 5*time.Second)
	cancel()
	if err == nil {
		r.check(Check{Name: "step a node's clock", Who: m.name, Tried: "offset " + clockNode + "'s clock on " + subject,
			Got: "answered: the clock moved", Pass: false})
	} else {
		r.refusedByNATS(m, "step a node's clock", "offset "+clockNode+"'s clock by 5s on "+subject, "Publish to", subject)
	}

	admin, err := r.connect("ops", raidq.ClientAuth{User: "ops", Password: r.pw["ops"]})
	if err != nil {
		r.check(Check{Name: "admin steps a node's clock", Who: "ops", Tried: "connect", Want: "works", Got: err.Error()})
		return
	}
	cctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	rep, err := server.SetClockFault(cctx, admin.c.Conn(), r.cfg.Cluster, clockNode, 0)
	cancel()
	got := fmt.Sprintf("node answered offset %v, clock %s", time.Duration(rep.OffsetNS), time.Unix(0, rep.Clock).UTC().Format(time.RFC3339Nano))
	if err != nil {
		got = err.Error()
	}
	r.check(Check{Name: "admin steps a node's clock", Who: "ops", Tried: "offset " + clockNode + "'s clock by 0 on " + subject,
		Want: "works", Got: got, Pass: err == nil && rep.OffsetNS == 0 && rep.Clock > 0})

	cctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	_, err = server.SetClockFault(cctx, admin.c.Conn(), r.cfg.Cluster, clockNode, 2*time.Hour)
	cancel()
	got = "accepted"
	if err != nil {
		got = err.Error()
	}
	r.check(Check{Name: "clock offset beyond ±1h", Who: "ops", Tried: "offset " + clockNode + "'s clock by 2h",
		Got: got, Pass: errors.Is(err, server.ErrClockFault)})
}

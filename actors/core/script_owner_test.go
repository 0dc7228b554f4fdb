package core_test

// Owner commands of the scripts (script_test.go):
//
//	owner [lo=0s] [accept=250ms] [future=250ms] [grid=1024] [birth=] [seal=]
//	                          a new Owner of the range starting at T0+lo
//	write offset= id=pP/S [index=0] [crc=1] [now=] [repair]
//	                          Owner.Write at node time now (repair: the wire's
//	                          repair flag)
//	repair-write offset= id= [index=0] [crc=1] [now=] [corrupt]
//	                          Owner.RepairWrite (the node's own repair loop)
//	scan from= to= [now=] [seal]
//	                          Owner.Scan (seal: a sealing scan)
//	close from= to= clock=    Owner.Close, the closing scan at close clock
//	raise-floor floor=        Owner.RaiseFloor
//	set-repaired upto= [holes=(..)]
//	                          Owner.SetRepaired
//	occupied offset=          Owner.Occupied
//
// A decision prints as its status and its flags (persist, barrier,
// replace, persist-seal, unknown, seal=, closed=), then ": detail".

import (
	"strings"

	"github.com/raidq/raidq/actors/core"
	"github.com/raidq/raidq/stripe"
)

func (x *driver) ownerCmd(emit func(string, ...any)) bool {
	d := x.d
	if d.Cmd == "owner" {
		p := x.params()
		lo := uint64(x.at("lo", 0))
		cfg := core.OwnerConfig{Topic: "t", Lo: core.RangeStart(lo), Accept: int64(p.AcceptWindow), Future: int64(p.FutureBound), Grid: p.Grid}
		if d.HasArg("birth") {
			cfg.Birth = x.off("birth")
		}
		var seal uint64
		if d.HasArg("seal") {
			seal = x.off("seal")
		}
		x.owner = core.NewOwner(cfg, seal, nil)
		emit("owner [%s,%s) accept=%s future=%s grid=%d birth=%s seal=%s", offs(cfg.Lo), offs(x.owner.Hi()),
			dura(cfg.Accept), dura(cfg.Future), cfg.Grid, offs(cfg.Birth), offs(seal))
		return true
	}
	switch d.Cmd {
	case "write", "repair-write", "scan", "close", "raise-floor", "set-repaired", "occupied":
	default:
		return false
	}
	o := x.owner
	if o == nil {
		d.Fatalf(x.t, "no owner (run owner first)")
	}
	switch d.Cmd {
	case "write", "repair-write":
		off := x.off("offset")
		h := &stripe.ShardHeader{ID: x.id("id"), Index: uint8(x.num("index", 0)), Offset: off, DataCRC: uint32(x.num("crc", 1))}
		var wd core.WriteDecision
		if d.Cmd == "write" {
			wd = o.Write(x.now, off, h, d.HasArg("repair"))
		} else {
			wd = o.RepairWrite(x.now, off, h, d.HasArg("corrupt"))
		}
		emit("%s", decision(wd.Status.String(), wd.Detail, flag(wd.Persist, "persist"), flag(wd.Barrier, "barrier"), flag(wd.Replace, "replace")))
	case "scan", "close":
		from, to := x.off("from"), x.off("to")
		var sd core.ScanDecision
		if d.Cmd == "scan" {
			sd = o.Scan(x.now, from, to, d.HasArg("seal"))
		} else {
			x.need("clock")
			sd = o.Close(x.at("clock", 0), from, to)
		}
		closed := ""
		if d.Cmd == "close" {
			closed = "closed=" + offs(sd.Closed)
		}
		emit("%s", decision(sd.Status.String(), sd.Detail, "seal="+offs(sd.Seal), closed, flag(sd.PersistSeal, "persist-seal"), flag(sd.Unknown, "unknown")))
	case "raise-floor":
		x.need("floor")
		o.RaiseFloor(x.at("floor", 0))
		emit("ok")
	case "set-repaired":
		var holes []uint64
		a, _ := d.Arg("holes")
		for _, v := range a.Vals {
			holes = append(holes, T0+uint64(x.parseDur(v)))
		}
		o.SetRepaired(x.off("upto"), holes)
		emit("ok")
	case "occupied":
		emit("%v", o.Occupied(x.off("offset")))
	}
	return true
}

func flag(on bool, s string) string {
	if on {
		return s
	}
	return ""
}

// decision joins a status, its non-empty flags and its detail.
func decision(status, detail string, flags ...string) string {
	parts := []string{status}
	for _, f := range flags {
		if f != "" {
			parts = append(parts, f)
		}
	}
	s := strings.Join(parts, " ")
	if detail != "" {
		s += ": " + detail
	}
	return s
}

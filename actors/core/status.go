package core

import "fmt"

// Status is a node's answer to one slot request. Its values are the wire
// values of bus.Status (the bus package converts with a plain cast and its
// tests check that the two agree).
type Status uint8

const (
	StatusOK         Status = iota + 1 // stored (and durable), or the same shard was already there
	StatusConflict                     // the slot holds a shard of another stripe
	StatusSealed                       // below the seal or older than now-A
	StatusClockAhead                   // offset beyond now+F on the node's clock
	StatusBadRequest                   // malformed or misrouted request
	StatusStoreError                   // the node's store failed
	StatusBusy                         // the node is overloaded; try elsewhere
	StatusUnknown                      // the node's incarnation is younger than the range
	StatusWrongNode                    // the request reached a node outside the ensemble position
	StatusClockOff                     // the node's clock is off cluster time; it takes no writes (clock.go)
	// StatusNoReply is never sent by a node: the client records it when a
	// request timed out or found no responder.
	StatusNoReply Status = 100
)

var statusNames = map[Status]string{
	StatusOK: "OK", StatusConflict: "CONFLICT", StatusSealed: "SEALED", StatusClockAhead: "CLOCK_AHEAD",
	StatusBadRequest: "BAD_REQUEST", StatusStoreError: "STORE_ERROR", StatusBusy: "BUSY",
	StatusUnknown: "UNKNOWN", StatusWrongNode: "WRONG_NODE", StatusClockOff: "CLOCK_OFF", StatusNoReply: "NO_REPLY",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("STATUS(%d)", uint8(s))
}

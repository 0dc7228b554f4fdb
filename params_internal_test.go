package raidq

import (
	"reflect"
	"testing"
	"time"

	"github.com/raidq/raidq/stripe/quorum"
)

// TestParamsMirrorQuorum: Params has exactly the fields of the
// protocol's quorum.Params, and the conversions carry every one of them,
// so a field added to the protocol cannot be dropped on the way.
func TestParamsMirrorQuorum(t *testing.T) {
	api, proto := reflect.TypeFor[Params](), reflect.TypeFor[quorum.Params]()
	if api.NumField() != proto.NumField() {
		t.Fatalf("Params has %d fields, quorum.Params %d", api.NumField(), proto.NumField())
	}
	for i := range api.NumField() {
		a, q := api.Field(i), proto.Field(i)
		if a.Name != q.Name || a.Type != q.Type {
			t.Errorf("field %d: Params.%s %v, quorum.Params.%s %v", i, a.Name, a.Type, q.Name, q.Type)
		}
	}
	q := quorum.Params{N: 7, K: 3, W: 5, ReadDelay: 1 * time.Second, AcceptWindow: 2 * time.Second,
		FutureBound: 3 * time.Second, MaxSkew: 4 * time.Second, Grid: 512}
	if got := paramsOf(q).quorum(); got != q {
		t.Fatalf("round trip: %+v, want %+v", got, q)
	}
	if got, want := DefaultParams().String(), "n=6 k=4 W=4 D=250ms A=250ms F=250ms skew=250ms grid=1024"; got != want {
		t.Errorf("String: %q, want %q", got, want)
	}
	if err := ValidateParams(Params{}); err == nil {
		t.Error("zero Params pass ValidateParams")
	}
}
